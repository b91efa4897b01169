"""AMD GPUs read through AMD SMI's Python API (``amdsmi``), where NVML finds no card.

``amdsmi`` comes with ROCm (it wraps ``libamd_smi.so``): it is imported when present,
never installed by pip (``tests/unit/test_dependency_sides.py``, ``OPTIONAL``). Its import
can print and raise anything, ``SystemExit`` included, when the library is missing, so it
is guarded broadly, as the launcher's detection does (``launcher/hardware/amd.py``).

The calls, as upstream documents them (ROCm/amdsmi ``py-interface/README.md``):
``amdsmi_init()`` (default flag: AMD GPUs only), ``amdsmi_get_processor_handles()`` (a
list, empty when the machine has none), ``amdsmi_get_gpu_vram_usage(handle)`` (a dict:
``vram_total`` and ``vram_used`` in MB), ``amdsmi_get_gpu_asic_info(handle)``
(``market_name``), ``amdsmi_shut_down()`` last; any of them raises ``AmdSmiException``
(or a subclass) on failure, and a field the board does not report can read ``"N/A"``.

The worker's GPU indexes are the host's (``WORKER_GPU``). A worker's container on an AMD
host is given ``/dev/kfd`` and only its cards' render nodes (``launcher/compose/gpu_workers.py``,
``_pin``), but the SMI tools read sysfs, which a container sees whole: ROCm's own reports
(ROCm/ROCm-docker#49, ROCm/legacy-rocm-build#994) show rocm-smi listing every card of the
host in such a container. So, as ``gpus.py`` does for NVML: as many cards listed as the
worker owns are its cards, relabelled with the host indexes; otherwise (every card of the
host listed, in the host's order) the owned ones are picked by index. A card it owns that
is not listed, or whose figures are not plausible, gives no reading at all (a partial sum
would teach the brain a smaller peak than the true one).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import logging
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from airig.common.protocol import MAX_VRAM_MB, GpuInfo

log = logging.getLogger("airig.worker.amd_gpus")


def load_amdsmi() -> Any | None:
    """The amdsmi module, or None when it is absent or its library does not load."""
    try:
        if sys.modules.get("amdsmi") is None and importlib.util.find_spec("amdsmi") is None:
            # not installed, the usual case (every heartbeat of a worker with no NVIDIA
            # driver asks): no import tried, the process's stdout never swapped
            return None
    except (ImportError, ValueError):
        return None
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            return importlib.import_module("amdsmi")
    except (Exception, SystemExit):  # any failure means "no amdsmi"
        return None


def probe_amd_gpus(host_indexes: Sequence[int], amdsmi: Any = None) -> list[GpuInfo]:
    """This worker's AMD GPUs with their VRAM, labelled with host indexes; [] without
    amdsmi, without a driver, or when any owned card cannot be read."""
    smi = amdsmi if amdsmi is not None else load_amdsmi()
    if smi is None:
        return []
    try:
        smi.amdsmi_init()
    except Exception as exc:  # AmdSmiLibraryException: no driver, no /dev/kfd access
        log.debug("amdsmi_init failed", extra={"error": str(exc)})
        return []
    try:
        return _owned(smi, list(smi.amdsmi_get_processor_handles()), list(host_indexes))
    except Exception as exc:  # telemetry is never worth failing a heartbeat or an attempt
        log.debug("amdsmi query failed", extra={"error": str(exc)})
        return []
    finally:
        with contextlib.suppress(Exception):
            smi.amdsmi_shut_down()


def _owned(smi: Any, handles: list[Any], wanted: list[int]) -> list[GpuInfo]:
    if not wanted:
        pairs = list(enumerate(handles))
    elif len(handles) == len(wanted):
        pairs = list(zip(wanted, handles, strict=True))
    elif all(0 <= index < len(handles) for index in wanted):
        pairs = [(index, handles[index]) for index in wanted]
    else:
        return []  # an owned card AMD SMI does not list
    return [_one(smi, index, handle) for index, handle in pairs]


def _one(smi: Any, index: int, handle: Any) -> GpuInfo:
    """One card, or ValueError (the whole reading is dropped) when its figures are not
    plausible."""
    usage = smi.amdsmi_get_gpu_vram_usage(handle)
    total = _mb(usage.get("vram_total")) if isinstance(usage, dict) else None
    used = _mb(usage.get("vram_used")) if isinstance(usage, dict) else None
    if total is None or used is None or total <= 0 or used > total:
        raise ValueError(f"implausible VRAM reading for GPU {index}: {usage!r:.200}")
    try:
        return GpuInfo(index=index, name=_name(smi, handle), vram_total_mb=total,
                       vram_free_mb=total - used)  # fmt: skip
    except ValidationError as exc:  # an index past the protocol's bound
        raise ValueError(f"GPU {index}: {exc.error_count()} fields out of range") from exc


def _mb(value: Any) -> int | None:
    """A whole number of MB within the protocol's bounds, or None ("N/A", a string, a
    negative or huge figure, NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if 0 <= value <= MAX_VRAM_MB else None


def _name(smi: Any, handle: Any) -> str:
    """The card's market name; the names are decoration, so a failure is "AMD GPU"."""
    try:
        name = smi.amdsmi_get_gpu_asic_info(handle)["market_name"]
    except Exception:
        return "AMD GPU"
    text = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    return text.strip()[:256] or "AMD GPU"
