"""Issue 40 §1: estimates learned from finished attempts per (task type, model, GPU), kept
in the store (a restart, a snapshot), served at ``GET /v1/estimates``, used by the
scheduler (costs, the VRAM check before a load), bounded whatever workers send."""

from __future__ import annotations

import json
import math

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from airig.brain import leases
from airig.brain.api.app import create_app
from airig.brain.scheduling import learned
from airig.brain.scheduling.costs import guess_load_s
from airig.brain.scheduling.estimates import WAITING, gpus_of
from airig.brain.scheduling.learned import Observation
from airig.brain.scheduling.workers import WorkerView
from airig.brain.store import backups, workers
from airig.brain.store import estimates as stored
from airig.common.protocol import CompleteRequest, FailRequest

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

BIG, SMALL = "qwen2.5:14b", "qwen2.5:7b"
GIB = 1024
ADMIN = {"Authorization": "Bearer admin-secret-token"}


@pytest.fixture
def brain(tmp_path):
    made = h.make_brain(tmp_path)
    yield made
    made.stop()


def register(brain, name: str, free_mb: int, total_mb: int = 8 * GIB, gpu="RTX 3070") -> None:
    gpus = json.dumps([{"index": 0, "name": gpu, "vram_total_mb": total_mb,
                        "vram_free_mb": free_mb}])  # fmt: skip
    brain.write(
        lambda conn, outbox, now: workers.register(
            conn, name, f"hash-{name}", '["llm"]', 0, gpus, "[]", now, "rig", None
        )
    )


def observe(brain, task_type, model, worker, seen: Observation, now=1000.0) -> dict:
    return brain.write(
        lambda conn, outbox, _: brain.scheduling.estimates.observe(
            conn, task_type, model, worker, seen, now
        )
    )


def rows(brain) -> list[dict]:
    with brain.db.read() as conn:
        return [dict(r) for r in stored.every(conn)]


def claim(brain, worker: str, now: float, models=()):
    view = WorkerView(("cpu", "llm"), frozenset(models))
    return brain.write(
        lambda conn, outbox, _: leases.claim(
            conn, outbox, worker, view, now, brain.settings, brain.scheduling
        )
    )


# ---------------------------------------------------------------------- the figures
def test_recent_runs_weigh_more_than_old_ones():
    window: dict = {}
    for value in [10.0] * 60 + [40.0] * 40:  # the model got slower 40 runs ago
        window = learned.fold(window, Observation(run_s=value))
    figures = learned.figures(window)
    # unweighted, the median of 60x10 and 40x40 is 10; weighted, the newest 40 win
    assert figures["run_p50_s"] == 40.0
    assert figures["run_p90_s"] == 40.0
    assert learned.quantile([], 0.5) is None


def test_a_million_observations_keep_a_window_of_200():
    window: dict = {"run": list(range(1_000_000))}  # a row someone filled by hand
    folded = learned.fold(window, Observation(run_s=5.0, failed=True))
    assert all(len(series) <= learned.WINDOW for series in folded.values())
    for i in range(1000):
        folded = learned.fold(folded, Observation(run_s=float(i), vram_mb=100.0))
    assert [len(folded[s]) for s in ("run", "vram", "fail")] == [200, 200, 200]


@pytest.mark.parametrize(
    "value", [-1, -0.001, math.nan, math.inf, -math.inf, 10**400, 1e300, True, "60", None, [1]]
)
def test_a_duration_that_is_no_duration_is_dropped_not_learned(value):
    # metrics is free-form (older workers): a bad figure there must not fail a completion
    # whose output is good, and a clamped figure would still teach something false
    assert learned.seconds(value, 1 / 1000) is None
    assert learned.rate(value) is None


def test_a_damaged_window_is_read_as_what_it_still_holds():
    folded = learned.fold({"run": [1.0, "x", None, True, math.nan, 2.0], "vram": "nope"},
                          Observation(run_s=3.0))  # fmt: skip
    assert folded["run"] == [1.0, 2.0, 3.0] and folded["vram"] == []


# ---------------------------------------------------------------------- the report
@pytest.mark.parametrize(
    "field, value",
    [("peak_vram_mb", -1), ("peak_vram_mb", 5 * 1024 * 1024 * 1024), ("peak_vram_mb", 1.5),
     ("peak_vram_mb", "100"), ("tokens_per_s", -3.0), ("tokens_per_s", 1e12),
     ("tokens_per_s", math.nan), ("tokens_per_s", math.inf)],
)  # fmt: skip
def test_a_report_with_an_impossible_measurement_is_refused(field, value):
    with pytest.raises(ValidationError):
        CompleteRequest.model_validate({"attempt": 1, "lease_id": "x", field: value})


def test_an_older_workers_report_is_still_valid_and_the_fields_reach_the_metrics():
    old = CompleteRequest.model_validate({"attempt": 1, "lease_id": "x", "metrics": {"a": 1}})
    assert (old.peak_vram_mb, old.tokens_per_s, old.metrics) == (None, None, {"a": 1})
    new = CompleteRequest.model_validate(
        {"attempt": 1, "lease_id": "x", "peak_vram_mb": 9300, "tokens_per_s": 41.5,
         "metrics": {"tokens_per_s": -7, "wall_ms": 5}}
    )  # fmt: skip
    assert new.metrics == {"tokens_per_s": 41.5, "wall_ms": 5, "peak_vram_mb": 9300}


def test_the_http_edge_answers_422_for_an_impossible_vram(tmp_path):
    with TestClient(create_app(h.make_settings(tmp_path))) as client:
        boot = {"Authorization": "Bearer bootstrap-secret-token"}
        token = client.post("/v1/workers/register", headers=boot,
                            json={"name": "w1", "classes": ["cpu"]}).json()["token"]  # fmt: skip
        for bad in (-5, 10**13, "9300"):
            answer = client.post(
                "/v1/tasks/1/complete", headers={"Authorization": f"Bearer {token}"},
                json={"attempt": 1, "lease_id": "x", "peak_vram_mb": bad},
            )  # fmt: skip
            assert answer.status_code == 422, bad
            assert "peak_vram_mb" in answer.text


# ---------------------------------------------------------------------- kept
def test_a_completion_is_learned_and_stored_per_type_model_and_gpu(brain):
    register(brain, "g1", free_mb=8 * GIB)
    h.submit(brain, [h.noop("a", model=BIG)])
    task, _, _ = claim(brain, "g1", 1001.0, models=(BIG,))
    metrics = {"wall_ms": 12_000, "peak_vram_mb": 9300, "tokens_per_s": 40.0,
               "swap": {"loaded": BIG, "load_ms": 40_000, "unload_ms": {}}}  # fmt: skip
    brain.write(lambda conn, outbox, now: brain.scheduling.observe_completion(
        conn, outbox, task, metrics, "g1", now))  # fmt: skip
    [row] = rows(brain)
    assert (row["task_type"], row["model"], row["gpu"]) == ("noop", BIG, "RTX 3070")
    assert (row["samples"], row["failures"], row["run_p50_s"], row["load_p50_s"]) == (
        1, 0, 12.0, 40.0)  # fmt: skip
    assert (row["vram_peak_mb"], row["tokens_per_s"], row["failure_rate"]) == (9300, 40.0, 0.0)
    assert brain.scheduling.costs.reload.cost(BIG) == pytest.approx(40.0)
    assert brain.scheduling.costs.runtime.estimate(BIG) == pytest.approx(12.0)


def test_a_failed_attempt_counts_in_the_failure_rate(brain):
    h.submit(brain, [h.noop("a", model=SMALL)])
    task, _, _ = claim(brain, "w1", 1001.0, models=(SMALL,))
    body = FailRequest(attempt=task["attempt"], lease_id=task["lease_id"], error_type="oops")
    brain.write(lambda conn, outbox, now: leases.fail(
        conn, outbox, task, "w1", body, now, brain.retry, brain.settings, brain.scheduling
    ))  # fmt: skip
    observe(brain, "noop", SMALL, "w1", Observation(run_s=3.0))
    [row] = rows(brain)
    assert (row["samples"], row["failures"]) == (2, 1)
    assert 0.4 < row["failure_rate"] < 0.6


def test_an_older_workers_impossible_figures_are_dropped_not_learned(brain):
    h.submit(brain, [h.noop("a", model=SMALL)])
    task, _, _ = claim(brain, "w1", 1001.0, models=(SMALL,))
    metrics = {"wall_ms": -5, "peak_vram_mb": 10**13, "tokens_per_s": -1,
               "swap": {"loaded": SMALL, "load_ms": 10**30, "unload_ms": {}}}  # fmt: skip
    brain.write(lambda conn, outbox, now: brain.scheduling.observe_completion(
        conn, outbox, task, metrics, "w1", now))  # fmt: skip
    [row] = rows(brain)
    figures = [row[k] for k in ("run_p50_s", "load_p50_s", "vram_peak_mb", "tokens_per_s")]
    assert figures == [None, None, None, None] and row["samples"] == 1
    assert brain.scheduling.costs.reload.cost(SMALL) == guess_load_s(SMALL)


def test_new_tasks_of_a_waiting_model_get_the_reason_too(brain):
    register(brain, "small-card", free_mb=GIB)
    observe(brain, "noop", BIG, "small-card", Observation(vram_mb=9318))
    plan = h.submit(brain, [h.noop("a", model=BIG)])
    assert claim(brain, "small-card", 1001.0) is None
    later = h.submit(brain, [h.noop("b", model=BIG)])
    assert claim(brain, "small-card", 1002.0) is None  # within a minute: not written again
    assert h.row(brain, later, "b")["reason"] is None
    assert claim(brain, "small-card", 1062.0) is None
    assert h.row(brain, later, "b")["reason"] == h.row(brain, plan, "a")["reason"]


def test_a_task_without_a_model_is_not_learned(brain):
    # the costs and the VRAM check are per model; shell and media tasks come hundreds a
    # second, and a store write per completion would slow every exchange
    h.submit(brain, [h.noop("a")])
    task, _, _ = claim(brain, "w1", 1001.0)
    brain.write(lambda conn, outbox, now: brain.scheduling.observe_completion(
        conn, outbox, task, {"wall_ms": 5}, "w1", now))  # fmt: skip
    assert rows(brain) == []


def test_a_model_never_run_keeps_the_guess_from_its_name(brain):
    observe(brain, "noop", SMALL, "w1", Observation(load_s=12.0))
    assert brain.scheduling.costs.reload.cost(SMALL) == pytest.approx(12.0)
    assert brain.scheduling.costs.reload.cost(BIG) == guess_load_s(BIG) == 210.0
    assert brain.scheduling.costs.runtime.estimate(BIG) == 30.0


def test_a_restart_keeps_what_was_learned(tmp_path):
    first = h.make_brain(tmp_path)
    try:
        for load in (40.0, 41.0, 39.0):
            observe(first, "llm", BIG, "w1", Observation(load_s=load, run_s=9.0, vram_mb=9300))
        before = rows(first)
    finally:
        first.stop()
    again = h.make_brain(tmp_path)
    try:
        assert rows(again) == before
        h.submit(again, [h.noop("a", model=SMALL)])
        claim(again, "w1", 1001.0)  # the first claim reads what the store holds
        assert again.scheduling.costs.reload.cost(BIG) == pytest.approx(40.0)
        assert again.scheduling.costs.runtime.estimate(BIG) == pytest.approx(9.0)
        observe(again, "llm", BIG, "w1", Observation(load_s=40.0))
        assert rows(again)[0]["samples"] == 4  # goes on from the stored window
    finally:
        again.stop()


def test_a_snapshot_of_the_store_keeps_the_estimates(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL="")  # --snapshot is SQLite's
    try:
        observe(brain, "llm", BIG, "w1", Observation(load_s=40.0, vram_mb=9300))
        before = rows(brain)
        (tmp_path / "copy").mkdir()
        backups.take_snapshot(brain.settings.db_path, tmp_path / "copy" / "brain.db")
    finally:
        brain.stop()
    restored = h.make_brain(tmp_path / "restored", BRAIN_DATABASE_URL="",
                            BRAIN_DB=str(tmp_path / "copy" / "brain.db"))  # fmt: skip
    try:
        assert rows(restored) == before
    finally:
        restored.stop()


def test_a_flood_of_observations_and_keys_stays_bounded(brain, monkeypatch):
    monkeypatch.setattr(stored, "MAX_KEYS", 50)

    def flood(conn, outbox, now):
        for i in range(2000):
            brain.scheduling.estimates.observe(
                conn, "noop", SMALL, "w1", Observation(run_s=float(i % 7)), now + i
            )
        for i in range(120):  # a worker or a plan inventing names
            brain.scheduling.estimates.observe(
                conn, "noop", f"m{i}:1b", "w1", Observation(run_s=1.0), now + 3000 + i
            )

    brain.write(flood)
    with brain.db.read() as conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM estimates").fetchone()
        window = json.loads(stored.window(conn, "noop", "m119:1b", "cpu")["window_json"])
        (longest,) = conn.execute("SELECT MAX(LENGTH(window_json)) FROM estimates").fetchone()
    assert count == 50
    assert window["run"] == [1.0]
    assert longest < 8000  # 200 observations of a few series, never the 2000


def test_a_gpu_name_a_store_cannot_hold_is_made_one_it_can(brain):
    register(brain, "nul", free_mb=GIB, gpu="RTX\x00 3070\n<b>" + "x" * 500)
    observe(brain, "noop", SMALL, "nul", Observation(run_s=1.0))
    [row] = rows(brain)
    assert row["gpu"].startswith("RTX? 3070?<b>") and len(row["gpu"]) <= 64
    assert gpus_of([]).label == "cpu"


# ---------------------------------------------------------------------- the VRAM check
def test_a_model_whose_learned_peak_does_not_fit_waits_and_says_why(brain):
    register(brain, "small-card", free_mb=5939)  # 5.8 GiB free
    register(brain, "big-card", free_mb=20 * GIB, total_mb=24 * GIB, gpu="RTX 3070")
    observe(brain, "noop", BIG, "small-card", Observation(vram_mb=9318))  # 9.1 GiB
    plan = h.submit(brain, [h.noop("a", model=BIG)])
    assert claim(brain, "small-card", 1001.0) is None
    reason = h.row(brain, plan, "a")["reason"]
    assert reason == (f"{WAITING}9.1 GiB of {BIG} does not fit GPU 0's 5.8 GiB free on small-card")
    found = claim(brain, "big-card", 1002.0)
    assert found is not None and found[0]["key"] == "a"
    assert found[2].load == BIG
    assert h.row(brain, plan, "a")["state"] == "LEASED"


def test_the_reason_clears_once_another_task_of_the_model_is_placed(brain):
    register(brain, "small-card", free_mb=2 * GIB)
    register(brain, "big-card", free_mb=20 * GIB, total_mb=24 * GIB)
    observe(brain, "noop", BIG, "small-card", Observation(vram_mb=9318))
    plan = h.submit(brain, [h.noop("a", model=BIG), h.noop("b", model=BIG)])
    assert claim(brain, "small-card", 1001.0) is None
    assert all(h.row(brain, plan, k)["reason"].startswith(WAITING) for k in "ab")
    claim(brain, "big-card", 1002.0)
    left = [h.row(brain, plan, k) for k in "ab"]
    assert [r["reason"] for r in left if r["state"] == "READY"] == [None]


def test_a_resident_model_the_swap_evicts_counts_as_room(brain):
    register(brain, "g", free_mb=1 * GIB)  # 7 GiB held by the 7B model it would evict
    observe(brain, "noop", BIG, "g", Observation(vram_mb=6 * GIB))
    observe(brain, "noop", SMALL, "g", Observation(vram_mb=7 * GIB))
    h.submit(brain, [h.noop("a", model=BIG, priority=9)])  # urgent: evicts a fresh model
    found = claim(brain, "g", 1001.0, models=(SMALL,))
    assert found is not None and found[2].load == BIG and found[2].evict == (SMALL,)


def test_no_measurement_no_check(brain):
    register(brain, "g", free_mb=10)  # almost nothing free, but nothing was learned
    h.submit(brain, [h.noop("a", model=BIG)])
    assert claim(brain, "g", 1001.0) is not None


def test_a_model_already_resident_needs_no_room(brain):
    register(brain, "g", free_mb=10)
    observe(brain, "noop", BIG, "g", Observation(vram_mb=9318))
    h.submit(brain, [h.noop("a", model=BIG)])
    assert claim(brain, "g", 1001.0, models=(BIG,)) is not None


# ---------------------------------------------------------------------- served
def test_get_estimates_answers_what_the_store_holds(tmp_path):
    with TestClient(create_app(h.make_settings(tmp_path))) as client:
        brain = client.app.state.brain
        assert client.get("/v1/estimates", headers=ADMIN).json()["estimates"] == []
        observe(brain, "llm", BIG, "w1", Observation(load_s=40.0, run_s=9.5, vram_mb=9300,
                                                     tokens_per_s=31.0))  # fmt: skip
        body = client.get("/v1/estimates", headers=ADMIN).json()
        assert (body["window"], body["decay"]) == (learned.WINDOW, learned.DECAY)
        assert body["estimates"] == rows(brain)
        assert body["estimates"][0]["load_p50_s"] == 40.0
        assert client.get("/v1/estimates").status_code == 401
        for scope, status in (("metrics", 200), ("submit", 403)):
            token = client.post("/v1/tokens", headers=ADMIN, json={"scope": scope}).json()
            bearer = {"Authorization": f"Bearer {token['token']}"}
            assert client.get("/v1/estimates", headers=bearer).status_code == status
