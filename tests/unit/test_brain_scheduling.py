"""Claim order: resource, max-wait, preferred class, aged priority (+residency), FIFO."""

from __future__ import annotations

import pytest

from airig.brain.scheduling import (
    Candidate,
    SchedulingPolicy,
    WorkerView,
    effective_priority,
    eligible_classes,
    order_candidates,
)

NOW = 10_000.0
POLICY = SchedulingPolicy(aging_step_s=60, aging_cap=5, max_wait_s=900, residency_bonus=2)
GPU = WorkerView(classes=("llm", "script", "cpu"))


def cand(task_id, task_class="cpu", priority=5, waited=0.0, model=None):
    return Candidate(task_id, task_class, priority, NOW - waited, model)


def order(cands, worker=GPU):
    return [c.task_id for c in order_candidates(cands, worker, NOW, POLICY)]


def test_resource_tasks_come_first():
    assert order([cand(1, "llm", 10), cand(2, "resource", 1)])[0] == 2


def test_preferred_class_beats_priority():
    assert order([cand(1, "cpu", 10), cand(2, "llm", 1)]) == [2, 1]


def test_higher_priority_first_within_a_class():
    assert order([cand(1, "llm", 3), cand(2, "llm", 8)]) == [2, 1]


def test_fifo_breaks_ties():
    assert order([cand(1, "llm", 5, waited=5), cand(2, "llm", 5, waited=30)]) == [2, 1]


def test_aging_lifts_a_long_waiting_low_priority_task():
    old_low = cand(1, "llm", 3, waited=600)  # 3 + min(5, 10) = 8
    new_mid = cand(2, "llm", 7)
    assert order([new_mid, old_low]) == [1, 2]


def test_aging_is_capped():
    assert effective_priority(cand(1, waited=10**6), GPU, NOW, POLICY) == 5 + POLICY.aging_cap


def test_max_wait_wins_over_class_and_priority():
    starving = cand(1, "cpu", 1, waited=901)
    assert order([cand(2, "llm", 10), starving]) == [1, 2]


def test_resident_model_gets_a_bonus():
    worker = WorkerView(classes=("llm",), resident_models=frozenset({"qwen:7b"}))
    resident = cand(1, "llm", 5, model="qwen:7b")
    cold = cand(2, "llm", 6, waited=10, model="llama:8b")
    assert order([cold, resident], worker) == [1, 2]


@pytest.mark.parametrize(
    ("classes", "expected"),
    [
        (("cpu",), {"cpu"}),
        (("script",), {"script"}),
        (("llm",), {"llm", "resource"}),
        (("llm", "cpu"), {"llm", "cpu", "resource"}),
    ],
)
def test_eligible_classes(classes, expected):
    assert eligible_classes(classes) == expected


def test_a_worker_never_gets_a_class_it_does_not_serve():
    cpu_worker = WorkerView(classes=("cpu",))
    assert order([cand(1, "llm", 10), cand(2, "resource"), cand(3, "cpu")], cpu_worker) == [3]
