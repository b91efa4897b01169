"""Retention (airig/brain/store/retention.py): what a pass deletes, what it never touches, how
small its transactions are; log rotation; the prune route, /v1/store and the gauges."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.store import dialect, retention
from airig.brain.store.events import EventLog, Outbox, record, rotate, rotated_files
from airig.brain.store.results import task_dir

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

DAY = 86_400.0
T0 = 1_000_000.0
ADMIN = {"Authorization": "Bearer admin-secret-token"}


def run_plan(brain, keys: list[str], now: float, fail: str | None = None) -> str:
    """A plan of independent noop tasks, each claimed and completed (or failed) at ``now``."""
    plan_id = h.submit(brain, [h.noop(k) for k in keys], now=now)
    for _ in keys:
        task, _payload = h.claim(brain, now)
        if task["key"] == fail:
            h.do(brain, plan_id, task["key"], "fail", now, error_type="e", message="m",
                 retryable=False)  # fmt: skip
        else:
            h.do(brain, plan_id, task["key"], "complete", now, output={"text": "x" * 100})
    return plan_id


def count(brain, sql: str, *args) -> int:
    with brain.db.read() as conn:
        return conn.execute(sql, args).fetchone()[0]


def table_counts(brain, plan_id: str) -> dict[str, int]:
    return {
        "plans": count(brain, "SELECT COUNT(*) FROM plans WHERE id = ?", plan_id),
        "tasks": count(brain, "SELECT COUNT(*) FROM tasks WHERE plan_id = ?", plan_id),
        "events": count(brain, "SELECT COUNT(*) FROM events WHERE plan_id = ?", plan_id),
        "deps": count(
            brain,
            "SELECT COUNT(*) FROM deps d JOIN tasks t ON t.id = d.task_id WHERE t.plan_id = ?",
            plan_id,
        ),  # fmt: skip
    }


def goal_columns(conn) -> list[tuple]:
    """PRAGMA table_info's (cid, name, type, notnull, default) of ``goals``, on either engine."""
    if dialect.is_pg(conn):
        rows = conn.execute(
            """SELECT ordinal_position, column_name,
                      CASE WHEN data_type IN ('double precision', 'real') THEN 'REAL'
                           WHEN data_type LIKE '%int%' THEN 'INTEGER' ELSE 'TEXT' END,
                      is_nullable = 'NO',
                      column_default FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'goals'"""
        )
        return [tuple(row) for row in rows]
    return [tuple(row) for row in conn.execute("PRAGMA table_info(goals)")]


def add_goal(brain, plan_id: str) -> None:
    """A row in the planner's ``goals`` table, whatever its other columns are."""
    with brain.db.tx() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS goals (id TEXT PRIMARY KEY, plan_id TEXT)")
        columns = goal_columns(conn)
        values = {
            c[1]: (0 if "INT" in c[2] or "REAL" in c[2] else "x")
            for c in columns if c[3] and c[4] is None
        }  # fmt: skip
        values.update(id=f"goal-{plan_id}", plan_id=plan_id)
        marks = ", ".join("?" * len(values))
        conn.execute(
            f"INSERT INTO goals ({', '.join(values)}) VALUES ({marks})", list(values.values())
        )


def test_a_pass_deletes_old_finished_plans_whole_and_nothing_else(tmp_path):
    brain = h.make_brain(tmp_path)
    old = run_plan(brain, ["a", "b", "c"], T0, fail="b")
    with brain.db.tx() as conn:  # deps: c depends on nothing here; add one by hand
        ids = [r[0] for r in conn.execute("SELECT id FROM tasks WHERE plan_id = ?", (old,))]
        conn.execute("INSERT INTO deps (task_id, depends_on) VALUES (?, ?)", (ids[2], ids[0]))
    folder = task_dir(brain.settings.results_dir, old, "a")
    folder.mkdir(parents=True)
    (folder / "frame.png").write_bytes(b"p" * 5000)
    add_goal(brain, old)
    recent = run_plan(brain, ["a"], T0 + 25 * DAY)
    # Running since the start: its first task holds a lease, the second waits on it.
    running = h.submit(brain, [h.noop("hold"), h.noop("after", ["hold"])], now=T0)
    h.claim(brain, T0)
    running_before = table_counts(brain, running)
    # Secrets and state retention must not touch.
    with brain.db.tx() as conn:
        conn.execute("INSERT INTO alerts (kind, subject, fired_at, message) VALUES "
                     "('queue_depth', 'queue', ?, 'm')", (T0,))  # fmt: skip
        conn.execute("INSERT INTO tokens (token_hash, scope, name, created_at, id) VALUES "
                     "('h', 'submit', 'n', ?, 'tid')", (T0,))  # fmt: skip
        for ts in (T0, T0 + 29 * DAY):  # a loose event (no plan): old, and recent
            record(conn, Outbox(), "gpu.thermal_block", {"plan_id": None, "key": None,
                   "id": None, "attempt": None, "task_class": None, "model": None}, ts)  # fmt: skip
    before = table_counts(brain, old)
    assert before["tasks"] == 3 and before["events"] > 6 and before["deps"] == 1

    done = brain.retention.run(older_than_s=10 * DAY, now=T0 + 31 * DAY)

    assert table_counts(brain, old) == {"plans": 0, "tasks": 0, "events": 0, "deps": 0}
    assert not (brain.settings.results_dir / old).exists()
    assert count(brain, "SELECT COUNT(*) FROM goals WHERE plan_id = ?", old) == 0
    assert (done.plans, done.tasks) == (1, 3)
    assert done.events == before["events"] + 1  # and the old loose one
    assert done.result_bytes == 5000
    assert table_counts(brain, recent)["tasks"] == 1  # finished 6 days ago: kept
    assert table_counts(brain, running) == running_before  # created long ago, still running
    assert count(brain, "SELECT COUNT(*) FROM events WHERE plan_id IS NULL") == 1
    assert count(brain, "SELECT COUNT(*) FROM alerts") == 1
    assert count(brain, "SELECT COUNT(*) FROM tokens WHERE id = 'tid'") == 1
    # A claim still works after the pass: the waiting task runs once its upstream is done.
    h.do(brain, running, "hold", "complete", T0 + 31 * DAY)
    assert h.state_of(brain, running)["after"] == "READY"


def test_a_dry_run_counts_what_a_pass_removes_and_removes_nothing(tmp_path):
    brain = h.make_brain(tmp_path)
    for day in range(5):
        run_plan(brain, ["a", "b"], T0 + day * DAY)
    with brain.db.read() as conn:
        files = {r[0] for r in conn.execute("SELECT id FROM plans")}
    for plan_id in files:
        folder = task_dir(brain.settings.results_dir, plan_id, "a")
        folder.mkdir(parents=True)
        (folder / "out.bin").write_bytes(b"o" * 100)
    now = T0 + 10 * DAY
    dry = brain.retention.run(older_than_s=7.5 * DAY, dry_run=True, now=now)
    assert count(brain, "SELECT COUNT(*) FROM plans") == 5
    assert len(list(brain.settings.results_dir.iterdir())) == 5
    real = brain.retention.run(older_than_s=7.5 * DAY, now=now)
    assert (dry.plans, dry.tasks, dry.events, dry.result_bytes) == (
        real.plans, real.tasks, real.events, real.result_bytes,
    ) == (3, 6, real.events, 300)  # fmt: skip
    assert real.events > 0 and dry.dry_run and not real.dry_run
    assert count(brain, "SELECT COUNT(*) FROM plans") == 2


class Changes:
    """A connection that counts the rows its statements changed, as SQLite's
    ``total_changes`` does, on either engine (PostgreSQL's connection has no such count)."""

    def __init__(self, conn) -> None:
        self.conn, self.rows = conn, 0

    def execute(self, sql: str, *args):
        cursor = self.conn.execute(sql, *args)
        if sql.lstrip().split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            self.rows += cursor.rowcount
        return cursor

    def __getattr__(self, name: str):
        return getattr(self.conn, name)


def test_a_large_plan_goes_in_small_transactions(tmp_path, monkeypatch):
    brain = h.make_brain(tmp_path)
    keys = [f"t{i}" for i in range(600)]
    plan_id = h.submit(brain, [h.noop(k) for k in keys[:1]] + [h.noop(k, ["t0"]) for k in keys[1:]],
                       now=T0)  # fmt: skip
    with brain.db.tx() as conn:
        conn.execute("UPDATE tasks SET state = 'SUCCEEDED', finished_at = ? WHERE plan_id = ?",
                     (T0, plan_id))  # fmt: skip
    events = count(brain, "SELECT COUNT(*) FROM events WHERE plan_id = ?", plan_id)
    assert events > retention.BATCH  # one per task submitted, more per start
    changes: list[int] = []
    real_tx = brain.db.tx

    @contextmanager
    def counted(*args, **kwargs):
        with real_tx(*args, **kwargs) as conn:
            counter = Changes(conn)
            yield counter
            changes.append(counter.rows)

    monkeypatch.setattr(brain.db, "tx", counted)
    done = brain.retention.run(older_than_s=DAY, now=T0 + 2 * DAY)
    assert (done.plans, done.tasks, done.events) == (1, 600, events)
    assert len(changes) >= 6  # events, deps and tasks, two batches each
    assert max(changes) <= retention.BATCH
    assert table_counts(brain, plan_id) == {"plans": 0, "tasks": 0, "events": 0, "deps": 0}


def test_retention_zero_keeps_everything_and_the_timer_skips(tmp_path):
    brain = h.make_brain(tmp_path, AIRIG_RETENTION_DAYS=0)
    run_plan(brain, ["a"], 1.0)  # finished in 1970
    brain.retention.tick()
    assert count(brain, "SELECT COUNT(*) FROM plans") == 1


def test_the_events_log_rotates_by_size_and_keeps_k_files(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", tmp_path / "samples.jsonl", max_bytes=1000, keep=2)
    line = json.dumps({"timestamp": "2026-01-01T00:00:00Z", "pad": "x" * 180})
    for _ in range(30):
        log.publish(Outbox(events=[line]))
    files = [tmp_path / "events.jsonl", *rotated_files(tmp_path / "events.jsonl")]
    assert [f.name for f in files] == ["events.jsonl", "events.jsonl.1", "events.jsonl.2"]
    assert all(f.stat().st_size <= 1000 for f in files)
    # whole lines only: a batch is never split across files
    assert all(json.loads(x)["pad"] for f in files for x in f.read_text().splitlines())
    assert log.sizes()["events"] == sum(f.stat().st_size for f in files)


def test_expire_rotates_an_old_log_and_drops_rotated_files_past_the_age(tmp_path):
    path = tmp_path / "samples.jsonl"
    log = EventLog(tmp_path / "events.jsonl", path, max_bytes=0, keep=5)
    log.publish(Outbox(samples=[{"timestamp": T0, "prompt": "p", "response": "r"}]))
    assert log.expire(cutoff=T0 - 1, now=T0 + 10) == 0  # nothing older than the cutoff yet
    assert rotated_files(path) == []
    assert log.expire(cutoff=T0 + 1, now=T0 + 5) == 0  # its first line is older: rotated
    assert rotated_files(path) == [tmp_path / "samples.jsonl.1"]
    assert not path.exists()
    size = (tmp_path / "samples.jsonl.1").stat().st_size
    assert log.expire(cutoff=T0 + 6, now=T0 + 20) == size  # its newest line is older: gone
    assert rotated_files(path) == []


def test_rotate_with_keep_zero_drops_the_log(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("x\n")
    rotate(path, 0, 0.0)
    assert not path.exists() and rotated_files(path) == []


@pytest.fixture
def client(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        yield client


def test_the_prune_route_is_admin_only_and_reports(client):
    plan = client.post("/v1/plans", headers=ADMIN, json={
        "name": "p", "tasks": [{"id": "a", "type": "noop"}]}).json()["id"]  # fmt: skip
    client.post(f"/v1/plans/{plan}/cancel", headers=ADMIN)
    token = client.post("/v1/tokens", headers=ADMIN, json={"scope": "submit"}).json()["token"]
    submitter = {"Authorization": f"Bearer {token}"}
    assert client.post("/v1/plans/prune", headers=submitter, json={}).status_code == 403
    bad = client.post("/v1/plans/prune", headers=ADMIN, json={"older_than_s": -1})
    assert bad.status_code == 422
    dry = client.post("/v1/plans/prune", headers=ADMIN, json={"older_than_s": 0, "dry_run": True})
    assert dry.status_code == 200 and dry.json()["plans"] == 1
    assert client.get(f"/v1/plans/{plan}", headers=ADMIN).status_code == 200
    done = client.post("/v1/plans/prune", headers=ADMIN, json={"older_than_s": 0}).json()
    assert (done["plans"], done["tasks"], done["dry_run"]) == (1, 1, False)
    assert client.get(f"/v1/plans/{plan}", headers=ADMIN).status_code == 404
    # the default age is the brain's retention (30 days): nothing that young goes
    assert client.post("/v1/plans/prune", headers=ADMIN, json={}).json()["plans"] == 0


def test_store_sizes_are_served_and_exported(client, tmp_path):
    (tmp_path / "results" / "p1").mkdir(parents=True, exist_ok=True)
    (tmp_path / "results" / "p1" / "f").write_bytes(b"r" * 1234)
    client.post(
        "/v1/plans", headers=ADMIN, json={"name": "p", "tasks": [{"id": "a", "type": "noop"}]}
    )
    store = client.get("/v1/store", headers=ADMIN).json()
    db = client.app.state.db
    if dialect.is_pg(db):  # the database's size as the server counts it: no file of ours
        with db.read() as conn:
            size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        assert store["db_bytes"] == size > 0
    else:
        assert store["db_bytes"] == os.path.getsize(tmp_path / "state" / "brain.db")
    assert store["results_bytes"] == 1234 and store["retention_days"] == 30
    assert store["logs"]["events"] > 0 and "training" in store["logs"]
    metrics = client.get("/metrics", headers=ADMIN).text
    assert 'airig_store_bytes{part="results"} 1234.0' in metrics
    assert 'airig_store_bytes{part="events_log"}' in metrics
    assert "airig_retention_days 30.0" in metrics
    assert client.get("/v1/store").status_code == 401
