"""Where a request's time goes (airig/brain/timing.py), and the store changes it found:
reads on connections of their own, a plan stored in a few statements."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from airig.brain import timing
from airig.brain.api.app import create_app, served
from airig.brain.store import events
from airig.brain.store import plans as plan_store
from airig.brain.store.events import Outbox

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}


def client_for(settings):
    app = create_app(settings)
    return TestClient(served(app)), app


def phase_counts(client) -> dict[tuple[str, str], float]:
    text = client.get("/metrics", headers=ADMIN).text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "airig_brain_request_phase_seconds_count":
                found[(sample.labels["route"], sample.labels["phase"])] = sample.value
            if sample.name == "airig_brain_request_seconds_count":
                found[(sample.labels["route"], "total")] = sample.value
    return found


def test_every_route_is_timed_by_its_template_and_phase(tmp_path):
    client, _ = client_for(h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0))
    with client:
        token = client.post("/v1/workers/register", headers=BOOT, json={"name": "w1"}).json()
        worker = {"Authorization": f"Bearer {token['token']}"}
        plan = {"name": "p", "tasks": [{"id": "a", "type": "noop"}]}
        assert client.post("/v1/plans", headers=ADMIN, json=plan).status_code == 201
        answer = client.post("/v1/exchange", headers=worker, json={"claim": {"wait_s": 0}})
        task = answer.json()["assignments"][0]
        lease = {"attempt": task["attempt"], "lease_id": task["lease_id"]}
        path = f"/v1/tasks/{task['task_id']}/heartbeat"
        assert client.post(path, headers=worker, json=lease).status_code == 200
        counts = phase_counts(client)
    for route in ("POST /v1/plans", "POST /v1/exchange", "POST /v1/workers/register",
                  "POST /v1/tasks/{task_id}/heartbeat"):  # fmt: skip
        assert counts[(route, "total")] == 1, route
        for phase in timing.PHASES:
            assert counts[(route, phase)] == 1, (route, phase)
    # the task id never becomes a label: one series per route
    assert not any(f"/tasks/{task['task_id']}/" in route for route, _ in counts)


def test_the_phases_add_up_to_the_whole():
    clock = timing.Timing()
    clock.start = 10.0
    clock.first_store, clock.last_store = 10.002, 10.050
    clock.spent.update(store_wait=0.020, statements=0.010, commit=0.005, long_poll=0.008)
    spent = clock.phases(end=10.060)
    assert spent["before"] == pytest.approx(0.002)
    assert spent["after"] == pytest.approx(0.010)
    assert spent["between"] == pytest.approx(0.048 - 0.035 - 0.008)
    assert sum(spent.values()) == pytest.approx(0.060)


def test_a_slow_request_is_logged_with_its_phases(tmp_path, caplog):
    client, _ = client_for(h.make_settings(tmp_path, BRAIN_SLOW_REQUEST_MS="0.0001"))
    with client, caplog.at_level(logging.INFO, logger="airig.brain.timing"):
        assert client.get("/v1/workers", headers=ADMIN).status_code == 200
    lines = [r for r in caplog.records if r.getMessage() == "slow request"]
    assert [r.route for r in lines] == ["GET /v1/workers"]
    for phase in timing.PHASES:
        assert getattr(lines[0], f"{phase}_ms") >= 0
    assert lines[0].status == 200


def test_no_slow_request_line_when_it_is_off(tmp_path, caplog):
    client, _ = client_for(h.make_settings(tmp_path, BRAIN_SLOW_REQUEST_MS="0"))
    with client, caplog.at_level(logging.INFO, logger="airig.brain.timing"):
        assert client.get("/v1/workers", headers=ADMIN).status_code == 200
    assert not [r for r in caplog.records if r.getMessage() == "slow request"]


def test_a_read_waits_for_no_writer_and_sees_the_last_commit(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = h.submit(brain, [h.noop("a")])
    inside, release = threading.Event(), threading.Event()

    def slow_write(conn, outbox, now):
        conn.execute("UPDATE tasks SET priority = 9 WHERE plan_id = ?", (plan_id,))
        inside.set()
        release.wait(5)

    writer = threading.Thread(target=brain.write, args=(slow_write,))
    writer.start()
    assert inside.wait(5)
    started = time.monotonic()
    with brain.db.read() as conn:  # the writer holds the write lock meanwhile
        seen = conn.execute("SELECT priority FROM tasks WHERE plan_id = ?", (plan_id,)).fetchone()
    assert time.monotonic() - started < 1
    assert seen["priority"] != 9  # not the uncommitted write
    release.set()
    writer.join(5)
    with brain.db.read() as conn:
        seen = conn.execute("SELECT priority FROM tasks WHERE plan_id = ?", (plan_id,)).fetchone()
    assert seen["priority"] == 9


def test_a_read_connection_refuses_writes_and_a_read_inside_a_write_sees_it(tmp_path):
    brain = h.make_brain(tmp_path)
    with brain.db.read() as conn, pytest.raises(sqlite3.OperationalError):
        conn.execute("DELETE FROM tasks")
    with brain.db.tx() as conn:
        conn.execute(
            "INSERT INTO plans (id, name, body_hash, submitted_by, created_at)"
            " VALUES ('p', 'n', 'h', 't', 1)"
        )
        with brain.db.read() as inner:
            assert inner.execute("SELECT COUNT(*) FROM plans").fetchone()[0] == 1


def test_a_stored_plan_has_its_dependencies_and_the_events_record_would_write(tmp_path):
    brain = h.make_brain(tmp_path)
    tasks = [h.noop(f"t{i}", [f"t{i - 1}"] if i % 3 else []) for i in range(30)]
    tasks.append(h.noop("join", [f"t{i}" for i in range(0, 30, 5)]))
    published: list[str] = []
    original = brain.events.publish

    def keep(box: Outbox) -> None:
        published.extend(box.events)
        original(box)

    brain.events.publish = keep  # type: ignore[method-assign]
    plan_id = h.submit(brain, tasks)
    with brain.db.read() as conn:
        rows = conn.execute("SELECT * FROM tasks WHERE plan_id = ? ORDER BY id", (plan_id,))
        rows = rows.fetchall()
        key_of = {r["id"]: r["key"] for r in rows}
        deps = {(key_of[d["task_id"]], key_of[d["depends_on"]])
                for d in conn.execute("SELECT * FROM deps")}  # fmt: skip
        # each line as record() builds it for the same row, in the same order
        expected = [
            json.loads(events._line(conn, Outbox(), "task_submitted", r, 1000.0,
                                    {"to": r["state"]}))
            for r in rows
        ]  # fmt: skip
    assert [json.loads(line) for line in published] == expected
    assert deps == {(t["id"], d) for t in tasks for d in t["depends_on"]}
    ready = {r["key"] for r in rows if r["state"] == "READY"}
    assert ready == {f"t{i}" for i in range(0, 30, 3)}
    assert all(r["ready_at"] == 1000.0 for r in rows if r["state"] == "READY")
    assert all(r["ready_at"] is None for r in rows if r["state"] != "READY")


def test_dependencies_are_looked_up_by_index_never_scanned(tmp_path):
    """Left to SQLite's planner, the dependency insert scanned the plan's tasks for every
    pair: 19 s for a 500-task plan. SQLite's store whatever AIRIG_TEST_STORE says: this is
    SQLite's planner (EXPLAIN QUERY PLAN), and the statement is the one tuned for it."""
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL="")
    with brain.db.read() as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + plan_store._INSERT_DEPS, ("p", '{"deps": []}')
        ).fetchall()
    details = [row["detail"] for row in plan]
    assert details[0].startswith("SCAN pair"), details
    assert all(d.startswith("SEARCH") for d in details[1:]), details
