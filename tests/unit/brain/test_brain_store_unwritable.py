"""A store that fills up or turns read-only (issue 36 §5): 507 (full) or 503 (read-only)
with the one error body and the fix, /health degraded, one `store_unwritable` alert held
in memory and recorded once the store can be written, no `worker_down` for workers whose
heartbeats could not be saved, and recovery by itself.

The store is made full and read-only at its write connection, with SQLite's own errors:
``max_page_count`` (SQLITE_FULL, the transaction rolled back by SQLite as on a full disk)
and ``query_only`` (SQLITE_READONLY). On PostgreSQL (``AIRIG_TEST_STORE=postgresql``, and
the ``pg_url`` tests below always) with the server's: a statement trigger on every table
raising disk_full (53100), and one raising read_only_sql_transaction (25006, as a standby
answers): on every write connection, as the brain runs its writes on several (its shared
durable ones on ``pg_writers.py``'s). A real filesystem that fills up:
tests/integration/test_brain_store_full.py."""

from __future__ import annotations

import errno
import sqlite3
import time

import brain_helpers as h
import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.store import dialect, unwritable

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
# Big enough to need new pages of the store (a full one has none to give).
PLAN = {"name": "p", "tasks": [{"id": f"task-{n}", "type": "noop"} for n in range(60)]}
SMALL = {"name": "s", "tasks": [{"id": "a", "type": "noop"}]}
UNLIMITED = 1073741823


PG_FULL = """CREATE OR REPLACE FUNCTION airig_test_full() RETURNS trigger AS $$
BEGIN RAISE EXCEPTION 'could not extend file: No space left on device'
      USING ERRCODE = 'disk_full'; END $$ LANGUAGE plpgsql"""
PG_READ_ONLY = """CREATE OR REPLACE FUNCTION airig_test_full() RETURNS trigger AS $$
BEGIN RAISE EXCEPTION 'cannot execute a write in a read-only transaction'
      USING ERRCODE = 'read_only_sql_transaction'; END $$ LANGUAGE plpgsql"""


class Store:
    """Makes the brain's store full, read-only, or writable again, at its connection."""

    def __init__(self, brain) -> None:
        self.brain, self.monkeypatch = brain, pytest.MonkeyPatch()
        self.pg = dialect.is_pg(brain.db)

    def full(self) -> None:
        with self.brain.db.writer() as conn:
            if self.pg:  # every write the server is asked for fails as on a full disk
                self._pg_refuse(conn, PG_FULL)
            else:
                pages = conn.execute("PRAGMA page_count").fetchone()[0]
                conn.execute(f"PRAGMA max_page_count = {pages}")
        # The disk is full too: a commit that fits the pages it has is no recovery.
        self.monkeypatch.setattr(unwritable, "free_bytes", lambda where: 0)

    def read_only(self) -> None:
        with self.brain.db.writer() as conn:
            if self.pg:  # every write on any connection fails as on a standby
                self._pg_refuse(conn, PG_READ_ONLY)
            else:
                conn.execute("PRAGMA query_only = 1")

    def writable(self) -> None:
        with self.brain.db.writer() as conn:
            if self.pg:
                for table in self._pg_tables(conn):
                    conn.execute(f"DROP TRIGGER IF EXISTS airig_test_full ON {table}")
            else:
                conn.execute(f"PRAGMA max_page_count = {UNLIMITED}")
                conn.execute("PRAGMA query_only = 0")
        self.monkeypatch.undo()

    def _pg_refuse(self, conn, function: str) -> None:
        conn.execute(function)
        for table in self._pg_tables(conn):
            conn.execute(
                f"CREATE OR REPLACE TRIGGER airig_test_full BEFORE INSERT OR UPDATE"
                f" OR DELETE ON {table} EXECUTE FUNCTION airig_test_full()"
            )

    @staticmethod
    def _pg_tables(conn) -> list[str]:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        return [row[0] for row in rows]


@pytest.fixture
def rig(tmp_path, monkeypatch):
    # The reaper's own passes stay out of the way: the test runs them.
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0, BRAIN_REAPER_INTERVAL_S=3600)
    app = create_app(settings)
    brain = app.state.brain
    notices: list = []
    store = Store(brain)
    with TestClient(app, raise_server_exceptions=False) as client:
        monkeypatch.setattr(brain.notifier, "send", notices.extend)
        yield client, brain, store, notices
        store.writable()


def plans(brain) -> list[str]:
    with brain.db.read() as conn:
        return [row[0] for row in conn.execute("SELECT id FROM plans ORDER BY created_at")]


def store_alert_events(brain) -> list[str]:
    with brain.db.read() as conn:
        rows = conn.execute(
            "SELECT event_type FROM events WHERE event_type LIKE 'alert_%'"
            f" AND {dialect.json_text(conn, 'body_json', 'alert')} = 'store_unwritable'"
            " ORDER BY id"
        )
        return [row[0] for row in rows]


def register(client, name="w1"):
    answer = client.post(
        "/v1/workers/register", headers=BOOT, json={"name": name, "classes": ["cpu"]}
    )
    assert answer.status_code == 200, answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def test_a_full_store_answers_507_with_the_fix_and_reports_degraded(rig):
    client, brain, store, notices = rig
    store.full()
    refused = client.post("/v1/plans", headers=ADMIN, json=PLAN)
    assert refused.status_code == 507, refused.text
    body = refused.json()
    assert set(body) == {"detail", "retryable", "retry_after_s"}
    assert body["retryable"] is True and body["retry_after_s"] == 30
    assert refused.headers["Retry-After"] == "30"
    assert "store is full: 0 B free on" in body["detail"]
    assert "nothing was stored" in body["detail"] and "docker system df" in body["detail"]
    assert plans(brain) == []
    health = client.get("/health")
    assert health.status_code == 503
    assert (health.json()["status"], health.json()["store"]) == ("degraded", "full")
    held = client.get("/v1/alerts", headers=ADMIN).json()["alerts"]
    assert [(a["kind"], a["subject"]) for a in held] == [("store_unwritable", "store")]
    assert "0 B free" in held[0]["message"]
    assert health.json()["alerts"] == held
    metrics = client.get("/metrics", headers=ADMIN).text
    assert 'airig_alert_active{alert="store_unwritable",subject="store"} 1.0' in metrics
    assert 'airig_alerts_fired_total{alert="store_unwritable"} 1.0' in metrics
    assert [(n.kind, n.fired) for n in notices] == [("store_unwritable", True)]


def test_a_read_only_store_answers_503_with_the_fix(rig):
    client, brain, store, _ = rig
    store.read_only()
    refused = client.post("/v1/plans", headers=ADMIN, json=PLAN)
    assert refused.status_code == 503, refused.text
    assert refused.json()["retryable"] is True
    assert "store is read-only" in refused.json()["detail"]
    if store.pg:  # the server refuses: its fix, not a volume of the brain's
        assert "make the PostgreSQL server accept writes again" in refused.json()["detail"]
    else:
        assert "remount it read-write" in refused.json()["detail"]
    assert client.get("/health").json()["store"] == "read_only"


def test_full_then_read_only_then_recovered_is_one_alert_recorded_once(rig):
    client, brain, store, notices = rig
    store.full()
    assert client.post("/v1/plans", headers=ADMIN, json=PLAN).status_code == 507
    assert client.post("/v1/plans", headers=ADMIN, json=PLAN).status_code == 507
    store.read_only()
    assert client.post("/v1/plans", headers=ADMIN, json=PLAN).status_code == 503
    held = client.get("/v1/alerts", headers=ADMIN).json()["alerts"]
    assert len(held) == 1 and "read-only" in held[0]["message"]  # the same alert, now
    assert store_alert_events(brain) == []  # it cannot be in the store yet
    store.writable()
    answer = client.post("/v1/plans", headers=ADMIN, json=PLAN)
    assert answer.status_code == 201  # recovered by itself: nothing restarted
    assert plans(brain) == [answer.json()["id"]]
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/v1/alerts", headers=ADMIN).json()["alerts"] == []
    assert store_alert_events(brain) == ["alert_fired", "alert_cleared"]
    assert [(n.kind, n.fired) for n in notices] == [("store_unwritable", True),
                                                    ("store_unwritable", False)]  # fmt: skip
    brain.reap_once()  # a later pass records nothing twice
    assert store_alert_events(brain) == ["alert_fired", "alert_cleared"]


def test_keyed_and_unkeyed_retries_of_a_refused_plan_store_it_once(rig):
    client, brain, store, _ = rig
    keyed = {**ADMIN, "Idempotency-Key": "k-1"}
    store.full()
    for headers in (ADMIN, keyed, ADMIN, keyed):
        assert client.post("/v1/plans", headers=headers, json=PLAN).status_code == 507
    store.writable()
    first = client.post("/v1/plans", headers=keyed, json=PLAN)
    again = client.post("/v1/plans", headers=keyed, json=PLAN)
    unkeyed = client.post("/v1/plans", headers=ADMIN, json=PLAN)
    assert (first.status_code, again.status_code, unkeyed.status_code) == (201, 200, 201)
    assert again.json()["id"] == first.json()["id"]
    assert sorted(plans(brain)) == sorted({first.json()["id"], unkeyed.json()["id"]})


def test_a_worker_whose_heartbeats_could_not_be_saved_is_not_down(rig):
    client, brain, store, _ = rig
    worker = register(client)
    lease_s = brain.settings.lease_s
    store.full()
    assert client.post("/v1/plans", headers=ADMIN, json=PLAN).status_code == 507
    # A heartbeat may squeeze into the pages the store has, or not; an alert pass that
    # changes nothing commits. Either way the store is still full.
    beat = client.post("/v1/workers/heartbeat", headers=worker, json={})
    assert beat.status_code in (200, 507)
    later = time.time() + 3 * lease_s  # a lease and more without a saved heartbeat
    assert brain.check_alerts(now=later) == []
    store.writable()
    assert client.post("/v1/plans", headers=ADMIN, json=PLAN).status_code == 201
    recovered = brain.store_health.recovered_at
    # Silent counts from the recovery, as from a restart: not yet a lease.
    assert [n.kind for n in brain.check_alerts(now=recovered + lease_s / 2)] == []
    # A worker that stays silent a lease after it is down, as before.
    fired = brain.check_alerts(now=recovered + 2 * lease_s)
    assert [(n.kind, n.subject) for n in fired] == [("worker_down", "w1")]


def test_a_worker_down_before_the_outage_stays_down_during_it(rig):
    client, brain, store, _ = rig
    register(client)
    fired = brain.check_alerts(now=time.time() + 3 * brain.settings.lease_s)
    assert [n.kind for n in fired] == ["worker_down"]
    store.full()
    assert client.post("/v1/plans", headers=ADMIN, json=PLAN).status_code == 507
    assert brain.check_alerts(now=time.time() + 4 * brain.settings.lease_s) == []  # no clear
    rows = client.get("/v1/alerts", headers=ADMIN).json()["alerts"]
    assert sorted(a["kind"] for a in rows) == ["store_unwritable", "worker_down"]


def test_leases_whose_renewals_could_not_be_saved_are_extended_not_expired(rig):
    client, brain, store, _ = rig
    plan = h.submit(brain, [h.noop("a")])
    assert h.claim(brain, time.time()) is not None
    with brain.db.tx() as conn:  # its renewals were refused: the lease ran out meanwhile
        conn.execute("UPDATE tasks SET lease_expires_at = ? WHERE plan_id = ?", (1.0, plan))
    store.read_only()
    with pytest.raises(unwritable.StoreUnwritable):
        brain.reap_once()
    store.writable()
    brain.reap_once()  # the first pass after the outage: it extends, then reaps
    assert h.state_of(brain, plan) == {"a": "LEASED"}
    assert h.row(brain, plan, "a")["lease_expires_at"] > time.time()


def test_the_exchange_fast_path_answers_a_read_only_store_503(rig):
    client, brain, store, _ = rig
    worker = register(client)
    plan = client.post("/v1/plans", headers=ADMIN, json=SMALL).json()["id"]
    store.read_only()
    refused = client.post("/v1/exchange", headers=worker, json={"claim": {"wait_s": 0}})
    assert refused.status_code == 503, refused.text
    assert refused.json()["retryable"] is True and "read-only" in refused.json()["detail"]
    assert h.state_of(brain, plan) == {"a": "READY"}
    store.writable()
    claimed = client.post("/v1/exchange", headers=worker, json={"claim": {"wait_s": 0}})
    assert [a["key"] for a in claimed.json()["assignments"]] == ["a"]


# ---- what is and is not a store that cannot be written ---------------------------------
def _sqlite_error(name: str) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(name.lower())
    error.sqlite_errorname = name
    return error


def test_only_storage_errors_count_and_a_refusal_raised_from_one_stays_a_refusal(tmp_path):
    kind = unwritable.kind_of
    assert kind(_sqlite_error("SQLITE_FULL"), tmp_path) == "full"
    assert kind(OSError(errno.ENOSPC, "full"), tmp_path) == "full"
    assert kind(OSError(errno.EDQUOT, "quota"), tmp_path) == "full"
    assert kind(OSError(errno.EROFS, "ro"), tmp_path) == "read_only"
    assert kind(_sqlite_error("SQLITE_READONLY_DBMOVED"), tmp_path) == "read_only"
    assert kind(_sqlite_error("SQLITE_CONSTRAINT_UNIQUE"), tmp_path) is None
    assert kind(OSError(errno.ENOENT, "gone"), tmp_path) is None
    assert kind(ValueError("SQLITE_FULL"), tmp_path) is None
    # An I/O error on a volume with room that is not read-only: not ours to name.
    assert kind(_sqlite_error("SQLITE_IOERR_WRITE"), tmp_path) is None
    # A ROLLBACK's complaint raised while SQLITE_FULL was handled: the full disk.
    complaint = _sqlite_error("SQLITE_ERROR")
    complaint.__context__ = _sqlite_error("SQLITE_FULL")
    assert kind(complaint, tmp_path) == "full"
    # An HTTP refusal raised while handling one is the refusal, not a full disk.
    try:
        try:
            raise _sqlite_error("SQLITE_FULL")
        except sqlite3.Error:
            raise HTTPException(409, "taken")  # noqa: B904
    except HTTPException as exc:
        assert kind(exc, tmp_path) is None
    # A plain SQLITE_READONLY from elsewhere than a brain write (a read connection
    # refuses writes with it: a bug) counts only on a read-only volume.
    assert kind(_sqlite_error("SQLITE_READONLY"), tmp_path, sqlite_readonly=False) is None


def test_a_write_on_a_read_connection_is_a_500_not_a_read_only_store(rig):
    client, brain, _, _ = rig

    def bug() -> None:
        with brain.db.read() as conn:
            conn.execute("DELETE FROM plans")  # refused: a read connection (query_only)

    client.app.router.add_api_route("/v1/test-bug", bug)
    answer = client.get("/v1/test-bug")
    assert answer.status_code == 500
    assert answer.json()["detail"] == "internal error: OperationalError"
    assert brain.store_health.episode is None


def test_a_result_file_the_disk_cannot_take_is_a_507_and_nothing_is_stored(rig, monkeypatch):
    client, brain, _, _ = rig
    worker = register(client)
    plan = client.post("/v1/plans", headers=ADMIN, json=SMALL).json()["id"]
    claimed = client.post("/v1/claims", headers=worker, json={"wait_s": 0}).json()
    lease = {"attempt": claimed["attempt"], "lease_id": claimed["lease_id"]}
    monkeypatch.setattr(unwritable, "free_bytes", lambda where: 1024)

    def no_room(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    from airig.brain.store import results

    monkeypatch.setattr(results, "store_output", no_room)  # the results volume is full
    done = {**lease, "output": {"text": "done"}}
    answer = client.post(f"/v1/tasks/{claimed['task_id']}/complete", headers=worker, json=done)
    assert answer.status_code == 507, answer.text
    assert "1.0 KiB free" in answer.json()["detail"]
    assert h.state_of(brain, plan) == {"a": "LEASED"}  # not completed: the worker retries


def test_the_containers_healthcheck_says_why_the_brain_is_degraded(tmp_path, monkeypatch, capsys):
    import io
    import json
    import urllib.error

    from airig.brain import __main__ as main
    from airig.common import healthcheck

    said = {"status": "degraded", "detail": "the brain's store is full: 0 B free on /state"}

    def degraded(url, timeout):
        body = io.BytesIO(json.dumps(said).encode())
        raise urllib.error.HTTPError(url, 503, "Service Unavailable", {}, body)

    monkeypatch.setattr(healthcheck.urllib.request, "urlopen", degraded)
    monkeypatch.setenv("BRAIN_LISTEN_PORT", str(h.make_settings(tmp_path).listen_port))
    assert main.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert err == "brain unhealthy: HTTP 503: the brain's store is full: 0 B free on /state\n"


def test_a_commit_that_squeezes_onto_a_full_disk_does_not_end_the_outage(tmp_path, monkeypatch):
    free = [0]
    monkeypatch.setattr(unwritable, "free_bytes", lambda where: free[0])
    health = unwritable.StoreHealth(tmp_path, clock=iter([10.0, 20.0, 30.0]).__next__)
    first = health.failed(_sqlite_error("SQLITE_FULL"))
    assert first is not None and first.opened and first.status == 507
    assert health.wrote() is None  # 0 B free: a recycled WAL let it through
    again = health.failed(_sqlite_error("SQLITE_FULL"))
    assert again is not None and not again.opened  # the same outage: one alert
    free[0] = 100 * 1024 * 1024
    ended = health.wrote()
    assert ended is not None and (ended.since, ended.ended) == (10.0, 30.0)
    assert health.wrote() is None and health.unrecorded() == [ended]


# ---- PostgreSQL: the server's SQLSTATE, the server's URL --------------------------------
def _pg_error(sqlstate: str) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(f"PostgreSQL: {sqlstate}")
    error.sqlstate = sqlstate  # as pg.py keeps it
    return error


def test_postgresqls_disk_full_and_read_only_transaction_are_the_store_and_nothing_else():
    server = "postgresql://brain:***@postgres/airig"
    kind = unwritable.kind_of
    assert kind(_pg_error("53100"), server) == "full"
    assert kind(_pg_error("25006"), server) == "read_only"
    # a read connection refuses writes with 25006 too: a bug, not the store
    assert kind(_pg_error("25006"), server, sqlite_readonly=False) is None
    for other in ("23505", "53200", "53300", "08006", "40001", "", "5310"):
        assert kind(_pg_error(other), server) is None, other
    complaint = _pg_error("25P02")  # "current transaction is aborted", raised while handling
    complaint.__context__ = _pg_error("53100")
    assert kind(complaint, server) == "full"


def test_a_full_postgresql_store_names_the_server_and_ends_at_its_next_commit():
    """The server's free space is not the brain's to read: unknown, never the local disk's;
    a commit after the outage ends it (no local volume says otherwise)."""
    server = "postgresql://brain:***@postgres/airig"
    health = unwritable.StoreHealth(server, clock=iter([10.0, 20.0]).__next__)
    refusal = health.failed(_pg_error("53100"))
    assert refusal is not None and refusal.status == 507 and refusal.free is None
    assert f"store is full: unknown space free on {server}" in refusal.detail
    assert "database server's disk" in refusal.detail and "\n" not in refusal.detail
    ended = health.wrote()
    assert ended is not None and (ended.since, ended.ended) == (10.0, 20.0)
    read_only = unwritable.StoreHealth(server).failed(_pg_error("25006"))
    assert read_only is not None and read_only.status == 503
    assert "make the PostgreSQL server accept writes again" in read_only.detail


def test_a_postgresql_store_full_then_read_only_then_recovered(pg_url, tmp_path, monkeypatch):
    """On a real server whatever AIRIG_TEST_STORE says: psycopg's errors reach the brain's
    edge as 507 / 503 with the server named, one alert, recovery by itself."""
    settings = h.make_settings(tmp_path, BRAIN_DATABASE_URL=pg_url, BRAIN_CLAIM_WAIT_S=0,
                               BRAIN_REAPER_INTERVAL_S=3600)  # fmt: skip
    app = create_app(settings)
    brain = app.state.brain
    store = Store(brain)
    assert store.pg and isinstance(brain.store_health.where, str)
    with TestClient(app, raise_server_exceptions=False) as client:
        monkeypatch.setattr(brain.notifier, "send", lambda notices: None)
        try:
            store.full()
            refused = client.post("/v1/plans", headers=ADMIN, json=SMALL)
            assert refused.status_code == 507, refused.text
            assert f"free on {brain.store_health.where}" in refused.json()["detail"]
            store.writable()
            store.read_only()
            refused = client.post("/v1/plans", headers=ADMIN, json=SMALL)
            assert refused.status_code == 503, refused.text
            assert client.get("/health").json()["store"] == "read_only"
        finally:
            store.writable()
        answer = client.post("/v1/plans", headers=ADMIN, json=SMALL)
        assert answer.status_code == 201, answer.text
        assert client.get("/health").json()["status"] == "ok"
        assert store_alert_events(brain) == ["alert_fired", "alert_cleared"]

        def bug() -> None:
            with brain.db.read() as conn:
                conn.execute("DELETE FROM plans")  # a read connection: the server refuses

        client.app.router.add_api_route("/v1/test-bug", bug)
        assert client.get("/v1/test-bug").status_code == 500
        assert brain.store_health.episode is None
