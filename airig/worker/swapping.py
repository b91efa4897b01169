"""Carry out the brain's residency decision (``Assignment.evict`` / ``load``) before a task.

The brain decides at claim time which models a GPU worker must unload and which it must
load; this module runs that swap (``swap.run_swap``) between starting the attempt and
running its executor, then lets the executor run. Drain needs no step of its own: a
worker runs one attempt at a time and swaps only here, so whatever used the old model has
finished and no claim for it is in flight while the swap runs.

- Only GPU workers swap (a GPU index, or the ``llm`` class whose Ollama holds models);
  a CPU worker has nothing resident to evict and ignores both fields. Only Ollama models
  are swapped (see ``Swapper.needed``).
- The swap's durations go into the task's completion metrics (``swap``), which the brain
  turns into ``model.unload`` / ``model.load`` events and learned reload costs.
- A failed swap (unload not confirmed, VRAM not freed, load failed) fails the attempt as
  retryable, naming the step; the executor does not run.
- The resident set is updated from what the swap did, so the next claim reports it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import requests

from airig.common.protocol import Assignment
from airig.executors.base import run_task
from airig.executors.context import ExecContext, ExecResult, TaskError
from airig.worker.settings import WorkerSettings
from airig.worker.swap import Runner, SwapReport, run_swap

if TYPE_CHECKING:
    from airig.worker.runner import Worker

log = logging.getLogger("airig.worker.swap")
# Bound on the wait for the driver to free VRAM after the unloads (see swap.wait_for_vram).
VRAM_SETTLE_S = 15.0
SWAPPED_SERVICE = "ollama"


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
        """Swap only for Ollama models: each GPU worker has its own Ollama, whereas Whisper
        and ComfyUI are one shared server each, whose memory this worker does not own
        (evicting its LLM for a transcription there would free nothing it needs)."""
        if not self.enabled or task.load_service not in (None, SWAPPED_SERVICE):
            return False
        return bool(task.evict or task.load)

    def swap(
        self, task: Assignment, cancel: threading.Event
    ) -> tuple[SwapReport, TaskError | None]:
        """Run the swap: what was done, and the error (naming the step) if a step failed."""
        report = SwapReport()
        try:
            need = task.need_vram_mb
            if need is None and task.load:
                need = self.weights_mb(task.load)
            run_swap(
                self._context(task, cancel), SWAPPED_SERVICE, task.evict, _preload(task),
                need_vram_mb=need, free_mb=self.free_mb, settle_s=self.settle_s,
                run=self.run, report=report,
            )  # fmt: skip
            return report, None
        except TaskError as exc:
            # Retryable whatever the step said: the GPU's state, not the task, is at fault
            # (the brain still ends a task at once for non-retryable types such as
            # model_not_found).
            return report, TaskError(
                f"model swap before the task failed ({_plan(task)}): {exc.message}",
                error_type=exc.error_type, hint=exc.hint, retryable=True,
            )  # fmt: skip

    def weights_mb(self, model: str) -> int | None:
        """The model's weights in MiB from Ollama's /api/tags: what must at least fit in
        free VRAM before the load (the KV cache comes on top). None when unknown."""
        try:
            response = requests.get(f"{self.settings.ollama_url}/api/tags", timeout=5)
            response.raise_for_status()
            entries = response.json().get("models", [])
        except (requests.RequestException, ValueError):
            return None
        wanted = {model, f"{model}:latest"}
        for entry in entries:
            if entry.get("name") in wanted or entry.get("model") in wanted:
                size = entry.get("size")
                return int(size) // (1024 * 1024) if isinstance(size, int) else None
        return None

    def _context(self, task: Assignment, cancel: threading.Event) -> ExecContext:
        settings = self.settings
        return ExecContext(
            ollama_url=settings.ollama_url, comfyui_url=settings.comfyui_url,
            whisper_url=settings.whisper_url, data_dir=settings.data_dir,
            output_dir=settings.work_dir, timeout_s=task.timeout_s, cancel=cancel,
            trusted=True, gpu_index=settings.gpu_index,
        )  # fmt: skip


def _preload(task: Assignment) -> str | None:
    """The model to load ahead of the task. Not an embedding model: the resource executor
    loads through /api/generate, which those refuse; the embed call loads it instead."""
    return task.load if task.type != "embed" else None


def _plan(task: Assignment) -> str:
    steps = [f"unload {m}" for m in task.evict] + ([f"load {task.load}"] if task.load else [])
    return ", ".join(steps)


def swap_then_run(worker: Worker, task: Assignment, cancel: threading.Event, output_dir: Path):
    """``Worker.run_attempt`` preceded by the assignment's swap, if this worker swaps.

    Same answer as ``run_attempt``: (ExecResult | TaskError | None, released). None with
    ``cancel`` set means the lease was lost during the swap: report nothing.
    """
    swapper: Swapper = worker.swapper
    if not swapper.needed(task):
        return worker.run_attempt(task, cancel, output_dir)
    log.info("swapping models", extra={"task_uid": task.task_id, "swap": _plan(task)})
    done, released = _stoppable(lambda: swapper.swap(task, cancel), worker, cancel)
    report, error = done or (SwapReport(), None)
    worker.resident = _after_swap(worker, report)
    if released or cancel.is_set():
        return None, released
    if error is not None:
        return error, False
    result, released = worker.run_attempt(task, cancel, output_dir)
    if isinstance(result, ExecResult):
        result.metrics.update(report.metrics())
    return result, released


def _after_swap(worker: Worker, report: SwapReport) -> list[str]:
    """The resident set after a swap (a failed one too): apply what the swap did, then let
    Ollama's /api/ps correct it (it may have dropped or refused a model)."""
    kept = [m for m in worker.resident if m not in report.unload_ms]
    loaded = [report.loaded] if report.loaded and report.loaded not in kept else []
    worker.resident = kept + loaded
    return worker.resident_models() if "llm" in worker.settings.classes else worker.resident


def _stoppable(swap, worker: Worker, cancel: threading.Event):
    """Run ``swap`` on a thread as ``run_attempt`` runs executors: on a stop request it
    gets ``stop_grace_s``, then is cancelled and the attempt released. (outcome, released)"""
    box: dict[str, object] = {}
    thread = threading.Thread(target=lambda: box.update(outcome=swap()), name="swap", daemon=True)
    thread.start()
    give_up_at = None
    while thread.is_alive():
        thread.join(0.1)
        if worker.stopping.is_set() and give_up_at is None:
            give_up_at = time.monotonic() + worker.settings.stop_grace_s
        if give_up_at is not None and time.monotonic() > give_up_at:
            cancel.set()
            thread.join(5.0)  # the resource executor honours cancel promptly
            return box.get("outcome"), True
    return box.get("outcome"), False
