"""GPU telemetry from NVML (nvidia-ml-py); no NVIDIA driver simply means no GPUs."""

from __future__ import annotations

import contextlib
import logging

from airig.protocol import GpuInfo

log = logging.getLogger("airig.worker.gpus")
MIB = 1024 * 1024


def _one(pynvml, index: int) -> GpuInfo:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    name = pynvml.nvmlDeviceGetName(handle)
    info = GpuInfo(
        index=index,
        name=name.decode() if isinstance(name, bytes) else str(name),
        vram_total_mb=memory.total // MIB,
        vram_free_mb=memory.free // MIB,
    )
    try:
        info.temperature_c = float(
            pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
        )
        info.power_w = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
    except pynvml.NVMLError:
        pass  # some boards report neither; VRAM is what scheduling needs
    return info


def probe_gpus(only_index: int | None = None) -> list[GpuInfo]:
    """The visible NVIDIA GPUs (or just ``only_index``); [] without a driver."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        indexes = range(pynvml.nvmlDeviceGetCount())
        return [_one(pynvml, i) for i in indexes if only_index is None or i == only_index]
    except pynvml.NVMLError as exc:
        log.warning("NVML query failed", extra={"error": str(exc)})
        return []
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
