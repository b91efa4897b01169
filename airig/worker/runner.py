"""The worker's main loop: register, claim, run one attempt at a time, report.

One attempt is one straight sequence (``Worker.execute``): the claimed task -> its
context, built once -> the model swap the brain asked for, if any (``swap.py``, a step)
-> the executor -> the report. The swap and the executor run on the attempt's thread
under one stop grace.

Graceful stop (SIGTERM / SIGINT): no new claims; the running attempt gets
``WORKER_STOP_GRACE_S`` to finish and report (its swap and its executor together),
otherwise it is cancelled and released to the brain (no budget charged) so another
worker takes it at once.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TypeVar

import ollama
import requests

from airig.common.protocol import (
    Assignment,
    CompleteRequest,
    FailRequest,
    HeartbeatRequest,
    RegisterRequest,
    ReleaseRequest,
)
from airig.common.task_types import TASK_TYPES, names_where
from airig.executors.base import run_task
from airig.executors.context import ExecContext, ExecResult, TaskError
from airig.executors.ollama_common import CLIENT_ERRORS
from airig.worker.attempts import AttemptThreads
from airig.worker.gpus import probe_gpus
from airig.worker.heartbeat import CurrentAttempt, Heartbeat, write_state
from airig.worker.link import BrainLink, BrainUnreachable, LeaseLost, Unregistered
from airig.worker.pipeline import Pipeline, effective_prefetch
from airig.worker.settings import WorkerSettings
from airig.worker.swap import Runner, Swapper, SwapReport, resident_after
from airig.worker.vram import NoSampler, PeakSampler, cards_used_mb, ollama_model_mb, tokens_per_s

log = logging.getLogger("airig.worker")
T = TypeVar("T")
# (ExecResult | TaskError | None, released): what an attempt ends in.
Outcome = tuple[ExecResult | TaskError | None, bool]
# Task types whose executors never write an output file: no per-attempt folder (a mkdir
# and rmdir per task were a fifth of a worker's time in the dispatch profile).
NO_FILES = frozenset(names_where(writes_files=False))


class StopGrace:
    """One attempt's stop grace: from the first stop request it sees, ``grace_s`` for
    every step still to run (a swap that used part of it leaves the rest to the executor)."""

    def __init__(self, stopping: threading.Event, grace_s: float, clock: Callable[[], float]):
        self.stopping, self.grace_s, self.clock = stopping, grace_s, clock
        self.give_up_at: float | None = None

    def over(self) -> bool:
        if not self.stopping.is_set():
            return False
        now = self.clock()
        if self.give_up_at is None:
            self.give_up_at = now + self.grace_s
        return now > self.give_up_at


class Worker:
    def __init__(self, settings: WorkerSettings, link: BrainLink | None = None) -> None:
        self.settings = settings
        self.link = link or BrainLink(
            settings.brain_url, settings.bootstrap_token, settings.retry_cap_s
        )
        self.stopping = threading.Event()
        self.current = CurrentAttempt()
        self.resident: list[str] = []
        # The part of ``resident`` this worker's own Whisper holds (WORKER_OWN_WHISPER).
        self.whisper_loaded: list[str] = []
        self.swapper = Swapper(settings)  # runs the brain's model swaps (GPU workers)
        self.executor: Runner = run_task  # the executors' dispatch
        self.clock: Callable[[], float] = time.monotonic  # what the stop grace is timed by
        # One client for the resident set: the heartbeat asks every beat, and a new client
        # costs an SSL context. Never closed: a beat may still be using it at shutdown.
        self.ollama = (
            ollama.Client(host=settings.ollama_url, timeout=2)
            if "llm" in settings.classes
            else None
        )
        self.attempts = AttemptThreads()  # where executors run, one attempt at a time
        self.claim_wait_s = 20.0
        self.heartbeat: Heartbeat | None = None
        self.pipeline = Pipeline(
            self.link, effective_prefetch(settings.prefetch, settings.classes), self.stopping,
            lambda: self.resident, self.lost_lease,
        )  # fmt: skip

    # ---------------------------------------------------------------- lifecycle
    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.stopping.set())

    def run(self) -> int:
        self.settings.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.register()
        except BrainUnreachable:
            return 0  # asked to stop before the brain ever answered
        while not self.stopping.is_set():
            if self.heartbeat and self.heartbeat.needs_register.is_set():
                self.register()
            try:
                task = self.pipeline.next_task(self.claim_wait_s)
            except Unregistered as refused:
                if self.link.still_unregistered(refused):
                    self.register()
                continue
            except BrainUnreachable:
                continue
            if task is not None:
                self.execute(task)
        self.pipeline.close()  # sends the last results, releases tasks held ahead
        self.shutdown()
        return 0

    def register(self) -> None:
        settings = self.settings
        request = RegisterRequest(
            name=settings.name, host=settings.host, classes=settings.classes,
            gpu_index=settings.gpu_index,
            gpus=probe_gpus(settings.gpu_indexes), resident_models=self.resident_models(),
        )  # fmt: skip
        registered = self.link.register(request, stop=self.stopping)
        self.claim_wait_s = registered.claim_wait_s
        log.info(
            "registered", extra={"worker_id": registered.worker_id, "brain": self.link.base_url}
        )
        if self.heartbeat is None:
            self.heartbeat = Heartbeat(
                self.link, registered.worker_id, registered.heartbeat_interval_s,
                self.current, self.telemetry, settings.state_file,
            )  # fmt: skip
            self.heartbeat.start()
            self.pipeline.start(registered.heartbeat_interval_s)
        self.pipeline.forget()  # the brain retried every lease of the old registration
        self.heartbeat.needs_register.clear()
        self.heartbeat.beat()

    def lost_lease(self, task_id: int) -> None:
        """The brain refused the running attempt's start or renewal: stop it, report nothing."""
        task, cancel = self.current.snapshot()
        if task is not None and task.task_id == task_id:
            cancel.set()

    def shutdown(self) -> None:
        if self.heartbeat:
            self.heartbeat.stop()
            self.link.deregister()
        write_state(self.settings.state_file, self.settings.name, ok=False)
        log.info("worker stopped")

    # ---------------------------------------------------------------- telemetry
    def resident_models(self) -> list[str]:
        """Models loaded in this worker's Ollama (only workers that serve LLMs ask), then
        those loaded in the Whisper its transcriptions go to (workers that take `script`
        tasks ask): its own `whisper-gpuN`, or the shared one. The brain places both alike
        (a transcription by its Whisper model). A server that does not answer keeps its
        last known set (it may be busy loading)."""
        ollama_part: list[str] = []
        if self.ollama is not None:
            try:
                loaded = self.ollama.ps().models
                ollama_part = [name for m in loaded if (name := m.name or m.model)]
            except CLIENT_ERRORS:
                ollama_part = [m for m in self.resident if m not in self.whisper_loaded]
        if self.settings.own_whisper or "script" in self.settings.classes:
            self.whisper_loaded = whisper_loaded(self.settings.whisper_url, self.whisper_loaded)
        extra = [m for m in self.whisper_loaded if m not in ollama_part]
        self.resident = ollama_part + extra
        return self.resident

    def telemetry(self) -> HeartbeatRequest:
        return HeartbeatRequest(
            gpus=probe_gpus(self.settings.gpu_indexes), resident_models=self.resident_models()
        )

    # ---------------------------------------------------------------- one attempt
    def execute(self, task: Assignment) -> None:
        cancel = self.current.begin(task)
        fields = {"task_uid": task.task_id, "task_id": task.key, "attempt": task.attempt}
        output_dir = self.settings.work_dir / f"{task.task_id}-{task.attempt}"
        try:
            if task.type not in NO_FILES:
                output_dir.mkdir(parents=True, exist_ok=True)
            log.info("attempt started", extra={**fields, "type": task.type})
            outcome, released = self.run_attempt(task, cancel, output_dir)
            if released:
                self.link.release(task, ReleaseRequest(**task.lease.model_dump()))
                log.info("attempt released", extra=fields)
            elif not cancel.is_set() or outcome is not None:
                self.report(task, outcome, output_dir)
        except LeaseLost as exc:
            log.warning("lease lost; result dropped", extra={**fields, "error": str(exc)})
        except (BrainUnreachable, RuntimeError) as exc:
            log.error("could not report the attempt", extra={**fields, "error": str(exc)})
        finally:
            self.current.end()
            if task.type not in NO_FILES:
                _remove_dir(output_dir)

    def run_attempt(self, task: Assignment, cancel: threading.Event, output_dir: Path) -> Outcome:
        """The attempt's steps (``attempt_steps``) with its peak VRAM sampled meanwhile, which
        a completion reports (``vram.py``)."""
        with self.vram_sampler(task) as vram:
            outcome, released = self.attempt_steps(task, cancel, output_dir)
        peak = vram.peak_mb()
        if isinstance(outcome, ExecResult) and peak is not None:
            outcome.metrics["peak_vram_mb"] = peak
        return outcome, released

    def vram_sampler(self, task: Assignment) -> PeakSampler:
        """Ollama's own figure for a task of an Ollama model, else the cards' (NVML or AMD
        SMI) on a GPU worker."""
        spec = TASK_TYPES.get(task.type)
        on_ollama = spec is not None and spec.model_service == "ollama"
        if self.ollama is not None and task.model and on_ollama:
            return PeakSampler(ollama_model_mb(self.ollama.ps, task.model), growth=False)
        if task.model and self.settings.gpu_index is not None:  # the brain keys by model
            return PeakSampler(cards_used_mb(self.settings.gpu_indexes), growth=True)
        return NoSampler()

    def attempt_steps(self, task: Assignment, cancel: threading.Event, output_dir: Path) -> Outcome:
        """The attempt's steps: its context, built once; the swap the brain asked for, if
        this worker swaps; the executor. Both steps share one stop grace. None with
        ``cancel`` set and not released: the lease was lost, report nothing."""
        ctx = self.context(task, cancel, output_dir)
        grace = StopGrace(self.stopping, self.settings.stop_grace_s, self.clock)
        swapped: SwapReport | None = None
        if self.swapper.needed(task):
            swapped, stopped = self.swap_step(task, ctx, grace)
            if stopped is not None:
                return stopped
            ctx.started = time.monotonic()  # the runtime limit is the executor's, as before
        outcome, released = self.within_grace(lambda: self.run_executor(task, ctx), ctx, grace)
        if cancel.is_set() and not released:
            return None, False  # lease lost: the brain has moved on; report nothing
        if swapped is not None and isinstance(outcome, ExecResult):
            outcome.metrics.update(swapped.metrics())  # model.load / model.unload events
        return outcome, released

    def context(self, task: Assignment, cancel: threading.Event, output_dir: Path) -> ExecContext:
        """What the swap and the executor of one attempt run in."""
        settings = self.settings
        return ExecContext(
            ollama_url=settings.ollama_url, comfyui_url=settings.comfyui_url,
            whisper_url=settings.whisper_url, data_dir=settings.data_dir,
            output_dir=output_dir, timeout_s=task.timeout_s, cancel=cancel,
            trusted=task.trusted, gpu_index=settings.gpu_index,
            max_image_bytes=settings.max_image_bytes,
            max_image_pixels=settings.max_image_pixels,
        )  # fmt: skip

    def swap_step(
        self, task: Assignment, ctx: ExecContext, grace: StopGrace
    ) -> tuple[SwapReport, Outcome | None]:
        """Run the brain's swap; the resident sets follow what it did, whatever it ended in.
        (what it did, the attempt's outcome when the attempt ends here: stopped, the lease
        lost, or a step failed (retryable, naming the step); None to run the executor)."""
        whisper = frozenset(self.whisper_loaded)
        done, released = self.within_grace(
            lambda: self.swapper.swap(task, ctx, whisper), ctx, grace
        )
        report, error = done or (SwapReport(), None)
        self.resident, self.whisper_loaded = resident_after(
            report, self.resident, self.whisper_loaded, task.load_service
        )
        if "llm" in self.settings.classes:
            self.resident_models()  # Ollama may have dropped or refused a model
        if released or ctx.cancel.is_set():
            return report, (None, released)
        return report, (None if error is None else (error, False))

    def run_executor(self, task: Assignment, ctx: ExecContext) -> ExecResult | TaskError:
        try:
            return self.executor(task.type, task.payload, ctx)
        except TaskError as exc:
            return exc

    def within_grace(
        self, step: Callable[[], T], ctx: ExecContext, grace: StopGrace
    ) -> tuple[T | None, bool]:
        """Run one step of the attempt on the attempt's thread until it ends, or until a
        stop request's grace runs out: then it is cancelled, given a moment to unwind
        (steps honour cancel promptly; never waited for forever), and the attempt released.
        (what the step returned, or None; released)"""
        future = self.attempts.submit(step)
        while not future.done():
            with contextlib.suppress(FutureTimeout):
                future.result(timeout=0.1)
            if not future.done() and grace.over():
                ctx.cancel.set()
                with contextlib.suppress(FutureTimeout):
                    future.result(timeout=5.0)
                return (future.result() if future.done() else None), True
        return future.result(), False

    def report(
        self, task: Assignment, outcome: ExecResult | TaskError | None, output_dir: Path
    ) -> None:
        """Upload the files now; the result itself leaves with the next exchange."""
        lease = task.lease.model_dump()
        body: CompleteRequest | FailRequest
        if isinstance(outcome, TaskError):
            body = FailRequest(
                **lease, error_type=outcome.error_type, retryable=outcome.retryable,
                message=outcome.message[:8000],
            )  # fmt: skip
        elif outcome is None:
            body = FailRequest(**lease, error_type="worker_error", message="no result")
        else:
            stored = [
                self.link.upload(task, Path(name).name, (output_dir / name).read_bytes())
                for name in outcome.files
            ]
            body = CompleteRequest(
                **lease, output=outcome.output, files=stored, metrics=outcome.metrics,
                peak_vram_mb=outcome.metrics.pop("peak_vram_mb", None),
                tokens_per_s=tokens_per_s(outcome.metrics),
            )  # fmt: skip
        self.pipeline.report(task, body)


def _remove_dir(path: Path) -> None:
    """Remove an attempt's output folder; most are empty (uploaded files are gone), and
    rmdir costs a fraction of rmtree, which showed up per task in the dispatch profile."""
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


def whisper_loaded(whisper_url: str, last: list[str]) -> list[str]:
    """The models a Whisper server (speaches) holds loaded: ``GET /api/ps`` answers
    ``{"models": [ids]}``; ``last`` when it does not answer (it may be busy loading)."""
    try:
        response = requests.get(whisper_url.rstrip("/") + "/api/ps", timeout=2)
        response.raise_for_status()
        models = response.json().get("models")
    except (requests.RequestException, ValueError, AttributeError):
        return last
    if not isinstance(models, list):
        return last
    return [str(m) for m in models if isinstance(m, str) and m]
