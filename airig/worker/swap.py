"""Carry out the brain's residency decision (``Assignment.evict`` / ``load``) before a task.

The brain decides at claim time which models a GPU worker must unload and which it must
load; the worker runs that swap between starting the attempt and running its executor:
drain -> unload -> check free VRAM -> load -> report.

- drain: a worker runs one attempt at a time and swaps only between attempts, so work on
  the old model has finished and no claim for it is in flight while the swap runs;
- unload each evicted model through the ``resource`` executor, which confirms it (Ollama:
  ``keep_alive: 0``, then ``/api/ps`` until the model is gone);
- check free VRAM through NVML: Ollama does not see other processes, and an unload may
  return before the driver has freed the memory, so wait (bounded) until the card has
  room for the new model; without NVML (no NVIDIA GPU) this step is skipped;
- load the new model (Ollama ``keep_alive: -1``: the brain, not a timer, decides
  eviction) and report every duration in the task's completion metrics (``swap``), which
  the brain turns into ``model.unload`` / ``model.load`` events and learned reload costs.

Only GPU workers swap (a GPU index, or the ``llm`` class whose Ollama holds models), and
only models of servers the worker owns: its Ollama, and its own Whisper on a worker that
has one (``WORKER_OWN_WHISPER``; see ``Swapper.needed``), and only for a task that may call
its model here (``executors.base.uses_model``: OCR by tesseract on a CPU worker does not,
so it loads nothing). Each evicted model is unloaded
on the server that holds it. A failed step fails the attempt as
retryable, naming the step; the executor does not run. The resident set is updated from
what the swap did, so the next claim reports it.

This module is one step of the worker's attempt (``runner.Worker.run_attempt``: context
-> swap -> executor -> report): ``Swapper.swap`` runs in the attempt's context under the
attempt's stop grace, and ``resident_after`` says what the worker holds after it. It
never calls back into the worker, and imports run runner -> swap only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import ollama

from airig.common.protocol import Assignment
from airig.executors.base import run_task, uses_model
from airig.executors.context import ExecContext, ExecResult, TaskError, elapsed_ms
from airig.executors.ollama_common import CLIENT_ERRORS
from airig.worker.gpus import probe_gpus
from airig.worker.settings import WorkerSettings

log = logging.getLogger("airig.worker.swap")
Runner = Callable[[str, dict, ExecContext], ExecResult]
# Bound on the wait for the driver to free VRAM after the unloads (see wait_for_vram).
VRAM_SETTLE_S = 15.0
SWAPPED_SERVICE = "ollama"
WHISPER = "whisper"


@dataclass
class SwapReport:
    unload_ms: dict[str, float] = field(default_factory=dict)
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
    holder: Mapping[str, str] | None = None,
) -> SwapReport:
    """Unload ``evict``, make sure the VRAM is free, then load ``load`` on ``service``.

    ``holder``: the service holding an evicted model when it is not ``service`` (a
    transcription's swap unloads the worker's LLMs from its Ollama). Pass ``report`` to
    keep what was done when a step raises: the caller then knows which models are
    already gone.
    """
    report = report if report is not None else SwapReport()
    for model in evict:
        start = time.monotonic()
        on = (holder or {}).get(model, service)
        run("resource", {"service": on, "action": "unload", "model": model}, ctx)
        report.unload_ms[model] = elapsed_ms(start)
    probe = free_mb or (lambda: nvml_free_mb(ctx.gpu_index))
    report.free_vram_mb = wait_for_vram(need_vram_mb, probe, ctx, settle_s)
    if load:
        payload: dict[str, object] = {"service": service, "action": "load", "model": load}
        if service == "ollama":
            payload["keep_alive"] = -1
        start = time.monotonic()
        result = run("resource", payload, ctx)
        report.loaded = load
        report.load_ms = int(result.metrics.get("load_ms", elapsed_ms(start)))
    return report


class Swapper:
    """Runs the brain's swaps on this worker's Ollama."""

    def __init__(
        self, settings: WorkerSettings, *, run: Runner = run_task,
        free_mb: Callable[[], int | None] | None = None, settle_s: float = VRAM_SETTLE_S,
    ) -> None:  # fmt: skip
        self.settings = settings
        self.run, self.free_mb, self.settle_s = run, free_mb, settle_s
        self.enabled = settings.gpu_index is not None or "llm" in settings.classes

    def needed(self, task: Assignment) -> bool:
        """Swap only for models of servers this worker owns: each GPU worker has its own
        Ollama, and on gpu-nvidia its own Whisper; a shared Whisper and ComfyUI are one
        server each, whose memory this worker does not own (evicting its LLM for a
        transcription there would free nothing it needs)."""
        owned = {None, SWAPPED_SERVICE, *([WHISPER] if self.settings.own_whisper else [])}
        if not self.enabled or task.load_service not in owned:
            return False
        if task.load and not uses_model(task.type, task.payload, self.settings.gpu_index):
            # e.g. OCR by tesseract on a CPU worker: neither load the model nor evict for it
            return False
        return bool(task.evict or task.load)

    def swap(
        self, task: Assignment, ctx: ExecContext, whisper: Collection[str] = ()
    ) -> tuple[SwapReport, TaskError | None]:
        """Run the swap in the attempt's context: what was done, and the error (naming the
        step) if a step failed. ``whisper``: the models this worker's Whisper holds:
        unloaded there when it is the worker's own, left loaded when it is the shared one.
        The report is kept however the swap ends (the caller learns which models are gone)."""
        log.info("swapping models", extra={"task_uid": task.task_id, "swap": _plan(task)})
        report = SwapReport()
        service = task.load_service or SWAPPED_SERVICE
        # a model of the shared Whisper is no worker's to unload: it stays for the others
        evict = [m for m in task.evict if self.settings.own_whisper or m not in whisper]
        try:
            need = task.need_vram_mb
            if need is None and task.load and service == SWAPPED_SERVICE:
                need = self.weights_mb(task.load)
            run_swap(
                ctx, service, evict, _preload(task),
                need_vram_mb=need, free_mb=self.free_mb, settle_s=self.settle_s,
                run=self.run, report=report,
                holder=_holders(evict, whisper),
            )  # fmt: skip
            return report, None
        except TaskError as exc:
            # Retryable whatever the step said: the GPU's state, not the task, is at fault
            # (the brain still ends a task at once for non-retryable types such as
            # model_not_found). The step's type is kept: an Ollama that is unreachable
            # (service_unreachable: restarting during `update`) is an outage the brain
            # waits out, never a failure counted against the task (store/retry.py).
            return report, TaskError(
                f"model swap before the task failed ({_plan(task)}): {exc.message}",
                error_type=exc.error_type, hint=exc.hint, retryable=True,
            )  # fmt: skip
        except Exception:  # a bug, not a step's failure: logged, and the task runs as before
            log.exception("model swap failed unexpectedly", extra={"task_uid": task.task_id})
            return report, None

    def weights_mb(self, model: str) -> int | None:
        """The model's weights in MiB from Ollama's /api/tags: what must at least fit in
        free VRAM before the load (the KV cache comes on top). None when unknown."""
        try:
            with ollama.Client(host=self.settings.ollama_url, timeout=5) as client:
                entries = client.list().models
        except CLIENT_ERRORS:
            return None
        wanted = {model, f"{model}:latest"}
        for entry in entries:
            if entry.model in wanted:
                return int(entry.size) // (1024 * 1024) if entry.size is not None else None
        return None


def resident_after(
    report: SwapReport, resident: list[str], whisper_loaded: list[str], service: str | None
) -> tuple[list[str], list[str]]:
    """(resident, whisper_loaded) after a swap (a failed one too): what the swap did
    applied to the worker's sets. A worker that serves LLMs then asks Ollama's (and the
    own Whisper's) /api/ps (``Worker.resident_models``), which may have dropped or refused
    a model."""
    kept = [m for m in resident if m not in report.unload_ms]
    loaded = [report.loaded] if report.loaded and report.loaded not in kept else []
    whisper = [m for m in whisper_loaded if m not in report.unload_ms]
    if report.loaded and service == WHISPER and report.loaded not in whisper:
        whisper.append(report.loaded)
    return kept + loaded, whisper


def _holders(evict: list[str], whisper: Collection[str]) -> dict[str, str]:
    """Which server holds each evicted model: the worker's Whisper those it lists, its
    Ollama the rest."""
    return {model: WHISPER if model in whisper else SWAPPED_SERVICE for model in evict}


def _preload(task: Assignment) -> str | None:
    """The model to load ahead of the task. Not an embedding model: the resource executor
    loads through /api/generate, which those refuse; the embed call loads it instead."""
    return task.load if task.type != "embed" else None


def _plan(task: Assignment) -> str:
    steps = [f"unload {m}" for m in task.evict] + ([f"load {task.load}"] if task.load else [])
    return ", ".join(steps)
