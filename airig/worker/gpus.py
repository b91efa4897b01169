"""GPU telemetry from NVML (nvidia-ml-py), else from AMD SMI (``amd_gpus.py``), else from
the amdgpu driver's sysfs files (``amd_sysfs.py``); no driver simply means no GPUs."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from pydantic import ValidationError

from airig.common.protocol import GpuInfo
from airig.worker.amd_gpus import probe_amd_gpus
from airig.worker.amd_sysfs import probe_sysfs_gpus

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
        sensors = {
            "temperature_c": float(
                pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
            ),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
        }
    except pynvml.NVMLError:
        return info  # some boards report neither; VRAM is what scheduling needs
    try:
        return GpuInfo.model_validate({**info.model_dump(), **sensors})
    except ValidationError:  # a sensor's garbage would make the brain refuse the heartbeat
        log.warning("GPU sensor reading out of range", extra={"gpu": index, **sensors})
        return info


def probe_gpus(host_indexes: int | Sequence[int] | None = None) -> list[GpuInfo]:
    """This worker's GPUs, labelled with their host indexes: NVIDIA's from NVML, else
    AMD's from AMD SMI (same labelling, ``amd_gpus.py``), else from amdgpu's sysfs files
    (``amd_sysfs.py``); [] without a driver.

    ``host_indexes``: the cards the worker owns (WORKER_GPU), None for every visible one.
    When NVML sees exactly as many cards as the worker owns (a pinned container sees only
    those, as devices 0..n-1), they are relabelled with the host indexes so the brain's
    thermal guard and `status` name the right card; otherwise (a worker on the bare host)
    the owned ones are picked by index.
    """
    wanted = [host_indexes] if isinstance(host_indexes, int) else list(host_indexes or [])
    visible = _nvml_visible()
    if visible is None:  # no NVIDIA driver (or no card): an AMD host, maybe
        # amdsmi when ROCm brings it, else the amdgpu driver's sysfs files (every AMD host)
        return probe_amd_gpus(wanted) or probe_sysfs_gpus(wanted)
    if not wanted:
        return visible
    if len(visible) == len(wanted):
        pairs = zip(visible, wanted, strict=True)
        return [info.model_copy(update={"index": host}) for info, host in pairs]
    return [info for info in visible if info.index in wanted]


def _nvml_visible() -> list[GpuInfo] | None:
    """Every card NVML sees; None without NVML, its driver or a card."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        visible = [_one(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError as exc:
        log.warning("NVML query failed", extra={"error": str(exc)})
        return []
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return visible or None
