"""The brain's side of backups: the store's online snapshot, the archives it records,
and the backup_old alert (airig/brain/store/backups.py, routes/backups.py, ops/alerts.py)."""

from __future__ import annotations

import sqlite3
import time

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.ops import alerts
from airig.brain.store import backups

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
RECORD = {"archive": "airig-backup-20261125T080000Z.tar.gz", "bytes": 1234,
          "sha256": "a" * 64, "created_at": 1_800_000_000.0, "models": False}  # fmt: skip


def test_a_snapshot_of_the_live_store_holds_every_committed_row(tmp_path):
    # SQLite's store whatever AIRIG_TEST_STORE says: the snapshot is SQLite's backup API (on
    # PostgreSQL it is refused: test_brain_snapshot.py; the backup is pg_dump's)
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL="")
    plan_id = h.submit(brain, [h.noop("a"), h.noop("b", ["a"])])
    with brain.db.tx() as conn:  # a writer holds the store meanwhile: the snapshot waits not
        conn.execute("UPDATE tasks SET priority = 7 WHERE plan_id = ?", (plan_id,))
        summary = backups.take_snapshot(brain.settings.db_path, tmp_path / "snap.db")
    assert (summary["plans"], summary["tasks"]) == (1, 2)
    copy = sqlite3.connect(tmp_path / "snap.db")
    assert copy.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    # the uncommitted write is not in it; the committed plan is
    assert {r[0] for r in copy.execute("SELECT priority FROM tasks")} != {7}
    assert copy.execute("SELECT COUNT(*) FROM deps").fetchone()[0] == 1


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(h.make_settings(tmp_path, AIRIG_BACKUP_MAX_AGE_H="24"))) as made:
        yield made


def test_an_archive_is_recorded_and_shown_newest_first(client):
    assert client.get("/v1/backups", headers=ADMIN).json()["last_age_s"] is None
    assert client.get("/v1/store", headers=ADMIN).json()["last_backup_at"] is None
    older = {**RECORD, "archive": "old.tar.gz", "created_at": RECORD["created_at"] - 3600}
    for body in (older, RECORD):
        answer = client.post("/v1/backups", json=body, headers=ADMIN)
        assert answer.status_code == 201, answer.text
    listed = client.get("/v1/backups", headers=ADMIN).json()
    assert [b["archive"] for b in listed["backups"]] == [RECORD["archive"], "old.tar.gz"]
    assert listed["max_age_h"] == 24
    store = client.get("/v1/store", headers=ADMIN).json()
    assert (store["last_backup_at"], store["last_backup_archive"]) == (
        RECORD["created_at"], RECORD["archive"])  # fmt: skip


@pytest.mark.parametrize("bad", [{"sha256": "not-hex"}, {"bytes": -1}, {"archive": ""},
                                 {"models": 0}, {"bytes": "12"}, {"created_at": 0},
                                 # true is not 1.0 (found by the API fuzz test)
                                 {"created_at": True}, {"created_at": "1700000000"}])  # fmt: skip
def test_a_bad_record_is_refused(client, bad):
    assert client.post("/v1/backups", json={**RECORD, **bad}, headers=ADMIN).status_code == 422


def test_only_admin_records_a_backup(client):
    answer = client.post("/v1/tokens", json={"scope": "metrics"}, headers=ADMIN)
    metrics = {"Authorization": f"Bearer {answer.json()['token']}"}
    assert client.post("/v1/backups", json=RECORD, headers=metrics).status_code == 403
    assert client.get("/v1/backups", headers=metrics).status_code == 200


def rules(max_age_h: float) -> alerts.Rules:
    return alerts.Rules(queue_depth=100, failures=5, failure_window_s=600, gpu_temp_c=85,
                        worker_lapse_s=30, backup_max_age_s=max_age_h * 3600)  # fmt: skip


def test_backup_old_fires_past_the_limit_and_clears_on_a_new_backup(tmp_path):
    brain = h.make_brain(tmp_path)
    started = time.time()
    with brain.db.read() as conn:
        # a fresh kit is not late at once: counted from the brain's start
        assert alerts.active(conn, started + 3600, rules(2), since=started) == {}
        late = alerts.active(conn, started + 3 * 3600, rules(2), since=started)
        assert "no backup yet" in late[("backup_old", "backup")]
        assert alerts.active(conn, started + 99 * 3600, rules(0), since=started) == {}
    with brain.db.tx() as conn:
        backups.record(conn, started + 3 * 3600, "a.tar.gz", 1, "b" * 64, False)
    with brain.db.read() as conn:
        assert alerts.active(conn, started + 4 * 3600, rules(2), since=started) == {}
        old = alerts.active(conn, started + 6 * 3600, rules(2), since=started)
        assert "the last backup is 3.0 h old" in old[("backup_old", "backup")]
