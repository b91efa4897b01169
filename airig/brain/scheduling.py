"""Which READY task a claiming worker gets: one pure function, no database.

Order (first difference wins):
1. resource tasks (load / unload a model) before anything else;
2. tasks waiting longer than ``max_wait_s`` (oldest first) - the no-starvation guarantee;
3. the worker's preferred class (the first class it lists);
4. effective priority = priority + min(aging_cap, waited / aging_step_s)
   + ``residency_bonus`` when the task's model is already resident on the worker;
5. FIFO: the moment the task became READY, then its id.

A residency-aware policy (swap penalties, min_resident) plugs in by replacing
``effective_priority`` or passing another ``SchedulingPolicy``; the claim query only
supplies candidates and the worker's view.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Candidate:
    task_id: int
    task_class: str
    priority: int
    ready_at: float
    model: str | None = None


@dataclass(frozen=True)
class WorkerView:
    classes: tuple[str, ...]
    resident_models: frozenset[str] = field(default_factory=frozenset)
    # False for a worker of a rig joined with an untrusted token: no sensitive task
    trusted: bool = True

    @property
    def preferred_class(self) -> str | None:
        return self.classes[0] if self.classes else None


@dataclass(frozen=True)
class SchedulingPolicy:
    aging_step_s: float = 60.0
    aging_cap: float = 5.0
    max_wait_s: float = 900.0
    residency_bonus: float = 2.0


def eligible_classes(worker_classes: Iterable[str]) -> set[str]:
    """Classes a worker may claim: its own, plus resource tasks when it serves LLMs."""
    classes = set(worker_classes)
    if "llm" in classes:
        classes.add("resource")
    return classes


def effective_priority(
    task: Candidate, worker: WorkerView, now: float, policy: SchedulingPolicy
) -> float:
    waited = max(0.0, now - task.ready_at)
    aged = task.priority + min(policy.aging_cap, waited / policy.aging_step_s)
    if task.model and task.model in worker.resident_models:
        aged += policy.residency_bonus
    return aged


def sort_key(task: Candidate, worker: WorkerView, now: float, policy: SchedulingPolicy) -> tuple:
    overdue = now - task.ready_at > policy.max_wait_s
    return (
        task.task_class != "resource",
        not overdue,
        task.ready_at if overdue else 0.0,
        task.task_class != worker.preferred_class,
        -effective_priority(task, worker, now, policy),
        task.ready_at,
        task.task_id,
    )


def order_candidates(
    candidates: Iterable[Candidate],
    worker: WorkerView,
    now: float,
    policy: SchedulingPolicy | None = None,
) -> list[Candidate]:
    """The candidates this worker may run, best first."""
    policy = policy or SchedulingPolicy()
    allowed = eligible_classes(worker.classes)
    mine = [task for task in candidates if task.task_class in allowed]
    return sorted(mine, key=lambda task: sort_key(task, worker, now, policy))
