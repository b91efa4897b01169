"""Which torch device the ComfyUI stand-in gets, and how it dies when there is none.

The stand-in imitates one torch build, STANDIN_TORCH_BUILD = cpu | cuda | rocm (default
cpu, as yanwk/comfyui-boot:cpu, the image it replaces in the e2e suite). Upstream:
  - comfy/model_management.py (Comfy-Org/ComfyUI): cpu_state is GPU unless --cpu; at
    import, `total_vram = get_total_memory(get_torch_device())` and get_torch_device()
    returns torch.device(torch.cuda.current_device()) for a GPU state. main.py imports it
    (through execution) before the server starts, so a failure ends the process (exit 1).
  - torch/cuda/__init__.py _lazy_init: a build without CUDA raises
    AssertionError("Torch not compiled with CUDA enabled").
  - c10/cuda/CUDAFunctions.cpp device_count_impl / device_count_ensure_non_zero (raised
    as RuntimeError): no driver -> "Found no NVIDIA driver on your system. Please check
    that you have an NVIDIA GPU and installed a driver from
    http://www.nvidia.com/Download/index.aspx"; a driver but no visible device -> "No CUDA
    GPUs are available" (a ROCm build, hipified: "No HIP GPUs are available").
  - main.py: --cuda-device sets CUDA_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES first.
  - server.py system_stats: one entry per torch device, `type` = torch.device.type, which
    is "cuda" on ROCm builds too.
GPU visibility: the device nodes a container runtime maps (/dev/nvidiactl + /dev/nvidiaN;
/dev/kfd + /dev/dri/renderD*), filtered by *_VISIBLE_DEVICES; STANDIN_GPU_COUNT overrides.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

NO_CUDA = "Torch not compiled with CUDA enabled"
NO_DRIVER = (
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
    "installed a driver from http://www.nvidia.com/Download/index.aspx"
)
TORCH_VERSIONS = {"cpu": "2.9.0+cpu", "cuda": "2.9.0+cu130", "rocm": "2.9.0+rocm7.0"}


class StartupError(Exception):
    """What kills ComfyUI at import of comfy.model_management: (type name, message)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Device:
    type: str
    index: int | None
    name: str


def torch_build() -> str:
    build = os.environ.get("STANDIN_TORCH_BUILD", "cpu")
    if build not in TORCH_VERSIONS:
        raise SystemExit(f"STANDIN_TORCH_BUILD must be one of {sorted(TORCH_VERSIONS)}")
    return build


def _visible(total: int, variables: tuple[str, ...]) -> int:
    """How many of `total` devices the first set *_VISIBLE_DEVICES variable leaves: the
    runtime takes ids up to the first invalid one."""
    for variable in variables:
        value = os.environ.get(variable)
        if value is None:
            continue
        seen = 0
        for item in value.split(","):
            if not item.strip().isdigit() or int(item) >= total:
                break
            seen += 1
        return seen
    return total


def _driver_and_devices(build: str) -> tuple[bool, int]:
    forced = os.environ.get("STANDIN_GPU_COUNT")
    if forced is not None:
        return int(forced) > 0, int(forced)
    if build == "cuda":
        driver = Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/version").exists()
        return driver, len(glob.glob("/dev/nvidia[0-9]*"))
    return Path("/dev/kfd").exists(), len(glob.glob("/dev/dri/renderD*"))


def torch_devices(cpu: bool, cuda_device: str | None) -> list[Device]:
    """The devices ComfyUI would use, primary first; StartupError when it cannot start."""
    if cpu:
        return [Device("cpu", None, "cpu")]
    build = torch_build()
    if build == "cpu":
        raise StartupError("AssertionError", NO_CUDA)
    if cuda_device is not None and cuda_device != "all":
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_device
        os.environ["HIP_VISIBLE_DEVICES"] = cuda_device
    driver, total = _driver_and_devices(build)
    if build == "cuda":
        if not driver:
            raise StartupError("RuntimeError", NO_DRIVER)
        count = _visible(total, ("CUDA_VISIBLE_DEVICES",))
        suffix, name = "cudaMallocAsync", os.environ.get("STANDIN_GPU_NAME", "NVIDIA Stand-in")
    else:
        variables = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
        count = _visible(total, variables) if driver else 0
        suffix, name = "native", os.environ.get("STANDIN_GPU_NAME", "AMD Radeon Stand-in")
    if count == 0:
        raise StartupError(
            "RuntimeError", f"No {'CUDA' if build == 'cuda' else 'HIP'} GPUs are available"
        )
    return [Device("cuda", i, f"cuda:{i} {name} : {suffix}") for i in range(count)]


def traceback_text(error: StartupError) -> str:
    """The end of the traceback ComfyUI prints (Python's format, the frames that matter)."""
    return (
        "Traceback (most recent call last):\n"
        '  File "/root/ComfyUI/main.py", line 1, in <module>\n'
        "    import execution\n"
        '  File "/root/ComfyUI/comfy/model_management.py", line 1, in <module>\n'
        "    total_vram = get_total_memory(get_torch_device()) / (1024 * 1024)\n"
        '  File "/root/ComfyUI/comfy/model_management.py", line 1, in get_torch_device\n'
        "    return torch.device(torch.cuda.current_device())\n"
        f"{error.kind}: {error}\n"
    )
