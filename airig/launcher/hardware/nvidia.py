"""NVIDIA GPUs as the driver sees them, through NVML (the ``pynvml`` module of nvidia-ml-py).

The NVML module is a parameter so tests hand in a fake. A failing ``nvmlInit`` is a
finding, not a crash: the result carries the error text and a short classification the
decision turns into a fix.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

from airig.launcher.hardware.pci import normalize_address

# nvmlReturn_t codes (nvml.h); used when the module lacks the named constant.
_ERROR_KINDS = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": (12, "library-not-found"),
    "NVML_ERROR_DRIVER_NOT_LOADED": (9, "driver-not-loaded"),
    "NVML_ERROR_NO_PERMISSION": (4, "no-permission"),
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": (18, "version-mismatch"),
}


@dataclass(frozen=True)
class NvmlGpu:
    """One GPU reported by NVML."""

    index: int
    name: str
    pci_address: str | None
    vram_total_bytes: int | None
    vram_free_bytes: int | None
    compute_capability: str | None  # "8.6"
    temperature_c: int | None
    power_w: float | None
    utilization_pct: int | None


@dataclass(frozen=True)
class NvmlResult:
    """What NVML said, or why it could not say anything."""

    available: bool
    driver_version: str | None = None
    gpus: tuple[NvmlGpu, ...] = ()
    error: str | None = None
    error_kind: str | None = None  # library-not-found | driver-not-loaded | ... | other

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = [asdict(gpu) for gpu in self.gpus]
        return data


def load_nvml() -> tuple[ModuleType | None, str | None]:
    """The pynvml module, or None and why (nvidia-ml-py not installed)."""
    try:
        return importlib.import_module("pynvml"), None
    except ImportError as exc:
        return None, f"pynvml not importable ({exc}); install nvidia-ml-py"


def query_nvml(nvml: Any) -> NvmlResult:
    """Initialise NVML, read every GPU, shut NVML down. Never raises NVML errors."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return NvmlResult(available=False, error=str(exc), error_kind=classify_error(nvml, exc))
    try:
        driver = as_text(nvml.nvmlSystemGetDriverVersion())
        count = nvml.nvmlDeviceGetCount()
        gpus = tuple(read_gpu(nvml, index) for index in range(count))
        return NvmlResult(available=True, driver_version=driver, gpus=gpus)
    except nvml.NVMLError as exc:
        return NvmlResult(available=False, error=str(exc), error_kind=classify_error(nvml, exc))
    finally:
        # Shutting down a half-initialised library has nothing left to report.
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def classify_error(nvml: Any, exc: Exception) -> str:
    """Map an NVMLError to the short kind the decision keys its fix on."""
    code = getattr(exc, "value", None)
    for constant, (default_code, kind) in _ERROR_KINDS.items():
        if code == getattr(nvml, constant, default_code):
            return kind
    return "other"


def read_gpu(nvml: Any, index: int) -> NvmlGpu:
    """Name and memory are required; the rest is optional (consumer cards lack some)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    pci = optional(nvml, nvml.nvmlDeviceGetPciInfo, handle)
    capability = optional(nvml, nvml.nvmlDeviceGetCudaComputeCapability, handle)
    power_mw = optional(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
    utilization = optional(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
    temperature_sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    return NvmlGpu(
        index=index,
        name=as_text(nvml.nvmlDeviceGetName(handle)),
        pci_address=normalize_address(as_text(pci.busId)) if pci is not None else None,
        vram_total_bytes=int(memory.total),
        vram_free_bytes=int(memory.free),
        compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
        temperature_c=optional(nvml, nvml.nvmlDeviceGetTemperature, handle, temperature_sensor),
        power_w=round(power_mw / 1000, 1) if power_mw is not None else None,
        utilization_pct=int(utilization.gpu) if utilization is not None else None,
    )


def optional(nvml: Any, query: Any, *args: Any) -> Any:
    """The query's answer, or None when NVML says the card does not support it."""
    try:
        return query(*args)
    except nvml.NVMLError:
        return None


def as_text(value: str | bytes) -> str:
    """Older pynvml releases return bytes for strings."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
