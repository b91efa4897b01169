"""The brain's claim path with the residency policy, model events and the thermal guard."""

from __future__ import annotations

import json

import brain_helpers as h
import pytest

from airig.common.protocol import GpuInfo

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

LLM, WHISPER = "qwen2.5:7b", "whisper-small.en"


@pytest.fixture
def brain(tmp_path):
    made = h.make_brain(tmp_path, AIRIG_THERMAL_LIMIT_C=80, AIRIG_THERMAL_HYSTERESIS_C=4)
    yield made
    made.stop()


def events(brain, kind: str) -> list[dict]:
    with brain.db.read() as conn:
        rows = conn.execute("SELECT body_json FROM events WHERE event_type = ?", (kind,))
        return [json.loads(row["body_json"]) for row in rows]


def heartbeat(brain, worker: str, temperature: float) -> None:
    gpus = [GpuInfo(index=0, temperature_c=temperature)]
    brain.write(
        lambda conn, outbox, now: brain.scheduling.observe_heartbeat(
            conn, outbox, worker, gpus, now
        )
    )


def test_a_claim_prefers_the_task_whose_model_is_resident(brain):
    h.submit(brain, [h.noop("a", model=WHISPER, priority=8), h.noop("b", model=LLM, priority=3)])
    task, _ = h.claim(brain, 1001.0, classes=("cpu",), models=(LLM,))
    assert task["key"] == "b"
    leased = events(brain, "task_leased")[0]
    assert (leased["placement"], leased["load"]) == ("compatible", None)


def test_a_hot_gpu_claims_nothing_until_it_cools_below_the_hysteresis(brain):
    h.submit(brain, [h.noop("a")])
    heartbeat(brain, "w1", 81.0)
    assert h.claim(brain, 1001.0) is None
    heartbeat(brain, "w1", 77.0)  # below the limit, not below limit - hysteresis
    assert h.claim(brain, 1002.0) is None
    assert brain.scheduling.warnings("w1")
    heartbeat(brain, "w1", 75.5)
    assert h.claim(brain, 1003.0)[0]["key"] == "a"
    kinds = [e["reason"] for e in events(brain, "gpu.thermal_block")]
    assert len(kinds) == 1 and "81" in kinds[0]
    assert len(events(brain, "gpu.thermal_resume")) == 1


def test_resource_reports_become_model_events_and_learned_costs(brain):
    load = {"action": "load", "service": "ollama", "model": LLM}
    h.submit(brain, [{"id": "load", "type": "resource", "payload": load, "model": LLM}])
    task, _ = h.claim(brain, 1001.0, classes=("llm",))
    brain.write(
        lambda conn, outbox, now: brain.scheduling.observe_completion(
            conn, outbox, task, {"load_ms": 95_000, "wall_ms": 95_100}, "w1", now
        )
    )
    [event] = events(brain, "model.load")
    assert (event["model"], event["duration_ms"], event["worker_id"]) == (LLM, 95_000, "w1")
    assert brain.scheduling.costs.reload.cost(LLM) == pytest.approx(95.0)


def test_a_swap_reported_with_a_task_is_learned_too(brain):
    h.submit(brain, [h.noop("a", model=WHISPER)])
    task, _ = h.claim(brain, 1001.0)
    swap = {"unload_ms": {LLM: 1200}, "loaded": WHISPER, "load_ms": 3900, "free_vram_mb": 5000}
    brain.write(
        lambda conn, outbox, now: brain.scheduling.observe_completion(
            conn, outbox, task, {"swap": swap, "wall_ms": 20_000}, "w1", now
        )
    )
    assert [e["model"] for e in events(brain, "model.unload")] == [LLM]
    assert brain.scheduling.costs.reload.cost(WHISPER) == pytest.approx(3.9)
    assert brain.scheduling.costs.runtime.estimate(WHISPER) == pytest.approx(20.0)
