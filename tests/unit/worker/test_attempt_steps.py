"""One attempt is one straight sequence (issue 37, third bullet): its context built once,
the brain's model swap a step of it, the executor, and one stop grace over both steps.

The stop grace is timed by the worker's clock, which these tests hold, so no assertion
here depends on how fast the machine runs."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airig.common.protocol import Assignment, FailRequest, ReleaseRequest
from airig.executors.context import ExecContext, ExecResult, TaskError
from airig.worker.runner import Worker
from airig.worker.settings import WorkerSettings
from airig.worker.swap import Swapper

OLD, NEW = "qwen2.5:0.5b", "llama3.2:1b"
GRACE_S = 10.0


class Brain:
    """The worker's link and pipeline as an attempt uses them: what it reported or released."""

    def __init__(self) -> None:
        self.reported: list[Any] = []
        self.released: list[ReleaseRequest] = []

    def report(self, task: Assignment, body: Any) -> None:
        self.reported.append(body)

    def release(self, task: Assignment, body: ReleaseRequest) -> None:
        self.released.append(body)


class Ollama:
    """Its /api/ps agrees with what the swap did (set by the test)."""

    def __init__(self) -> None:
        self.loaded: list[str] = []

    def ps(self) -> SimpleNamespace:
        return SimpleNamespace(models=[SimpleNamespace(name=m, model=m) for m in self.loaded])


class Clock:
    """The stop grace's clock. ``seen`` is set once the grace has read it after a stop,
    that is once the attempt knows it must stop: a step waits for it to be sure."""

    def __init__(self) -> None:
        self.now = 0.0
        self.seen = threading.Event()

    def __call__(self) -> float:
        self.seen.set()
        return self.now


def worker(tmp_path: Path, services: Any, executor: Any, clock: Clock | None = None) -> Worker:
    settings = WorkerSettings(
        WORKER_CLASSES="llm", WORKER_GPU="0", WORKER_WORK_DIR=str(tmp_path / "work"),
        DATA_DIR=str(tmp_path), WORKER_STOP_GRACE_S=str(GRACE_S),
    )  # fmt: skip
    brain = Brain()
    w = Worker(settings, link=brain)  # type: ignore[arg-type]
    w.pipeline = brain  # type: ignore[assignment]
    w.ollama = Ollama()  # type: ignore[assignment]
    w.swapper = Swapper(settings, run=services, free_mb=lambda: None)
    w.swapper.weights_mb = lambda _model: None  # type: ignore[method-assign]
    w.executor = executor
    if clock is not None:
        w.clock = clock
    return w


def assignment(**swap: Any) -> Assignment:
    return Assignment(
        task_id=1, plan_id="p", key="t", name="t", type="llm", task_class="llm",
        payload={"model": NEW, "prompt": "hi"}, model=NEW, timeout_s=30, attempt=1,
        lease_id="l", lease_expires_at=0.0, **swap,
    )  # fmt: skip


class Steps:
    """The resource executor (the swap's steps) and the task's executor, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.contexts: list[ExecContext] = []

    def resource(self, task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        self.calls.append((payload["action"], payload["model"]))
        self.contexts.append(ctx)
        return ExecResult(
            output={}, metrics={"load_ms": 900} if payload["action"] == "load" else {}
        )

    def task(self, task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        self.calls.append(("run", task_type))
        self.contexts.append(ctx)
        return ExecResult(output={"text": "hi"})


def test_the_swap_and_the_executor_run_in_the_attempts_one_context(tmp_path):
    steps = Steps()
    w = worker(tmp_path, steps.resource, steps.task)
    w.resident, w.ollama.loaded = [OLD], [NEW]  # type: ignore[union-attr]
    outcome, released = w.run_attempt(
        assignment(evict=[OLD], load=NEW), threading.Event(), tmp_path
    )
    assert steps.calls == [("unload", OLD), ("load", NEW), ("run", "llm")]
    unload, load, run = steps.contexts
    assert unload is load is run  # one context per attempt, not one per step
    assert run.output_dir == tmp_path and run.trusted and run.timeout_s == 30
    assert isinstance(outcome, ExecResult) and not released
    assert outcome.metrics["swap"]["loaded"] == NEW and outcome.metrics["swap"]["load_ms"] == 900
    assert w.resident == [NEW]


def test_a_task_that_needs_no_swap_runs_its_executor_alone(tmp_path):
    steps = Steps()
    w = worker(tmp_path, steps.resource, steps.task)
    outcome, released = w.run_attempt(assignment(), threading.Event(), tmp_path)
    assert steps.calls == [("run", "llm")] and not released
    assert isinstance(outcome, ExecResult) and "swap" not in outcome.metrics


@pytest.mark.parametrize("error_type", ["unload_timeout", "service_unreachable"])
def test_a_failed_swap_step_is_reported_retryable_with_its_type_and_the_task_never_runs(
    tmp_path, error_type
):
    """The GPU's state, not the task, is at fault: retryable whatever the step said, and an
    unreachable Ollama keeps its type (the brain waits out an outage, store/retry.py)."""
    ran: list[str] = []

    def services(task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        raise TaskError("Ollama still lists it", error_type=error_type, retryable=False)

    w = worker(tmp_path, services, lambda *a: ran.append("run"))
    w.resident = [OLD]
    w.execute(assignment(evict=[OLD], load=NEW))
    (body,) = w.pipeline.reported  # type: ignore[attr-defined]
    assert isinstance(body, FailRequest) and body.retryable and body.error_type == error_type
    assert body.message.startswith(f"model swap before the task failed (unload {OLD}, load {NEW})")
    assert ran == [] and w.link.released == []  # type: ignore[attr-defined]


def test_a_stop_during_the_swap_gets_the_grace_then_releases_the_attempt(tmp_path):
    clock = Clock()
    ran: list[str] = []
    w: Worker

    def services(task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        w.stopping.set()
        assert clock.seen.wait(30)  # the grace began at 0
        clock.now = GRACE_S - 1  # within it: the unload goes on
        ctx.cancel.wait(0.3)
        assert not ctx.cancel.is_set()
        clock.now = GRACE_S + 1  # past it: cancelled
        assert ctx.cancel.wait(30)
        ctx.check()  # the resource executor honours cancel
        return ExecResult(output={})

    w = worker(tmp_path, services, lambda *a: ran.append("run"), clock)
    w.resident = [OLD]
    w.execute(assignment(evict=[OLD], load=NEW))
    assert len(w.link.released) == 1 and w.pipeline.reported == []  # type: ignore[attr-defined]
    assert ran == []


@pytest.mark.parametrize("executor_ends_at", [GRACE_S - 1, GRACE_S + 1])
def test_the_swap_and_the_executor_share_one_grace(tmp_path, executor_ends_at):
    """A stop during the swap: the swap uses 7 s of the 10 s grace, and the executor
    gets the other 3 s, not a grace of its own."""
    clock = Clock()
    w: Worker

    def services(task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        w.stopping.set()
        assert clock.seen.wait(30)
        clock.now = 7.0
        return ExecResult(output={}, metrics={"load_ms": 1})

    def executor(task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        clock.now = executor_ends_at
        if executor_ends_at > GRACE_S:
            assert ctx.cancel.wait(30)
            ctx.check()
        return ExecResult(output={"text": "done"})

    w = worker(tmp_path, services, executor, clock)
    w.execute(assignment(load=NEW))
    if executor_ends_at > GRACE_S:
        assert len(w.link.released) == 1 and w.pipeline.reported == []  # type: ignore[attr-defined]
    else:
        (body,) = w.pipeline.reported  # type: ignore[attr-defined]
        assert body.output == {"text": "done"} and w.link.released == []  # type: ignore[attr-defined]


def test_a_stop_during_the_executor_alone_gets_the_whole_grace(tmp_path):
    clock = Clock()
    w: Worker

    def executor(task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        w.stopping.set()
        assert clock.seen.wait(30)
        clock.now = GRACE_S - 1
        assert not ctx.cancel.wait(0.3)
        clock.now = GRACE_S + 1
        assert ctx.cancel.wait(30)
        ctx.check()
        return ExecResult(output={})

    w = worker(tmp_path, Steps().resource, executor, clock)
    w.execute(assignment())
    assert len(w.link.released) == 1 and w.pipeline.reported == []  # type: ignore[attr-defined]


def test_a_lease_lost_during_the_swap_reports_and_releases_nothing(tmp_path):
    ran: list[str] = []
    w: Worker

    def services(task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        w.lost_lease(1)  # the brain refused the renewal
        ctx.check()
        return ExecResult(output={})

    w = worker(tmp_path, services, lambda *a: ran.append("run"))
    w.resident = w.ollama.loaded = [OLD]  # type: ignore[union-attr]
    w.execute(assignment(evict=[OLD], load=NEW))
    assert w.pipeline.reported == [] and w.link.released == [] and ran == []  # type: ignore[attr-defined]
    assert w.resident == [OLD]  # the unload never happened


def test_a_swap_that_breaks_unexpectedly_still_runs_the_task(tmp_path):
    """A bug in a swap step (not a TaskError) is logged and the task runs, as it did
    when the swap ran on a thread of its own that died."""
    steps = Steps()

    def services(task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        raise KeyError("a bug")

    w = worker(tmp_path, services, steps.task)
    w.execute(assignment(evict=[OLD]))
    (body,) = w.pipeline.reported  # type: ignore[attr-defined]
    assert body.output == {"text": "hi"} and steps.calls == [("run", "llm")]
