"""The swap protocol a GPU worker runs before a task whose model is not resident.

drain -> unload -> check free VRAM -> load -> report:

- drain: a worker runs one attempt at a time and swaps only between attempts, so work on
  the old model has finished and no new claim for it is made while the swap runs;
- unload each evicted model through the ``resource`` executor, which confirms it (Ollama:
  ``keep_alive: 0``, then ``/api/ps`` until the model is gone; ComfyUI ``POST /free``;
  Whisper ``DELETE /api/ps/{model}``);
- check free VRAM through NVML: Ollama does not see other processes, and an unload may
  return before the driver has freed the memory, so wait (bounded) until the card has
  room for the new model; without NVML (no NVIDIA GPU) this step is skipped;
- load the new model (Ollama ``keep_alive: -1``: the brain, not a timer, decides
  eviction) and report every duration, which the brain turns into ``model.unload`` /
  ``model.load`` events and learned reload costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from airig.executors.base import run_task
from airig.executors.context import ExecContext, ExecResult, TaskError, elapsed_ms
from airig.worker.gpus import probe_gpus

Runner = Callable[[str, dict, ExecContext], ExecResult]


@dataclass
class SwapReport:
    unload_ms: dict[str, int] = field(default_factory=dict)
    free_vram_mb: int | None = None  # measured after the unloads, before the load
    loaded: str | None = None
    load_ms: int | None = None

    def metrics(self) -> dict:
        """The report as task metrics (``swap`` key) for the brain's events."""
        return {
            "swap": {
                "unload_ms": self.unload_ms,
                "free_vram_mb": self.free_vram_mb,
                "loaded": self.loaded,
                "load_ms": self.load_ms,
            }
        }


def nvml_free_mb(gpu_index: int | None) -> int | None:
    """Free VRAM of this worker's GPU from NVML, or None without one."""
    gpus = probe_gpus(gpu_index)
    return gpus[0].vram_free_mb if gpus else None


def wait_for_vram(
    need_mb: int | None,
    free_mb: Callable[[], int | None],
    ctx: ExecContext,
    settle_s: float,
    poll_s: float = 0.5,
) -> int | None:
    """Free VRAM once it covers ``need_mb``; TaskError if it does not within ``settle_s``."""
    deadline = time.monotonic() + min(settle_s, ctx.remaining())
    while True:
        free = free_mb()
        if free is None or need_mb is None or free >= need_mb:
            return free
        if time.monotonic() >= deadline:
            raise TaskError(
                f"only {free} MiB of VRAM free after unloading, {need_mb} MiB needed",
                error_type="vram_not_freed",
                hint="another process holds GPU memory; see nvidia-smi",
            )
        ctx.cancel.wait(poll_s)
        ctx.check()


def run_swap(
    ctx: ExecContext,
    service: str,
    evict: list[str],
    load: str | None,
    *,
    need_vram_mb: int | None = None,
    free_mb: Callable[[], int | None] | None = None,
    settle_s: float = 10.0,
    run: Runner = run_task,
    report: SwapReport | None = None,
) -> SwapReport:
    """Unload ``evict``, make sure the VRAM is free, then load ``load``.

    Pass ``report`` to keep what was done when a step raises: the caller then knows
    which models are already gone.
    """
    report = report if report is not None else SwapReport()
    for model in evict:
        start = time.monotonic()
        run("resource", {"service": service, "action": "unload", "model": model}, ctx)
        report.unload_ms[model] = elapsed_ms(start)
    probe = free_mb or (lambda: nvml_free_mb(ctx.gpu_index))
    report.free_vram_mb = wait_for_vram(need_vram_mb, probe, ctx, settle_s)
    if load:
        payload = {"service": service, "action": "load", "model": load}
        if service == "ollama":
            payload["keep_alive"] = -1
        start = time.monotonic()
        result = run("resource", payload, ctx)
        report.loaded = load
        report.load_ms = int(result.metrics.get("load_ms", elapsed_ms(start)))
    return report
