"""The peak VRAM of one attempt, sampled while it runs (issue 40: the brain learns each
(task type, model, GPU)'s peak and places no load where it does not fit).

Two sources, the more exact first:

- a task whose model Ollama holds: Ollama's own figure for that model, ``size_vram`` of
  ``GET /api/ps`` (what the model takes on the GPU; less than its size when part of it
  runs on the CPU), the largest seen during the attempt;
- any other task on a GPU worker: the cards the worker owns (``gpus.py``: NVML on NVIDIA,
  AMD SMI's ``amdsmi_get_gpu_vram_usage`` on AMD, ``amd_gpus.py``, else amdgpu's sysfs
  ``mem_info_vram_used``, ``amd_sysfs.py``), the most VRAM in use
  during the attempt less what was in use when it began: the attempt's own growth, its
  model's load included when the attempt loaded it. A model already resident is not
  counted, so the figure never exceeds what the task needed (the brain's check then never
  refuses a load that would fit).

No source (a CPU worker, no driver, no readable card, Ollama not answering) is no
figure: the report leaves the field out, as an older worker's does. A sampler failure
never fails the attempt.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

from airig.common.protocol import MAX_TOKENS_PER_S, MAX_VRAM_MB
from airig.worker.gpus import probe_gpus

log = logging.getLogger("airig.worker.vram")
MIB = 1024 * 1024
INTERVAL_S = 1.0  # an attempt runs seconds to hours; a model's VRAM grows at its load

Probe = Callable[[], int | None]


def cards_used_mb(gpu_indexes: Sequence[int] | None) -> Probe:
    """VRAM in use on the worker's cards now (MiB), None without a reading (``gpus.py``)."""

    def probe() -> int | None:
        gpus = probe_gpus(gpu_indexes)
        known = [g for g in gpus if g.vram_total_mb]
        if not known:
            return None
        return sum(g.vram_total_mb - g.vram_free_mb for g in known)

    return probe


def ollama_model_mb(ps: Callable[[], Any], model: str) -> Probe:
    """``size_vram`` of ``model`` in Ollama's ``/api/ps`` now (MiB), None when it is not
    loaded or Ollama does not answer. ``ps``: the ollama client's ``ps``."""

    def probe() -> int | None:
        for loaded in ps().models:
            if model in (loaded.name, loaded.model):
                size = loaded.size_vram
                return None if size is None else int(size) // MIB
        return None

    return probe


class PeakSampler:
    """Samples ``probe`` every ``interval_s`` on a thread of its own while in use.

    ``growth``: report the peak less the first sample (NVML's whole card), not the peak
    itself (Ollama's one model)."""

    def __init__(self, probe: Probe, *, growth: bool, interval_s: float = INTERVAL_S) -> None:
        self.probe, self.growth, self.interval_s = probe, growth, interval_s
        self.first: int | None = None
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        try:
            value = self.probe()
        except Exception as exc:  # a telemetry failure must never end the attempt
            log.debug("VRAM sample failed", extra={"error": str(exc)})
            return
        if value is None or value < 0:
            return
        if self.first is None:
            self.first = value
        self.peak = value if self.peak is None else max(self.peak, value)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> PeakSampler:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="vram-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
        self.sample()

    def peak_mb(self) -> int | None:
        """What the report's ``peak_vram_mb`` says, or None (nothing measured)."""
        if self.peak is None:
            return None
        figure = self.peak - (self.first or 0) if self.growth else self.peak
        return figure if 0 < figure <= MAX_VRAM_MB else None


class NoSampler(PeakSampler):
    """A worker with nothing to sample (a CPU worker): no thread, no figure."""

    def __init__(self) -> None:
        super().__init__(lambda: None, growth=False)

    def __enter__(self) -> PeakSampler:
        return self

    def __exit__(self, *_: object) -> None:
        return None


def tokens_per_s(metrics: dict[str, Any]) -> float | None:
    """The executor's tokens per second, when it is one the brain accepts (a figure out of
    range would make the whole report a 422: left out instead)."""
    value = metrics.get("tokens_per_s")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    figure = float(value)
    return figure if math.isfinite(figure) and 0 <= figure <= MAX_TOKENS_PER_S else None
