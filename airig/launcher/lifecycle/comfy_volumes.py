"""ComfyUI's volumes at `up`, before the compute stack starts.

yanwk/comfyui-boot copies its bundled ComfyUI into ``/root/ComfyUI`` only when
``main.py`` is missing there (``runner-scripts/entrypoint.sh`` of every tag), so whatever
keeps ``/root`` between containers keeps the first image's code under every later
image's torch. Two things keep it:

- an older kit's one volume on the whole ``/root`` (``<prefix>-comfyui-data``): its
  models and user files are moved, once, into the volumes 02-compute now mounts at
  upstream's paths (``airig/provision/comfyui_move.py`` does it in the kit's image), and
  the user is told in one line;
- the anonymous volume most tags declare on ``/root`` (``VOLUME /root`` in cpu/,
  cu126-slim/, rocm7/ ... Dockerfiles), which Compose hands from the old container to
  the one that replaces it (``--renew-anon-volumes`` is off by default): a ComfyUI
  container whose image is not the one this `up` runs is removed with its anonymous
  volumes, so the new one starts from its own image's code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.markup import escape

from airig.common.errors import DockerError
from airig.launcher.compose.container import SERVICE_LABEL
from airig.launcher.compose.docker import PROJECT_LABEL, Docker, engine_errors
from airig.launcher.compose.plan import StackPlan, project_names
from airig.launcher.images import ImageSelection
from airig.launcher.settings import Settings
from airig.provision.comfyui_move import FOLDERS, subdir

COMPUTE_STACK = "02-compute"
LEGACY_VOLUME = "comfyui-data"  # an older kit's one volume on ComfyUI's /root
VOLUMES = list(FOLDERS.values())
MODELS_VOLUME = FOLDERS["ComfyUI/models"]  # kept by `down --volumes --keep-models`
USER_VOLUMES = [v for v in VOLUMES if v != MODELS_VOLUME]
SERVER_SERVICES = ("comfyui-cpu", "comfyui-gpu-nvidia", "comfyui-gpu-amd", "comfyui-gpu-intel")


def prepare(
    settings: Settings,
    docker: Docker,
    stack: StackPlan,
    images: ImageSelection | None,
    console: Console,
) -> None:
    """Both steps; each does nothing when there is nothing to do."""
    line = move_legacy_volume(settings, docker)
    if line is not None:
        console.print(line, highlight=False, soft_wrap=True)
    comfyui = next((c for c in images.choices if c.service == "comfyui"), None) if images else None
    if comfyui is not None:
        retire_stale_servers(docker, stack.project, comfyui.image)


def move_legacy_volume(settings: Settings, docker: Docker) -> str | None:
    """Move an older kit's /root volume's user files into the new volumes; the line to
    show, or None when there is no such volume or it was moved before."""
    import docker.errors as errors

    sdk = docker.sdk()
    prefix = settings.project_prefix
    legacy = f"{prefix}-{LEGACY_VOLUME}"
    try:
        sdk.volumes.get(legacy)
    except errors.NotFound:
        return None
    _release(sdk, legacy, set(project_names(settings).values()))
    mounts = {legacy: {"bind": "/old", "mode": "rw"}}
    mounts |= {f"{prefix}-{v}": {"bind": f"/new/{subdir(v)}", "mode": "rw"} for v in VOLUMES}
    try:
        output = docker.run_to_end(
            settings.image,
            ["python", "-m", "airig.provision.comfyui_move"],
            volumes=mounts,
            # as the init containers: root without root's powers but reading and writing
            # files whoever owns them
            user="0:0",
            cap_drop=["ALL"],
            cap_add=["DAC_OVERRIDE", "FOWNER"],
            security_opt=["no-new-privileges:true"],
            read_only=True,
        )
    except errors.ContainerError as exc:
        raise DockerError(
            f"moving ComfyUI's files out of volume {legacy} failed: {_last_line(exc.stderr)}",
            "nothing was lost (each file is deleted only once copied); free space or fix "
            "the cause, then run up again",
        ) from None
    except errors.DockerException as exc:
        raise DockerError(f"moving ComfyUI's files out of volume {legacy}: {exc}") from None
    return summary_line(json.loads(_last_line(output)), legacy, prefix)


def summary_line(summary: dict[str, Any], legacy: str, prefix: str) -> str | None:
    """The one line for the user; None when the volume was moved on an earlier `up`."""
    if summary.get("already"):
        return None
    moved: dict[str, int] = summary.get("moved") or {}
    total = sum(moved.values())
    parts = ", ".join(f"{n} → {prefix}-{v}" for v, n in moved.items() if n)
    left = int(summary.get("left") or 0)
    kept = f"; {left} already in the new volumes stayed in {legacy}" if left else ""
    files = "1 file" if total == 1 else f"{total} files"
    what = f"moved {files} ({parts})" if total else "found no models or user files"
    return (
        f"ComfyUI: {escape(what)} out of the old volume {escape(legacy)}{escape(kept)}. "
        f"It now holds only the old ComfyUI code: `docker volume rm {escape(legacy)}` "
        "when you no longer need it."
    )


def _release(sdk: Any, volume: str, projects: set[str]) -> None:
    """Remove this rig's containers that mount ``volume`` (Compose makes them again with
    the new mounts); another container still running on it stops the move."""
    with engine_errors(f"listing the containers of volume {volume}"):
        # a container gone between the list and its inspect needs no removing
        users = sdk.containers.list(all=True, filters={"volume": volume}, ignore_removed=True)
    for container in users:
        if container.labels.get(PROJECT_LABEL) in projects:
            with engine_errors(f"removing {container.name}"):
                container.remove(force=True, v=True)
        elif container.status == "running":
            raise DockerError(
                f"volume {volume} is in use by container {container.name}, so ComfyUI's "
                "files cannot be moved out of it",
                f"stop it (docker stop {container.name}), then run up again",
            )


def retire_stale_servers(docker: Docker, project: str, image: str) -> list[str]:
    """Remove this project's ComfyUI containers that run another image than ``image``
    (or an older build of its tag), with their anonymous volumes. Returns their names."""
    import docker.errors as errors

    sdk = docker.sdk()
    try:
        wanted: str | None = sdk.images.get(image).id
    except errors.ImageNotFound:
        wanted = None  # Compose pulls it: any container now runs something else
    except errors.DockerException as exc:
        raise DockerError(f"inspecting the image {image}: {exc}") from None
    return _remove(c for c in _servers(sdk, project) if c.attrs.get("Image") != wanted)


def remove_servers(docker: Docker, project: str) -> list[str]:
    """`down`: remove the ComfyUI containers with their anonymous /root volume, which a
    plain `compose down` leaves behind, one ComfyUI copy per `down`."""
    return _remove(_servers(docker.sdk(), project))


def _servers(sdk: Any, project: str) -> list[Any]:
    with engine_errors("listing ComfyUI's containers"):
        found = sdk.containers.list(
            all=True, filters={"label": f"{PROJECT_LABEL}={project}"}, ignore_removed=True
        )
    return [c for c in found if c.labels.get(SERVICE_LABEL) in SERVER_SERVICES]


def _remove(containers: Iterable[Any]) -> list[str]:
    import docker.errors as errors

    removed = []
    for container in containers:
        with engine_errors(f"removing {container.name}"):
            try:
                container.remove(force=True, v=True)
            except errors.NotFound:
                continue  # removed since it was listed: nothing to do
        removed.append(container.name)
    return removed


def _last_line(data: bytes | str | None) -> str:
    text = data.decode(errors="replace") if isinstance(data, bytes) else (data or "")
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else "no output"
