"""The proof container: the service's image, the devices and groups Compose gives it.

Never pulls (`up` pulls first); no network; labelled as the GPU probe's containers are
and removed however the run ends. A server proof (Ollama) is read until its ready text
appears, then stopped; a script proof until it exits. A wait past the timeout is an
outcome (``timed_out``), never a crash; an engine that refuses the devices is quoted.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import DeviceRequest
from requests.exceptions import RequestException

from airig.launcher.compose.docker import one_off
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware.docker_gpu import engine_message
from airig.launcher.proofs.judge import Outcome
from airig.launcher.proofs.scripts import ProofSpec

POLL_S = 0.5
SETTLE_S = 2.0  # after the ready text: the other devices' discovery lines follow within it
MAX_OUTPUT = 256 * 1024  # bytes of log read back: a chatty image cannot fill the memory


def run_options(gpu: GpuInfo, gids: tuple[int, ...] = ()) -> dict[str, Any]:
    """The devices Compose gives a service pinned to ``gpu`` (gpu_workers.py ``_pin``): NVIDIA
    by device id through the nvidia driver; AMD /dev/kfd and the card's render node;
    Intel the render node; with the groups that own them."""
    if gpu.vendor == "nvidia":
        ids = [str(gpu.index if gpu.index is not None else 0)]
        request = DeviceRequest(driver="nvidia", device_ids=ids, capabilities=[["gpu"]])
        return {"device_requests": [request]}
    node = f"/dev/dri/{gpu.render_node}" if gpu.render_node else "/dev/dri"
    devices = [f"{node}:{node}:rwm"]
    if gpu.vendor == "amd":
        devices.insert(0, "/dev/kfd:/dev/kfd:rwm")
    return {"devices": devices, "group_add": [str(g) for g in gids]}


def image_id(client: Any, image: str) -> str | None:
    """The engine's id of the local ``image`` (None: not pulled)."""
    try:
        return str(client.images.get(image).id)
    except ImageNotFound:
        return None


def run_proof(
    client: Any, image: str, spec: ProofSpec, options: Mapping[str, Any], timeout: float
) -> Outcome:
    started = time.monotonic()
    try:
        with one_off(
            client, image, f"airig-proof-{spec.service}", f"proof-{spec.service}",
            entrypoint=list(spec.entrypoint), command=list(spec.command) or None,
            environment=dict(spec.env), detach=True, **options,
        ) as container:  # fmt: skip
            return _watch(container, spec, timeout, started)
    except ImageNotFound:
        return Outcome(None, "", not_run=f"the image {image} is not pulled")
    except APIError as exc:  # the engine refused to create or start it: quoted
        message = engine_message(exc)
        if "executable file not found" in message:  # the image, not the GPU: not judged
            return Outcome(None, "", not_run=f"the image {image} has no {spec.entrypoint[0]}")
        return Outcome(None, message, seconds=time.monotonic() - started)
    except (DockerException, RequestException) as exc:
        return Outcome(None, "", not_run=f"Docker not reachable: {exc}")


def _watch(container: Any, spec: ProofSpec, timeout: float, started: float) -> Outcome:
    deadline = started + timeout
    seen_at: float | None = None
    while True:
        exit_code = _exit_code(container)
        output = _logs(container)
        now = time.monotonic()
        if exit_code is not None:
            return Outcome(exit_code, output, seconds=now - started)
        if spec.until and spec.until in output:
            seen_at = seen_at or now
            if now - seen_at >= SETTLE_S:
                return Outcome(None, output, seconds=now - started)
        if now >= deadline:
            return Outcome(None, output, timed_out=True, seconds=now - started)
        time.sleep(POLL_S)


def _exit_code(container: Any) -> int | None:
    try:
        container.reload()
    except NotFound:
        return -1
    state = container.attrs.get("State") or {}
    if state.get("Status") in ("exited", "dead"):
        return int(state.get("ExitCode", -1))
    return None


def _logs(container: Any) -> str:
    raw = container.logs(stdout=True, stderr=True)
    return bytes(raw[-MAX_OUTPUT:]).decode("utf-8", "replace")
