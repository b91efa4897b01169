"""Can Docker hand the GPU to a container?

Two sources, in order of trust:
1. A live probe: a short container started with the exact device request the profile's
   compose file uses. Its success, or the engine's exact error text, decides.
2. ``docker info``: a registered ``nvidia`` runtime or CDI devices named ``nvidia.com/...``
   are hints. Their absence proves nothing: dockerd enables ``--gpus`` whenever
   ``nvidia-container-runtime-hook`` is on its PATH, which ``docker info`` does not show.

The probe only uses an image already present locally (never pulls), labels its container
and removes it even when the engine refuses to start it. Starting a GPU container can take
many seconds (nvidia-container-cli initialises every card when persistence mode is off), so
the caller hands in a client with a long timeout; a timeout is a finding, never a crash.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from docker.errors import APIError, ContainerError, DockerException, ImageNotFound
from docker.types import DeviceRequest
from requests.exceptions import RequestException, Timeout

from airig.launcher.compose.docker import one_off

PROBE_COMMAND = ["true"]
NVIDIA_DRIVER_ERROR = 'could not select device driver "nvidia"'
PROBE_TIMED_OUT = "Docker did not answer in time while starting the probe container"
# The SDK raises its own family, but a timed-out or dropped HTTP call to the engine comes
# out of `requests` (ReadTimeout, ConnectionError), which is not part of it.
ENGINE_ERRORS = (DockerException, RequestException)


@dataclass(frozen=True)
class DockerGpuSupport:
    """What ``docker info`` says about GPU support."""

    reachable: bool
    error: str | None = None
    runtimes: tuple[str, ...] = ()
    default_runtime: str | None = None
    cdi_spec_dirs: tuple[str, ...] = ()
    cdi_devices: tuple[str, ...] = ()

    @property
    def nvidia_runtime(self) -> bool:
        return "nvidia" in self.runtimes

    @property
    def nvidia_cdi(self) -> bool:
        return any(device.startswith("nvidia.com/") for device in self.cdi_devices)

    @property
    def nvidia_hint(self) -> bool:
        return self.nvidia_runtime or self.nvidia_cdi

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(nvidia_runtime=self.nvidia_runtime, nvidia_cdi=self.nvidia_cdi)
        return data


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of one probe container: passed | failed | not run."""

    vendor: str
    status: str
    detail: str
    image: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_docker_info(info: Mapping[str, Any]) -> DockerGpuSupport:
    """GPU hints from a ``client.info()`` dict. Old API versions omit the CDI keys."""
    devices = info.get("DiscoveredDevices") or []
    return DockerGpuSupport(
        reachable=True,
        runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
        default_runtime=info.get("DefaultRuntime"),
        cdi_spec_dirs=tuple(info.get("CDISpecDirs") or ()),
        cdi_devices=tuple(str(device.get("ID", "")) for device in devices),
    )


def query_docker(client: Any) -> DockerGpuSupport:
    """``read_docker_info`` on a live client; an unreachable engine is a finding."""
    try:
        return read_docker_info(client.info())
    except ENGINE_ERRORS as exc:
        return DockerGpuSupport(reachable=False, error=str(exc))


def nvidia_run_options() -> dict[str, Any]:
    """The gpu-nvidia profile's request: all GPUs through the "nvidia" device driver."""
    return {"device_requests": [DeviceRequest(driver="nvidia", count=-1, capabilities=[["gpu"]])]}


def amd_run_options(gids: Iterable[int]) -> dict[str, Any]:
    """The gpu-amd profile's devices and groups. Paths are the engine host's own nodes."""
    return {
        "devices": ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"],
        "group_add": [str(gid) for gid in gids],
    }


def first_local_image(client: Any, images: Sequence[str]) -> str | None:
    """The first of ``images`` present in the local store (nothing is pulled)."""
    for image in images:
        try:
            client.images.get(image)
            return image
        except ImageNotFound:
            continue
    return None


def probe(
    client: Any, vendor: str, images: Sequence[str], run_options: Mapping[str, Any]
) -> ProbeResult:
    """Run ``true`` in a local image with ``run_options``; report the engine's verdict."""
    try:
        image = first_local_image(client, images)
    except ENGINE_ERRORS as exc:
        return ProbeResult(vendor, "not run", f"Docker not reachable: {exc}")
    if image is None:
        wanted = ", ".join(images) or "none given"
        return ProbeResult(vendor, "not run", f"no probe image present locally ({wanted})")
    try:
        # The entrypoint, not the command: images such as ollama/ollama set an ENTRYPOINT.
        with one_off(client, image, "airig-gpu-probe", vendor, entrypoint=PROBE_COMMAND,
                     remove=True, detach=False, **run_options):  # fmt: skip
            pass
        return ProbeResult(vendor, "passed", "container started with the GPU devices", image)
    except ContainerError as exc:
        # The engine started the container, so it accepted the devices; only `true` failed.
        detail = f"devices accepted (probe command exited {exc.exit_status})"
        return ProbeResult(vendor, "passed", detail, image)
    except APIError as exc:
        message = engine_message(exc)
        if "executable file not found" in message:
            detail = f"image {image} has no `true` to run; pass another probe image"
            return ProbeResult(vendor, "not run", detail, image)
        return ProbeResult(vendor, "failed", message, image)
    except Timeout as exc:
        return ProbeResult(vendor, "failed", f"{PROBE_TIMED_OUT} ({exc})", image)
    except RequestException as exc:
        return ProbeResult(vendor, "not run", f"Docker not reachable: {exc}", image)
    except DockerException as exc:
        return ProbeResult(vendor, "failed", str(exc), image)


def engine_message(exc: APIError) -> str:
    """The daemon's own words (``explanation``), not the HTTP wrapper around them."""
    explanation = exc.explanation
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return str(explanation or exc)
