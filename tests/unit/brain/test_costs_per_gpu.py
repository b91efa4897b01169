"""Issue 40 §1: the estimates are per (task type, model, GPU model), and so are the costs the
residency policy weighs: a model that loads in 5 s on one card and in 40 s on another
costs a claim from each what it costs there; a GPU the model never ran on gets the
model-wide figure, a model never run the guess from its name."""

from __future__ import annotations

import json

import brain_helpers as h
import pytest

from airig.brain import leases
from airig.brain.scheduling.costs import ReloadCostModel, RunTimeModel, guess_load_s
from airig.brain.scheduling.learned import Observation
from airig.brain.scheduling.residency import (
    Costs,
    ReadyTask,
    ResidencyPolicy,
    ResidentModel,
    WorkerState,
    choose,
    effective_priority,
)
from airig.brain.scheduling.workers import WorkerView
from airig.brain.store import workers

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

BIG, SMALL = "qwen2.5:14b", "qwen2.5:7b"
FAST, SLOW = "Radeon RX 7900 XTX", "Radeon RX 6600"
NOW = 100_000.0
GIB = 1024


# ---------------------------------------------------------------------- the lookups
def test_a_cost_is_the_one_learned_on_that_gpu_else_model_wide_else_the_guess():
    reload, run = ReloadCostModel(), RunTimeModel()
    reload.learn(BIG, 5.0, FAST)
    reload.learn(BIG, 40.0, SLOW)
    reload.learn(BIG, 22.5)
    run.learn(BIG, 8.0, FAST)
    run.learn(BIG, 30.0, SLOW)
    assert [reload.cost(BIG, gpu) for gpu in (FAST, SLOW, "RTX 3070", None, "")] == [
        5.0, 40.0, 22.5, 22.5, 22.5,
    ]  # fmt: skip
    assert run.estimate(BIG, FAST) == 8.0 and run.estimate(BIG, SLOW) == 30.0
    assert run.estimate(BIG, "RTX 3070") == run.default_s  # no model-wide run time learned
    assert reload.cost(SMALL, FAST) == guess_load_s(SMALL)
    assert reload.cost(None, FAST) == 0.0


def test_a_measurement_on_a_gpu_teaches_that_gpu_and_the_model_wide_figure():
    reload = ReloadCostModel(alpha=1.0)
    reload.observe(BIG, 40_000, SLOW)
    reload.observe(BIG, 5_000, FAST)
    assert (reload.cost(BIG, SLOW), reload.cost(BIG, FAST), reload.cost(BIG)) == (40, 5, 5)
    assert (reload.samples(BIG, SLOW), reload.samples(BIG)) == (1, 2)
    run = RunTimeModel(alpha=1.0)
    run.observe(BIG, 9_000, SLOW)
    assert (run.estimate(BIG, SLOW), run.estimate(BIG, FAST), run.estimate(BIG)) == (9, 9, 9)


def test_a_gpu_label_that_collides_with_the_model_wide_key_is_no_gpu():
    reload = ReloadCostModel()
    reload.learn(BIG, 7.0, "")  # "" is the model-wide figure, never a GPU's
    assert reload.cost(BIG, "") == reload.cost(BIG, None) == reload.cost(BIG, FAST) == 7.0


# ---------------------------------------------------------------------- the policy
def per_gpu_costs() -> Costs:
    costs = Costs()
    costs.reload.learn(BIG, 5.0, FAST)
    costs.reload.learn(BIG, 40.0, SLOW)
    costs.reload.learn(BIG, 22.5)  # the two cards' samples weighted alike
    costs.runtime.learn(BIG, 10.0)
    return costs


def card(gpu: str | None, *resident: ResidentModel) -> WorkerState:
    return WorkerState(classes=("llm",), resident=resident, gpu=gpu)


def test_a_swap_worth_it_on_a_fast_card_is_not_on_a_slow_one():
    # three 14B tasks of 10 s each, one other worker holds the model: 30 s of backlog for
    # it alone. Loading here pays on the card that loads in 5 s, not on the one taking 40 s
    # (the model-wide 22.5 s would have sent both, or neither had it been 35 s).
    ready = [ReadyTask(1, "llm", 5, NOW, BIG, count=3)]
    costs, policy = per_gpu_costs(), ResidencyPolicy()
    fast = choose(card(FAST), ready, NOW, policy, costs, {BIG: 1})
    assert fast is not None and (fast.reason, fast.load) == ("swap", BIG)
    assert choose(card(SLOW), ready, NOW, policy, costs, {BIG: 1}) is None
    model_wide = choose(card(None), ready, NOW, policy, costs, {BIG: 1})
    assert model_wide is not None  # 30 s > 22.5 s: no GPU label, the model-wide figure


def test_the_swap_penalty_is_the_claiming_cards_reload_cost():
    costs, policy = Costs(), ResidencyPolicy(swap_penalty_unit_s=10.0, swap_penalty_cap=10.0)
    costs.reload.learn(BIG, 5.0, FAST)
    costs.reload.learn(BIG, 40.0, SLOW)
    task = ReadyTask(1, "llm", 5, NOW, BIG)
    fast = effective_priority(task, card(FAST), NOW, policy, costs)
    slow = effective_priority(task, card(SLOW), NOW, policy, costs)
    assert (fast, slow) == (5 - 0.5, 5 - 4.0)


def test_minimum_residency_is_capped_by_this_cards_reload_cost():
    # a 14B model loaded 20 s ago: reloading it costs 5 s here, so holding it idle for
    # min_resident_s (120 s) is not worth it; on the slow card (40 s) it is
    costs = per_gpu_costs()
    ready = [ReadyTask(1, "llm", 5, NOW, SMALL)]
    loaded = ResidentModel(BIG, NOW - 20.0)
    fast = choose(card(FAST, loaded), ready, NOW, ResidencyPolicy(), costs, {})
    assert fast is not None and fast.evict == (BIG,)
    assert choose(card(SLOW, loaded), ready, NOW, ResidencyPolicy(), costs, {}) is None


# ---------------------------------------------------------------------- the brain
@pytest.fixture
def brain(tmp_path):
    made = h.make_brain(tmp_path)
    yield made
    made.stop()


def register(brain, name: str, gpu: str, models: tuple[str, ...] = ()) -> None:
    gpus = json.dumps([{"index": 0, "name": gpu, "vram_total_mb": 24 * GIB,
                        "vram_free_mb": 20 * GIB}])  # fmt: skip
    brain.write(
        lambda conn, outbox, now: workers.register(
            conn, name, f"hash-{name}", '["llm"]', 0, gpus, json.dumps(list(models)), now,
            "rig", None,
        )
    )  # fmt: skip


def observe(brain, worker: str, seen: Observation) -> None:
    brain.write(
        lambda conn, outbox, now: brain.scheduling.estimates.observe(
            conn, "noop", BIG, worker, seen, 1000.0
        )
    )


def claim(brain, worker: str, now: float):
    view = WorkerView(("cpu", "llm"), frozenset())
    return brain.write(
        lambda conn, outbox, _: leases.claim(
            conn, outbox, worker, view, now, brain.settings, brain.scheduling
        )
    )


def test_the_brain_feeds_each_gpus_learned_costs_and_claims_by_them(brain):
    register(brain, "fast", FAST)
    register(brain, "slow", SLOW)
    register(brain, "holder", "RTX 3090", models=(BIG,))  # the 14B is resident there
    for _ in range(3):
        observe(brain, "fast", Observation(load_s=5.0, run_s=10.0))
        observe(brain, "slow", Observation(load_s=40.0, run_s=10.0))
    plan = h.submit(brain, [h.noop(k, model=BIG) for k in "abc"])
    # 30 s of backlog for the one holder: a 40 s load here would finish after it drains
    # (the model-wide 22.5 s, which both cards got before, sent the slow one too)
    assert claim(brain, "slow", 1001.0) is None
    found = claim(brain, "fast", 1002.0)
    assert found is not None and found[2].load == BIG
    assert h.row(brain, plan, found[0]["key"])["state"] == "LEASED"
    costs = brain.scheduling.costs
    assert (costs.reload.cost(BIG, FAST), costs.reload.cost(BIG, SLOW)) == (5.0, 40.0)
    assert costs.reload.cost(BIG, "RTX 3090") == pytest.approx(22.5)  # never loaded there
    assert costs.reload.cost(SMALL, FAST) == guess_load_s(SMALL)


def test_a_load_event_carries_the_cost_learned_on_that_gpu(brain):
    register(brain, "fast", FAST)
    register(brain, "slow", SLOW)
    observe(brain, "slow", Observation(load_s=40.0))
    h.submit(brain, [h.noop("a", model=BIG)])
    task, _, _ = claim(brain, "fast", 1001.0)
    metrics = {"wall_ms": 1000, "swap": {"loaded": BIG, "load_ms": 5_000, "unload_ms": {}}}
    brain.write(lambda conn, outbox, now: brain.scheduling.observe_completion(
        conn, outbox, task, metrics, "fast", now))  # fmt: skip
    with brain.db.read() as conn:
        [event] = conn.execute(
            "SELECT body_json FROM events WHERE event_type = 'model.load'"
        ).fetchall()
    assert json.loads(event["body_json"])["reload_cost_s"] == 5.0
    assert brain.scheduling.costs.reload.cost(BIG, SLOW) == 40.0
