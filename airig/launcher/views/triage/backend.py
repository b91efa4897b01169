"""Which backend each compute service uses (cuda, rocm, vulkan, xpu or cpu), read from
what its container got from the engine (device requests, devices, environment, image),
never from what the launcher meant to give it: a hand-edited overlay, a stale container
or a dropped device shows here as it is.

Pure, like ``classify.py``: ContainerFacts in, one ``ServiceBackend`` per container out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from airig.launcher.views.triage.facts import ContainerFacts, DeviceRequest

COMPUTE = ("ollama", "comfyui", "whisper")
KFD = "/dev/kfd"
DRI = "/dev/dri"
# Device-request drivers and CDI vendors: Docker's --gpus and Compose's reservation go
# to the NVIDIA toolkit (driver "nvidia", or ""); a CDI request names its vendor.
REQUEST_BACKENDS = {"": "cuda", "nvidia": "cuda", "nvidia.com": "cuda", "amd": "rocm",
                    "amd.com": "rocm"}  # fmt: skip
# A render node alone (no /dev/kfd) is no ROCm: Ollama reaches it through its Vulkan
# runner, ComfyUI only through PyTorch XPU (the kit's Intel image); Whisper has neither.
DRI_BACKENDS = {"ollama": "vulkan", "comfyui": "xpu"}
TRUE = ("1", "t", "true")  # Go's strconv.ParseBool, which Ollama's envconfig uses


@dataclass(frozen=True)
class Backend:
    name: str  # cuda | rocm | vulkan | xpu | cpu
    evidence: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.name} ({', '.join(self.evidence)})"


@dataclass(frozen=True)
class ServiceBackend:
    service: str
    container: str
    image: str
    backend: Backend

    def line(self) -> str:
        return f"{self.service}: {self.backend}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "container": self.container,
            "image": self.image,
            "backend": self.backend.name,
            "evidence": list(self.backend.evidence),
        }


def kind(c: ContainerFacts) -> str | None:
    """ollama / comfyui / whisper for a long-running compute service; None else (an init
    container runs the provisioner, not the model server)."""
    if c.service.endswith("-init"):
        return None
    return next((k for k in COMPUTE if c.service.startswith(k)), None)


def host_path(device: str) -> str:
    return device.split(":", 1)[0]


def gpu_paths(devices: Iterable[str]) -> list[str]:
    """The GPU nodes among a container's devices (host side): /dev/kfd, /dev/dri[/…]."""
    paths = (host_path(d) for d in devices)
    return [p for p in paths if p in (KFD, DRI) or p.startswith(DRI + "/")]


def _request_backend(request: DeviceRequest) -> str:
    vendor = request.ids[0].split("/", 1)[0] if request.driver == "cdi" and request.ids else ""
    return REQUEST_BACKENDS.get(vendor or request.driver, request.driver)


def offered(c: ContainerFacts) -> Backend | None:
    """The GPU library the container's devices open to it, before its own settings; None
    when it holds no GPU device this service can use."""
    if c.device_requests:
        name = _request_backend(c.device_requests[0])
        return Backend(name, tuple(str(r) for r in c.device_requests))
    paths = gpu_paths(c.devices)
    if KFD in paths:
        rocr = c.env.get("ROCR_VISIBLE_DEVICES")
        return Backend("rocm", (*paths, *((f"ROCR_VISIBLE_DEVICES={rocr}",) if rocr else ())))
    dri = DRI_BACKENDS.get(kind(c) or "")
    if not paths or dri is None:
        return None
    if dri == "vulkan":
        flag = c.env.get("OLLAMA_VULKAN")
        return Backend(dri, (*((f"OLLAMA_VULKAN={flag}",) if flag else ()), *paths))
    return Backend(dri, (*paths, f"image {c.image or '?'}"))


def _cpu_settings(c: ContainerFacts, gpu: Backend | None) -> list[str]:
    """What in the container's settings keeps the service on the CPU."""
    why = []
    if kind(c) == "whisper" and c.env.get("WHISPER__INFERENCE_DEVICE", "").lower() == "cpu":
        why.append("WHISPER__INFERENCE_DEVICE=cpu")
    if kind(c) == "comfyui" and "--cpu" in c.env.get("CLI_ARGS", "").split():
        why.append("CLI_ARGS --cpu")
    if gpu is not None and gpu.name == "vulkan":
        flag = c.env.get("OLLAMA_VULKAN", "")
        if flag.lower() not in TRUE:  # Ollama before v0.30.0 runs Vulkan only when asked
            why.append(f"OLLAMA_VULKAN={flag}" if flag else "no OLLAMA_VULKAN=1")
    return why


def backend(c: ContainerFacts) -> Backend:
    """What the service runs on: its offered GPU library unless its settings keep it on
    the CPU; cpu with the reason and the devices it holds unused otherwise."""
    gpu = offered(c)
    why = _cpu_settings(c, gpu)
    if gpu is not None and not why:
        return gpu
    held = [str(r) for r in c.device_requests] or gpu_paths(c.devices)
    unused = [f"{', '.join(held)} unused"] if held else ["no GPU device"]
    return Backend("cpu", tuple(why + unused))


def gpu_label(c: ContainerFacts) -> str:
    """`` (vulkan)`` after a service's name: the GPU library it was given; "" when its
    devices name none."""
    gpu = offered(c)
    return f" ({gpu.name})" if gpu is not None else ""


def backends(containers: Iterable[ContainerFacts]) -> list[ServiceBackend]:
    """One row per compute service container, by service name."""
    rows = [
        ServiceBackend(c.service, c.name, c.image, backend(c))
        for c in containers
        if kind(c) is not None
    ]
    return sorted(rows, key=lambda r: (r.service, r.container))
