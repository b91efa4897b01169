"""The residency policy's choices at their edges, and the READY candidates it is fed.

Written against the mutants that survived ``benchmarks/mutation/run.sh`` in
``airig/brain/scheduling/residency.py`` and ``airig/brain/scheduling/candidates.py``: each
test states a decision (which task, why, what to load or evict) that some mutant changed unnoticed.
"""

from __future__ import annotations

import brain_helpers as h
import pytest

from airig.brain.scheduling import candidates
from airig.brain.scheduling.costs import ReloadCostModel, RunTimeModel
from airig.brain.scheduling.residency import (
    Costs,
    Decision,
    ReadyTask,
    ResidencyPolicy,
    ResidentModel,
    WorkerState,
    choose,
    effective_priority,
    swap_fields,
)

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

NOW = 100_000.0
A, B, C = "model-a", "model-b", "model-c"  # no size in the name: 60 s guessed reload
POLICY = ResidencyPolicy()  # the documented defaults: 60 s aging step, 900 s max wait


def worker(*resident: str, classes=("llm",), vram=None, sizes=None, age=3600.0) -> WorkerState:
    sizes = sizes or {}
    models = tuple(ResidentModel(name, NOW - age, sizes.get(name)) for name in resident)
    return WorkerState(classes=classes, resident=models, vram_total_mb=vram)


def task(tid, model=None, priority=5, waited=0.0, task_class="llm", vram=None, count=1):
    return ReadyTask(tid, task_class, priority, NOW - waited, model, vram, count)


def costs(reload=None, runtime=None) -> Costs:
    """Learned costs: ``reload`` / ``runtime`` map a model to seconds."""
    learned = Costs(ReloadCostModel(), RunTimeModel())
    for model, seconds in (reload or {}).items():
        learned.reload.observe(model, seconds * 1000)
    for model, seconds in (runtime or {}).items():
        learned.runtime.observe(model, seconds * 1000)
    return learned


def pick(who, tasks, learned=None, holders=None) -> Decision | None:
    return choose(who, tasks, NOW, POLICY, learned or Costs(), holders or {})


# ------------------------------------------------------------------ the documented priority
def test_effective_priority_follows_the_documented_formula() -> None:
    learned = costs(reload={A: 90, B: 600})
    idle = worker(A)

    def value(t: ReadyTask) -> float:
        return effective_priority(t, idle, NOW, POLICY, learned)

    assert value(task(1)) == 5  # model-free, fresh: its priority
    assert value(task(1, waited=-30)) == 5  # a ready time ahead of the clock earns nothing
    assert value(task(1, waited=90)) == 6.5  # 1.5 aging steps
    assert value(task(1, waited=3600)) == 10  # aging stops at the cap (5)
    assert value(task(1, A)) == 7  # resident: + residency bonus 2
    assert value(task(1, B, waited=60)) == 3  # 600 s reload: - penalty, capped at 3
    assert value(task(1, C)) == 4  # guessed 60 s reload: one point per minute
    assert value(task(1, A, task_class="resource")) == 7
    assert effective_priority(task(1, A), worker(B), NOW, POLICY, learned) == 5 - 1.5


def test_a_resident_model_outranks_a_slightly_higher_model_free_task() -> None:
    tasks = [task(1, priority=4, waited=1, task_class="cpu"), task(2, A, 3, task_class="cpu")]
    decision = pick(worker(A, classes=("cpu",)), tasks)
    assert (decision.task.task_id, decision.reason) == (2, "compatible")


def test_a_model_free_task_of_the_preferred_class_comes_before_higher_priorities() -> None:
    script = worker(classes=("script", "cpu"))
    tasks = [task(1, priority=8, task_class="cpu"), task(2, priority=1, task_class="script")]
    assert pick(script, tasks).task.task_id == 2


# ------------------------------------------------------------------ overdue and the horizon
def test_overdue_tasks_go_oldest_first_whatever_their_priority() -> None:
    tasks = [task(1, A, priority=8, waited=1000), task(2, B, priority=1, waited=2000)]
    decision = pick(worker(C), tasks)
    assert (decision.task.task_id, decision.reason) == (2, "overdue")


def test_a_task_is_overdue_from_exactly_max_wait() -> None:
    decision = pick(worker(C), [task(1, A, priority=1, waited=900)])
    assert decision.reason == "overdue"


def test_with_nothing_compatible_the_horizon_is_max_wait_itself() -> None:
    decision = pick(worker(C), [task(1, A, priority=1, waited=899.5)])
    assert (decision.reason, decision.load) == ("swap", A)


def test_the_horizon_looks_ahead_by_the_best_compatible_tasks_own_model() -> None:
    learned = costs(runtime={A: 200})  # the next A task would hold the worker 200 s
    tasks = [task(1, A, priority=5), task(2, B, priority=1, waited=750)]
    decision = pick(worker(A), tasks, learned)
    assert (decision.task.task_id, decision.reason) == (2, "overdue")


def test_the_horizon_follows_the_task_the_worker_would_run_not_the_oldest() -> None:
    learned = costs(runtime={A: 30, B: 300})
    tasks = [task(1, A, priority=1, waited=60), task(2, B, priority=9), task(3, C, 1, 700)]
    decision = pick(worker(A, B), tasks, learned)  # next would be B's 300 s task
    assert (decision.task.task_id, decision.reason) == (3, "overdue")


# ------------------------------------------------------------------ resource tasks
def test_a_resource_task_needs_no_swap_even_for_a_model_not_resident() -> None:
    load = task(1, B, priority=1, task_class="resource")
    decision = pick(worker(A, classes=("llm", "resource")), [load, task(2, A, priority=9)])
    assert (decision.task.task_id, decision.reason) == (1, "resource")
    assert (decision.load, decision.evict) == (None, ())


# ------------------------------------------------------------------ which model to bring in
def test_the_model_whose_best_task_has_the_highest_priority_is_loaded() -> None:
    tasks = [task(1, A, priority=2, waited=10), task(2, B, priority=7)]
    assert pick(worker(C), tasks).load == B


def test_a_model_is_judged_by_its_highest_priority_task_not_its_oldest() -> None:
    tasks = [task(1, A, priority=1, waited=100), task(2, A, priority=8), task(3, B, 5, 50)]
    decision = pick(worker(C), tasks)
    assert (decision.task.task_id, decision.load) == (2, A)


def test_equal_models_are_split_by_the_cheaper_swap_not_by_age() -> None:
    # A: 60 s reload + 30 s backlog; B: 30 s reload + 60 s backlog: both end at 90 s.
    learned = costs(reload={A: 60, B: 30}, runtime={A: 30, B: 60})
    tasks = [task(1, A, priority=5, waited=1), task(2, B, priority=5)]
    assert pick(worker(classes=("llm",)), tasks, learned).load == B


def test_a_swap_is_worth_it_only_when_the_backlog_per_holder_exceeds_the_reload() -> None:
    learned = costs(reload={A: 60}, runtime={A: 60})
    one = [task(1, A)]
    assert pick(worker(C), one, learned, holders={A: 1}) is None  # 60 s each: not worth it
    two = [task(1, A, count=2)]
    assert pick(worker(C), two, learned, holders={A: 1}).load == A  # 120 s > 60 s
    learned = costs(reload={A: 100}, runtime={A: 60})
    assert pick(worker(C), two, learned, holders={A: 2}) is None  # 60 s per holder < 100 s


def test_the_backlog_counts_the_models_own_run_time() -> None:
    learned = costs(reload={A: 50}, runtime={A: 60})  # the default run time is 30 s
    assert pick(worker(C), [task(1, A)], learned, holders={A: 1}).load == A


# ------------------------------------------------------------------ eviction
def test_an_exact_fit_evicts_nothing() -> None:
    sized = worker(B, vram=10_000, sizes={B: 4_000})
    decision = pick(sized, [task(1, A, vram=6_000)])
    assert (decision.load, decision.evict) == (A, ())


def test_eviction_counts_every_freed_model_and_stops_when_enough_is_free() -> None:
    sizes = {A: 2_000, B: 2_000, C: 2_000}
    learned = costs(reload={A: 10, B: 20, C: 30})  # cheapest to reload go first
    sized = worker(A, B, C, vram=10_000, sizes=sizes)
    decision = pick(sized, [task(1, "model-d", vram=7_000)], learned)
    assert decision.evict == (A, B)


def test_a_model_as_large_as_the_gpu_evicts_everything_and_a_larger_one_waits() -> None:
    sized = worker(A, vram=8_000, sizes={A: 3_000})
    assert pick(sized, [task(1, B, vram=8_000)]).evict == (A,)
    assert pick(sized, [task(1, B, vram=8_001)]) is None


@pytest.mark.parametrize(
    ("total", "sizes"),
    [(None, {A: 2_000, B: 2_000}), (10_000, {A: 2_000})],
    ids=["gpu size unknown", "a resident's size unknown"],
)
def test_an_unknown_size_makes_the_gpu_exclusive(total, sizes) -> None:
    sized = worker(A, B, vram=total, sizes=sizes)
    decision = pick(sized, [task(1, C, vram=1_000)])
    assert (decision.load, set(decision.evict)) == (C, {A, B})


def test_swap_fields_ask_for_vram_only_when_a_model_is_loaded() -> None:
    fresh = task(1, A, vram=5_000)
    assert swap_fields(Decision(fresh, "swap", load=A, evict=(B,))) == {
        "evict": [B],
        "load": A,
        "need_vram_mb": 5_000,
    }
    assert swap_fields(Decision(fresh, "compatible")) == {
        "evict": [],
        "load": None,
        "need_vram_mb": None,
    }
    assert swap_fields(None) == {}


# ------------------------------------------------------------------ candidates from the queue
def heads(brain) -> dict[tuple, int]:
    with brain.db.read() as conn:
        found = candidates.group_heads(conn, ["cpu"])
    return {(t.model, t.priority): (t.task_id, t.count) for t in found}


@pytest.fixture
def brain(tmp_path):
    made = h.make_brain(tmp_path)
    yield made
    made.stop()


def test_every_group_head_comes_with_its_group_size(brain) -> None:
    whisper = "Systran/faster-whisper-small"  # capitals sort before lower case
    tasks = [h.noop(f"n{i}", priority=1) for i in range(3)]
    tasks += [h.noop("w", model=whisper, priority=10), h.noop("q", model="qwen2.5:7b")]
    h.submit(brain, tasks)
    found = heads(brain)
    assert set(found) == {(None, 1), (whisper, 10), ("qwen2.5:7b", 5)}
    assert found[(None, 1)][1] == 3 and found[(whisper, 10)][1] == 1


def test_sensitive_tasks_are_candidates_unless_the_worker_may_not_see_them(brain) -> None:
    h.submit(brain, [h.noop("secret", sensitive=True, priority=9), h.noop("open", priority=2)])
    assert set(heads(brain)) == {(None, 9), (None, 2)}
    with brain.db.read() as conn:
        untrusted = candidates.group_heads(conn, ["cpu"], sensitive=False)
    assert [(t.priority, t.count) for t in untrusted] == [(2, 1)]


def test_group_sizes_are_counted_up_to_the_cap(brain) -> None:
    h.submit(brain, [h.noop(f"n{i}") for i in range(candidates.COUNT_CAP + 3)])
    [(task_id, count)] = heads(brain).values()
    assert count == candidates.COUNT_CAP
