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

The worker (``runner.Worker``) hands itself in as a ``SwapHost``; this module never
imports it (imports run runner -> swap only).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import ollama

from airig.common.protocol import Assignment
from airig.executors.base import run_task, uses_model
from airig.executors.context import ExecContext, ExecResult, TaskError, elapsed_ms
from airig.executors.ollama_common import CLIENT_ERRORS
from airig.worker.gpus import probe_gpus
from airig.worker.settings import WorkerSettings

log = logging.getLogger("airig.worker.swap")
Runner = Callable[[str, dict, ExecContext], ExecResult]
# (ExecResult | TaskError | None, released): what an attempt ends in.
Outcome = tuple[ExecResult | TaskError | None, bool]
# Bound on the wait for the driver to free VRAM after the unloads (see wait_for_vram).
VRAM_SETTLE_S = 15.0
SWAPPED_SERVICE = "ollama"
WHISPER = "whisper"


class SwapHost(Protocol):
    """What a swap needs from the worker that runs it (``runner.Worker`` is one)."""

    stopping: threading.Event  # a stop request: the swap then gets stop_grace_s
    resident: list[str]  # the models this worker reports as loaded
    whisper_loaded: list[str]  # those of them its Whisper holds (own or shared)

    def run_attempt(self, task: Assignment, cancel: threading.Event, output_dir: Path) -> Outcome:
        """Run the task's executor; the swap runs before it."""
        ...

    def resident_models(self) -> list[str]:
        """The loaded models as Ollama lists them (the last known set if it does not answer)."""
        ...


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

    def swap_then_run(
        self, host: SwapHost, task: Assignment, cancel: threading.Event, output_dir: Path
    ) -> Outcome:
        """``host.run_attempt`` preceded by the assignment's swap, if this worker swaps.

        None with ``cancel`` set means the lease was lost during the swap: report nothing.
        """
        if not self.needed(task):
            return host.run_attempt(task, cancel, output_dir)
        log.info("swapping models", extra={"task_uid": task.task_id, "swap": _plan(task)})
        whisper = frozenset(host.whisper_loaded)
        done, released = self._stoppable(lambda: self.swap(task, cancel, whisper), host, cancel)
        report, error = done or (SwapReport(), None)
        host.resident = self._after_swap(host, report, task.load_service)
        if released or cancel.is_set():
            return None, released
        if error is not None:
            return error, False
        result, released = host.run_attempt(task, cancel, output_dir)
        if isinstance(result, ExecResult):
            result.metrics.update(report.metrics())
        return result, released

    def swap(
        self, task: Assignment, cancel: threading.Event, whisper: Collection[str] = ()
    ) -> tuple[SwapReport, TaskError | None]:
        """Run the swap: what was done, and the error (naming the step) if a step failed.
        ``whisper``: the models this worker's Whisper holds: unloaded there when it is the
        worker's own, left loaded when it is the shared one."""
        report = SwapReport()
        service = task.load_service or SWAPPED_SERVICE
        # a model of the shared Whisper is no worker's to unload: it stays for the others
        evict = [m for m in task.evict if self.settings.own_whisper or m not in whisper]
        try:
            need = task.need_vram_mb
            if need is None and task.load and service == SWAPPED_SERVICE:
                need = self.weights_mb(task.load)
            run_swap(
                self._context(task, cancel), service, evict, _preload(task),
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

    def _after_swap(self, host: SwapHost, report: SwapReport, service: str | None) -> list[str]:
        """The resident set after a swap (a failed one too): apply what the swap did, then
        let Ollama's (and the own Whisper's) /api/ps correct it (it may have dropped or
        refused a model)."""
        kept = [m for m in host.resident if m not in report.unload_ms]
        loaded = [report.loaded] if report.loaded and report.loaded not in kept else []
        host.resident = kept + loaded
        whisper = [m for m in host.whisper_loaded if m not in report.unload_ms]
        if report.loaded and service == WHISPER and report.loaded not in whisper:
            whisper.append(report.loaded)
        host.whisper_loaded = whisper
        return host.resident_models() if "llm" in self.settings.classes else host.resident

    def _stoppable(
        self, swap: Callable[[], tuple[SwapReport, TaskError | None]], host: SwapHost,
        cancel: threading.Event,
    ) -> tuple[tuple[SwapReport, TaskError | None] | None, bool]:  # fmt: skip
        """Run ``swap`` on a thread as ``run_attempt`` runs executors: on a stop request it
        gets ``stop_grace_s``, then is cancelled and the attempt released. (outcome, released)"""
        box: dict[str, tuple[SwapReport, TaskError | None]] = {}
        thread = threading.Thread(
            target=lambda: box.update(outcome=swap()), name="swap", daemon=True
        )
        thread.start()
        give_up_at = None
        while thread.is_alive():
            thread.join(0.1)
            if host.stopping.is_set() and give_up_at is None:
                give_up_at = time.monotonic() + self.settings.stop_grace_s
            if give_up_at is not None and time.monotonic() > give_up_at:
                cancel.set()
                thread.join(5.0)  # the resource executor honours cancel promptly
                return box.get("outcome"), True
        return box.get("outcome"), False

    def _context(self, task: Assignment, cancel: threading.Event) -> ExecContext:
        settings = self.settings
        return ExecContext(
            ollama_url=settings.ollama_url, comfyui_url=settings.comfyui_url,
            whisper_url=settings.whisper_url, data_dir=settings.data_dir,
            output_dir=settings.work_dir, timeout_s=task.timeout_s, cancel=cancel,
            trusted=True, gpu_index=settings.gpu_index,
        )  # fmt: skip


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
