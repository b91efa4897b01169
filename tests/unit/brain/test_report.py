"""Issue 40 §2: the kit's history per day or week (``store/report.py``, ``GET /v1/report``)
over a brain that ran plans on several days, an empty store, hostile ``since``/``by`` and
model names; on SQLite and, with ``AIRIG_TEST_STORE=postgresql``, PostgreSQL."""

from __future__ import annotations

import json
import time

import brain_helpers as h
import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient

from airig.brain import leases
from airig.brain.api.app import create_app
from airig.brain.api.routes import report as routes_report
from airig.brain.store import escalations, report
from airig.brain.store.events import store_line
from airig.common.protocol import CompleteRequest

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
DAY = report.DAY_S
BASE = 20_000 * DAY  # 2024-10-04, a midnight UTC (a Friday)
HOSTILE = '<script>alert("x")</script>:7b'


@pytest.fixture
def brain(tmp_path):
    made = h.make_brain(tmp_path)
    yield made
    made.stop()


def complete(brain, plan_id, key, now, metrics=None):
    task = h.row(brain, plan_id, key)

    def change(conn, outbox, _):
        current = leases.states.get_task(conn, task["id"])
        body = CompleteRequest(
            attempt=task["attempt"], lease_id=task["lease_id"], output={"text": "ok"},
            metrics=metrics or {},
        )  # fmt: skip
        return leases.complete(conn, outbox, current, "w1", body, now, brain.settings)

    return brain.write(change)


def run(brain, plan_id, key, start, seconds, metrics=None):
    """Claims the plan's next task at ``start`` (it must be ``key``), runs it ``seconds``."""
    claimed = h.claim(brain, start)
    assert claimed is not None and claimed[0]["key"] == key
    h.do(brain, plan_id, key, "start", start)
    complete(brain, plan_id, key, start + seconds, metrics)


def swap(model, load_ms, unloads):
    return {"swap": {"loaded": model, "load_ms": load_ms, "unload_ms": unloads,
                     "free_vram_mb": 4000}}  # fmt: skip


def history(brain, base: float) -> None:
    """Day 0: three runs (10, 20, 30 s; two with a model load), a failure, a retry.
    Day 1: one run of a model whose name is markup, an escalation, two alerts."""
    first = h.submit(
        brain,
        [h.noop("a"), h.noop("b", ["a"]), h.noop("c", ["b"]), h.noop("d", ["c"], retry_count=0),
         h.noop("e", ["d"])],
        now=base,
    )  # fmt: skip
    run(brain, first, "a", base + 100, 10, swap("qwen2.5:7b", 2000, {"qwen2.5:14b": 500}))
    run(brain, first, "b", base + 200, 20, swap("qwen2.5:7b", 1000, {}))
    run(brain, first, "c", base + 300, 30)
    assert h.claim(brain, base + 400) is not None
    h.do(brain, first, "d", "fail", base + 410, error_type="boom", message="no", retryable=False)
    second = h.submit(brain, [h.noop("x", retry_count=2), h.noop("y")], now=base + 500)
    assert h.claim(brain, base + 500)[0]["key"] == "x"
    h.do(brain, second, "x", "fail", base + 510, error_type="flaky", message="again")
    brain.write(lambda conn, outbox, _: leases.states.cancel_plan(conn, outbox, second, base + 600))
    # day 1
    third = h.submit(brain, [h.noop("m", model=HOSTILE)], now=base + DAY + 10)
    run(brain, third, "m", base + DAY + 20, 4)

    def ledger(conn, outbox, _):
        task = h.row(brain, third, "m")
        call = escalations.enqueue(conn, task, "on_failure", base + DAY + 30)
        escalations.update(conn, call, provider="openai", model="gpt-x", cost=0.25,
                           answered_at=base + DAY + 40)  # fmt: skip
        for kind in ("service_down", "service_down"):
            body = json.dumps({"event_type": "alert_fired", "alert": kind, "subject": "ollama"})
            store_line(conn, outbox, base + DAY + 50, "alert_fired", None, None, body)

    brain.write(ledger)


def read(brain, since, until, by="day"):
    with brain.db.read() as conn:
        return report.read(conn, report.Window(since, until, by))


# ---------------------------------------------------------------------- the store
def test_a_day_by_day_report_of_a_brain_with_history(brain):
    history(brain, BASE)
    found = read(brain, BASE, BASE + 2 * DAY - 1)
    assert found["truncated"] == []
    day0, day1 = found["buckets"]
    assert (day0["start"], day0["label"]) == (BASE, "2024-10-04")
    assert day1["label"] == "2024-10-05"
    assert day0["tasks"] == [{
        "type": "noop", "model": "", "done": 3, "failed": 1, "retries": 1,
        "run_p50_s": 20.0, "run_p90_s": 30.0,
    }]  # fmt: skip
    assert day0["loads"] == [{"model": "qwen2.5:7b", "loads": 2, "swap_s": 3.5}]
    assert day0["escalations"] == [] and day0["alerts"] == []
    assert day1["tasks"] == [{
        "type": "noop", "model": HOSTILE, "done": 1, "failed": 0, "retries": 0,
        "run_p50_s": 4.0, "run_p90_s": 4.0,
    }]  # fmt: skip
    assert day1["escalations"] == [
        {"provider": "openai", "model": "gpt-x", "escalations": 1, "answered": 1, "cost": 0.25}
    ]
    assert day1["alerts"] == [{"alert": "service_down", "fired": 2}]


def test_weeks_start_on_monday_and_only_the_window_is_read(brain):
    history(brain, BASE)
    found = read(brain, BASE + DAY, BASE + 2 * DAY, by="week")
    (week,) = found["buckets"]
    assert week["label"] == "2024-W40" and week["start"] == BASE - 4 * DAY  # Monday 30 Sep
    assert [row["model"] for row in week["tasks"]] == [HOSTILE]  # day 0 is before since


def test_an_empty_store_lists_every_bucket_empty(brain):
    found = read(brain, BASE, BASE + 6 * DAY + 5)
    assert len(found["buckets"]) == 7
    assert all(
        not (b["tasks"] or b["loads"] or b["escalations"] or b["alerts"]) for b in found["buckets"]
    )


def test_free_form_swap_metrics_never_fail_the_read(brain):
    plan = h.submit(brain, [h.noop("a"), h.noop("b", ["a"]), h.noop("c", ["b"])], now=BASE)
    run(brain, plan, "a", BASE + 10, 1, {"swap": {"loaded": "m", "load_ms": "slow",
                                                  "unload_ms": [1, 2]}})  # fmt: skip
    run(brain, plan, "b", BASE + 20, 1, {"swap": {"loaded": 7, "load_ms": 5}})
    run(brain, plan, "c", BASE + 30, 1, {"swap": "yes", "note": '"swap"'})
    (day,) = read(brain, BASE, BASE + 100)["buckets"]
    assert day["loads"] == [{"model": "m", "loads": 1, "swap_s": 0.0}]


def test_sections_past_the_row_cap_say_they_were_cut(brain, monkeypatch):
    monkeypatch.setattr(report, "MAX_ROWS", 1)
    plan = h.submit(brain, [h.noop("a"), h.noop("b", ["a"], model="other")], now=BASE)
    run(brain, plan, "a", BASE + 10, 1)
    run(brain, plan, "b", BASE + 20, 1)
    found = read(brain, BASE, BASE + 100)
    assert "tasks" in found["truncated"] and "durations" in found["truncated"]
    assert len(found["buckets"][0]["tasks"]) == 1


# ---------------------------------------------------------------------- the route
def test_the_route_reports_recent_history(brain):
    now = time.time()
    history(brain, now - 3 * DAY)
    with TestClient(create_app(brain.settings)) as client:
        answer = client.get("/v1/report", params={"since": "7d"}, headers=ADMIN)
        weekly = client.get("/v1/report", params={"since": "2w", "by": "week"}, headers=ADMIN)
        assert client.get("/v1/report").status_code == 401
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["by"] == "day" and body["asked"] == "7d" and body["clamped"] is False
    assert len(body["buckets"]) in (7, 8)
    done = sum(row["done"] for b in body["buckets"] for row in b["tasks"])
    assert done == 4
    assert weekly.status_code == 200
    assert sum(r["done"] for b in weekly.json()["buckets"] for r in b["tasks"]) == 4


def test_a_since_past_retention_is_clamped_to_it(tmp_path):
    brain = h.make_brain(tmp_path, AIRIG_RETENTION_DAYS=30)
    try:
        with TestClient(create_app(brain.settings)) as client:
            body = client.get("/v1/report", params={"since": "100000d"}, headers=ADMIN).json()
        assert body["clamped"] is True and body["retention_days"] == 30
        assert body["until"] - body["since"] == pytest.approx(30 * DAY)
    finally:
        brain.stop()


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"since": "100000d"}, "more than 366"),  # retention 0 keeps all: refused, not read
        ({"since": "999999w", "by": "week"}, "more than 366"),
        ({"since": "7"}, None),
        ({"since": "0d"}, None),
        ({"since": "-7d"}, None),
        ({"since": "7d\x00"}, None),
        ({"since": "1e9d"}, None),
        ({"since": "７d"}, None),  # a full-width digit is no digit here
        ({"by": "month"}, None),
        ({"by": "<b>day</b>"}, None),
    ],
)
def test_bad_since_or_by_is_one_line_422(tmp_path, params, words):
    brain = h.make_brain(tmp_path, AIRIG_RETENTION_DAYS=0)
    try:
        with TestClient(create_app(brain.settings)) as client:
            answer = client.get("/v1/report", params=params, headers=ADMIN)
    finally:
        brain.stop()
    assert answer.status_code == 422
    detail = answer.json()["detail"]
    if words is None:  # the OpenAPI grammar: FastAPI's refusal, naming the parameter
        assert [error["loc"] for error in detail] == [["query", next(iter(params))]]
        assert all("\n" not in error["msg"] for error in detail)
        assert "\x00" not in answer.text  # the input is never echoed
    else:
        assert isinstance(detail, str) and "\n" not in detail and words in detail


def test_the_window_checks_its_grammar_itself_too():
    for since, by in (("7d\n", "day"), ("0d", "day"), ("7d", "month")):
        with pytest.raises(HTTPException) as refused:
            routes_report.window(since, by, 0, 1e9)
        assert refused.value.status_code == 422 and "\n" not in refused.value.detail


def test_an_overlong_since_is_refused_before_any_read(brain):
    with TestClient(create_app(brain.settings)) as client:
        answer = client.get("/v1/report", params={"since": "9" * 5000}, headers=ADMIN)
    assert answer.status_code == 422


def test_a_report_over_100k_events_loads_none_of_them(brain):
    """100k retries and alerts and 20k tasks over 30 days: the report holds only its grouped
    rows (tracemalloc's peak), not the rows it read; the time it takes is measured in the
    commit, not asserted."""
    plan = h.submit(brain, [h.noop("seed")], now=BASE)
    metrics = json.dumps(swap("qwen2.5:7b", 1500, {"qwen2.5:14b": 250}))

    def fill(conn, outbox, _):
        conn.executemany(
            """INSERT INTO tasks (plan_id, key, name, type, task_class, payload_json, model,
                   priority, trusted, sensitive, timeout_s, retry_count, state, created_at,
                   started_at, finished_at, metrics_json)
               VALUES (?, ?, 'n', 'llm', 'llm', '{}', ?, 0, 1, 0, 60, 3, ?, ?, ?, ?, ?)""",
            [
                (plan, f"k{i}", f"model-{i % 7}", "SUCCEEDED" if i % 9 else "FAILED",
                 BASE, BASE + i * 120, BASE + i * 120 + i % 50, metrics)
                for i in range(20_000)
            ],
        )  # fmt: skip
        conn.executemany(
            "INSERT INTO events (ts, event_type, plan_id, task_id, body_json) VALUES (?,?,?,?,?)",
            [
                (BASE + i * 25, "task_retry_scheduled", plan, 2 + i % 20_000, "{}")
                if i % 4
                else (BASE + i * 25, "alert_fired", None, None, '{"alert": "worker_down"}')
                for i in range(100_000)
            ],
        )

    brain.write(fill)
    import tracemalloc

    tracemalloc.start()
    found = read(brain, BASE, BASE + 30 * DAY - 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(found["buckets"]) == 30 and found["truncated"] == []
    assert sum(r["done"] + r["failed"] for b in found["buckets"] for r in b["tasks"]) == 20_000
    assert sum(r["retries"] for b in found["buckets"] for r in b["tasks"]) == 75_000
    assert sum(a["fired"] for b in found["buckets"] for a in b["alerts"]) == 25_000
    assert peak < 8 * 1024 * 1024, peak  # grouped rows only: 30 days x 7 models
