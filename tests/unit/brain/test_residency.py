"""The residency policy: compatible first, max-wait, min-resident, eviction, thermal, aging."""

from __future__ import annotations

import pytest

from airig.brain.scheduling.costs import ReloadCostModel, RunTimeModel, guess_load_s
from airig.brain.scheduling.residency import (
    Costs,
    ReadyTask,
    ResidencyPolicy,
    ResidentModel,
    WorkerState,
    choose,
)
from airig.brain.scheduling.thermal import ThermalGuard

NOW = 100_000.0
LLM, WHISPER, EMBED = "qwen2.5:7b", "whisper-small.en", "all-mpnet-base-v2"
POLICY = ResidencyPolicy(
    aging_step_s=60, aging_cap=5, max_wait_s=900, min_resident_s=120, urgent_priority=9
)


def gpu(*resident: tuple[str, float], vram: int | None = None, sizes=None) -> WorkerState:
    sizes = sizes or {}
    models = tuple(ResidentModel(name, NOW - age, sizes.get(name)) for name, age in resident)
    return WorkerState(classes=("llm", "script"), resident=models, vram_total_mb=vram)


def task(tid, model=None, priority=5, waited=0.0, task_class="llm", vram=None) -> ReadyTask:
    return ReadyTask(tid, task_class, priority, NOW - waited, model, vram)


def pick(worker, tasks, costs=None, holders=None, policy=POLICY):
    decision = choose(worker, tasks, NOW, policy, costs or Costs(), holders or {})
    return decision


def test_a_compatible_task_is_preferred_over_an_older_higher_priority_swap():
    worker = gpu((LLM, 3600))
    decision = pick(worker, [task(1, WHISPER, priority=8, waited=300), task(2, LLM, 3)])
    assert (decision.task.task_id, decision.reason, decision.load) == (2, "compatible", None)


def test_a_swap_happens_when_nothing_compatible_is_ready():
    decision = pick(gpu((LLM, 3600)), [task(1, WHISPER)])
    assert (decision.reason, decision.load, decision.evict) == ("swap", WHISPER, (LLM,))


def test_max_wait_overrides_compatible_work():
    worker = gpu((LLM, 3600))
    tasks = [task(1, LLM, priority=10), task(2, WHISPER, priority=1, waited=901)]
    decision = pick(worker, tasks)
    assert (decision.task.task_id, decision.reason) == (2, "overdue")


def test_max_wait_looks_one_task_ahead():
    """Left for one more 100 s task it would pass max-wait: it is taken now."""
    costs = Costs(runtime=RunTimeModel(default_s=100))
    tasks = [task(1, LLM), task(2, WHISPER, priority=1, waited=850)]
    assert pick(gpu((LLM, 3600)), tasks, costs).task.task_id == 2
    assert (
        pick(gpu((LLM, 3600)), tasks, Costs(runtime=RunTimeModel(default_s=10))).task.task_id == 1
    )


def test_priority_nine_swaps_past_compatible_work():
    worker = gpu((LLM, 3600))
    decision = pick(worker, [task(1, LLM, priority=8), task(2, WHISPER, priority=9)])
    assert (decision.task.task_id, decision.reason) == (2, "urgent")


def test_minimum_residency_holds_against_an_opportunistic_swap():
    worker = gpu((LLM, 30))  # loaded 30 s ago; min_resident 120 s, reload ~105 s
    assert pick(worker, [task(1, WHISPER)]) is None
    assert pick(gpu((LLM, 200)), [task(1, WHISPER)]).load == WHISPER


def test_minimum_residency_is_capped_by_the_reload_cost():
    """Idling longer than a 4 s reload would save is waste: Whisper may go after 4 s."""
    assert pick(gpu((WHISPER, 10)), [task(1, LLM)]).evict == (WHISPER,)


def test_overdue_work_overrides_minimum_residency():
    decision = pick(gpu((LLM, 30)), [task(1, WHISPER, waited=950)])
    assert (decision.reason, decision.evict) == ("overdue", (LLM,))


def test_eviction_prefers_what_is_cheap_to_reload_by_learned_cost():
    costs = Costs()
    costs.reload.observe(LLM, 100_000)
    costs.reload.observe(WHISPER, 4_000)
    sizes = {LLM: 4000, WHISPER: 1500}
    worker = gpu((LLM, 3600), (WHISPER, 3600), vram=6144, sizes=sizes)
    decision = pick(worker, [task(1, EMBED, vram=1000)], costs)
    assert decision.evict == (WHISPER,)
    # Learned costs, not names, decide: if the LLM turned out cheap, it goes instead.
    flipped = Costs()
    flipped.reload.observe(LLM, 2_000)
    flipped.reload.observe(WHISPER, 60_000)
    assert pick(worker, [task(1, EMBED, vram=1000)], flipped).evict == (LLM,)


def test_eviction_spares_models_that_ready_tasks_need():
    costs = Costs()
    costs.reload.observe(LLM, 100_000)
    costs.reload.observe(WHISPER, 4_000)
    sizes = {LLM: 4000, WHISPER: 1500}
    worker = gpu((LLM, 3600), (WHISPER, 3600), vram=6144, sizes=sizes)
    tasks = [task(1, EMBED, vram=1000, priority=9), task(2, WHISPER, priority=1)]
    assert pick(worker, tasks, costs).evict == (LLM,)


def test_no_eviction_when_the_model_fits_beside_the_resident_one():
    sizes = {LLM: 5000}
    decision = pick(gpu((LLM, 10), vram=6144, sizes=sizes), [task(1, EMBED, vram=800)])
    assert (decision.load, decision.evict) == (EMBED, ())


def test_a_model_larger_than_the_card_is_never_chosen():
    assert pick(gpu(vram=6144), [task(1, LLM, vram=9000)]) is None


def test_unknown_sizes_treat_the_gpu_as_exclusive():
    assert pick(gpu((LLM, 3600), (EMBED, 3600)), [task(1, WHISPER)]).evict == (LLM, EMBED)


def test_a_swap_that_current_holders_would_outpace_is_not_taken():
    """One other GPU holds the LLM and two 30 s tasks wait: loading here (105 s) loses."""
    tasks = [task(1, LLM), task(2, LLM)]
    assert pick(gpu(), tasks, holders={LLM: 1}) is None
    assert pick(gpu(), tasks * 5, holders={LLM: 1}) is not None  # 300 s backlog
    assert pick(gpu(), tasks, holders={}) is not None  # nobody holds it: someone must


def test_idle_gpus_spread_over_models_by_backlog():
    tasks = [task(i, LLM if i % 2 else WHISPER, task_class="llm") for i in range(20)]
    first = pick(gpu(), tasks)
    assert first.load == LLM  # longest projected drain: 105 s reload + 300 s
    assert pick(gpu(), tasks, holders={LLM: 1}).load == WHISPER


def test_resource_tasks_come_first():
    tasks = [task(1, LLM, priority=10), task(2, LLM, priority=1, task_class="resource")]
    assert pick(gpu((LLM, 3600)), tasks).task.task_id == 2


def test_classes_the_worker_does_not_serve_are_ignored():
    cpu_worker = WorkerState(classes=("cpu",))
    assert pick(cpu_worker, [task(1, LLM)]) is None
    assert pick(cpu_worker, [task(2, task_class="cpu")]).task.task_id == 2


def test_aging_prevents_starvation_before_max_wait():
    worker = gpu((LLM, 3600))
    fresh_high = task(1, LLM, priority=7)
    assert pick(worker, [fresh_high, task(2, LLM, priority=3, waited=60)]).task.task_id == 1
    # 5 aging steps (+5, the cap) lift priority 3 to 8 > 7.
    assert pick(worker, [fresh_high, task(2, LLM, priority=3, waited=301)]).task.task_id == 2


def test_ties_are_fifo():
    tasks = [task(5, LLM, waited=10), task(3, LLM, waited=10), task(4, LLM, waited=20)]
    assert pick(gpu((LLM, 3600)), tasks).task.task_id == 4
    assert pick(gpu((LLM, 3600)), tasks[:2]).task.task_id == 3


def test_reload_cost_model_learns_an_ewma_and_guesses_before():
    costs = ReloadCostModel(alpha=0.5)
    assert costs.cost(LLM) == pytest.approx(105.0)
    assert guess_load_s(WHISPER) == guess_load_s("nomic-embed-text") == 4.0
    assert guess_load_s("mystery") == 60.0
    costs.observe(LLM, 90_000)
    costs.observe(LLM, 120_000)
    assert costs.cost(LLM) == pytest.approx(105.0) and costs.samples(LLM) == 2
    assert costs.cost(None) == 0.0


def test_thermal_guard_blocks_at_the_limit_and_resumes_below_the_hysteresis():
    guard = ThermalGuard(limit_c=83, hysteresis_c=5)
    assert guard.update("gpu0", 82.9) is None and not guard.blocked("gpu0")
    change = guard.update("gpu0", 83.0)
    assert change.blocked and guard.blocked("gpu0")
    for reading in (82.0, 79.0, 78.0, None):  # between limit-hysteresis and the limit
        assert guard.update("gpu0", reading) is None and guard.blocked("gpu0")
    change = guard.update("gpu0", 77.9)
    assert not change.blocked and not guard.blocked("gpu0")
    assert not guard.any_blocked(["gpu0", "gpu1"])
