"""The brain's state on a small filesystem that fills up, then turns read-only, then gets
its space back (issue 36 §5), a plan running through all of it.

A real 20 MB tmpfs holds the store, its WAL, the events file and the results; a filler
file takes every byte left. The read-only phase is SQLite's own SQLITE_READONLY at the
write connection (``PRAGMA query_only``): the kernel refuses to remount a filesystem
read-only while the brain holds its files open for writing (EBUSY), and a volume the
kernel turns read-only after disk errors is what this stands for.

What must hold: every write acknowledged (201) is stored, none twice; every refused one
is 507 (full) or 503 (read-only), retryable, with the fix, and stored exactly once when
the client sends it again after the recovery, with an Idempotency-Key or without; one
`store_unwritable` alert; no `worker_down` for a live worker; the events file equals the
events table; the brain recovers by itself and the plan finishes.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from unit.brain_helpers import make_settings

from airig.brain.api.app import create_app

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
SKIP = "a tmpfs mount needs root (CAP_SYS_ADMIN)"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "state"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(folder)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(SKIP)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Every byte left on ``folder``'s filesystem, taken by one file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for size in (1 << 16, 512, 1):  # big chunks, then what is left of the last page
            chunk = b"\0" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def plan(name: str, tasks: int = 40) -> dict:
    return {"name": name, "tasks": [{"id": f"t{n}", "type": "noop"} for n in range(tasks)]}


class Client:
    """A submitting client: each plan sent again while the answer says to retry."""

    def __init__(self, http: TestClient) -> None:
        self.http = http
        self.acknowledged: dict[str, str] = {}  # plan name -> id the brain answered
        self.pending: list[tuple[str, str | None]] = []  # (name, key) refused so far
        self.statuses: list[int] = []

    def submit(self, name: str, key: str | None) -> int:
        headers = {**ADMIN, **({"Idempotency-Key": key} if key else {})}
        answer = self.http.post("/v1/plans", headers=headers, json=plan(name))
        self.statuses.append(answer.status_code)
        if answer.status_code in (200, 201):
            self.acknowledged[name] = answer.json()["id"]
            return answer.status_code
        body = answer.json()
        assert answer.status_code in (503, 507), answer.text
        assert body["retryable"] is True and body["retry_after_s"] == 30, body
        assert "nothing was stored" in body["detail"]
        if (name, key) not in self.pending:
            self.pending.append((name, key))
        return answer.status_code

    def retry_all(self) -> None:
        for name, key in list(self.pending):
            assert self.submit(name, key) in (200, 201)
            self.pending.remove((name, key))


def stored(brain) -> list[tuple[str, str]]:
    with brain.db.read() as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT name, id FROM plans ORDER BY name")]


def test_a_plan_runs_through_a_full_a_read_only_and_a_recovered_store(small_disk, monkeypatch):
    settings = make_settings(
        small_disk, BRAIN_DB=str(small_disk / "brain.db"), BRAIN_CLAIM_WAIT_S=0,
        BRAIN_REAPER_INTERVAL_S=3600, BRAIN_RESULTS_DIR=str(small_disk / "results"),
    )  # fmt: skip
    app = create_app(settings)
    brain = app.state.brain
    notices: list = []
    with TestClient(app, raise_server_exceptions=False) as http:
        monkeypatch.setattr(brain.notifier, "send", notices.extend)
        client = Client(http)
        token = http.post("/v1/workers/register", headers=BOOT,
                          json={"name": "w1", "classes": ["cpu"]}).json()["token"]  # fmt: skip
        worker = {"Authorization": f"Bearer {token}"}
        assert client.submit("work", "key-work") == 201
        first = http.post("/v1/exchange", headers=worker, json={"claim": {"wait_s": 0}})
        assert len(first.json()["assignments"]) == 1

        # ---- full: the filesystem has no byte left
        filler = fill(small_disk)
        for n in range(200):  # until the store refuses: a recycled WAL lets a few through
            client.submit(f"full-{n}", f"key-full-{n}" if n % 2 else None)
            if client.statuses[-3:] == [507, 507, 507]:
                break
        assert client.statuses[-1] == 507
        beat = http.post("/v1/workers/heartbeat", headers=worker, json={})
        assert beat.status_code in (200, 507)
        health = http.get("/health")
        assert (health.status_code, health.json()["store"]) == (503, "full")
        held = http.get("/v1/alerts", headers=ADMIN).json()["alerts"]
        assert [a["kind"] for a in held] == ["store_unwritable"]
        assert "0 B free" in held[0]["message"]
        later = time.time() + 3 * settings.lease_s
        try:  # the worker's heartbeats could not be saved: it is not down
            assert brain.check_alerts(now=later) == []
        except Exception as exc:  # noqa: BLE001 - an alert pass may not commit either
            assert type(exc).__name__ == "StoreUnwritable"

        # ---- read-only (the kernel's remount, as the brain meets it)
        with brain.db.writer() as conn:
            conn.execute("PRAGMA query_only = 1")
        assert client.submit("read-only", "key-ro") == 503
        assert client.submit("read-only-unkeyed", None) == 503
        answer = http.post("/v1/exchange", headers=worker, json={"claim": {"wait_s": 0}})
        assert answer.status_code == 503
        assert http.get("/health").json()["store"] == "read_only"

        # ---- recovered: space back, writable again; nothing restarts
        filler.unlink()
        with brain.db.writer() as conn:
            conn.execute("PRAGMA query_only = 0")
        client.retry_all()
        assert http.get("/health").json()["status"] == "ok"
        assert http.get("/v1/alerts", headers=ADMIN).json()["alerts"] == []
        # Every acknowledged plan stored, each once (keyed or not), nothing else.
        assert sorted(client.acknowledged.items()) == stored(brain)
        # The plan that ran through it all finishes.
        task = first.json()["assignments"][0]
        done = {"action": "complete", "task_id": task["task_id"], "attempt": task["attempt"],
                "lease_id": task["lease_id"], "output": {"text": "ok"}}  # fmt: skip
        for _ in range(60):
            answer = http.post("/v1/exchange", headers=worker,
                               json={"reports": [done] if done else [],
                                     "claim": {"wait_s": 0, "max_tasks": 8}}).json()  # fmt: skip
            done = None
            reports = [{"action": "complete", "task_id": a["task_id"], "attempt": a["attempt"],
                        "lease_id": a["lease_id"], "output": {"text": "ok"}}
                       for a in answer["assignments"]]  # fmt: skip
            if not reports:
                break
            http.post("/v1/exchange", headers=worker, json={"reports": reports})
        view = http.get(f"/v1/plans/{client.acknowledged['work']}", headers=ADMIN).json()
        assert view["status"] == "succeeded"
        assert brain.check_alerts() == []  # no worker_down after it either
        brain.events.catch_up()
        with brain.db.read() as conn:
            table = [r[0] for r in conn.execute("SELECT body_json FROM events ORDER BY id")]
            outage = conn.execute(
                "SELECT event_type FROM events WHERE json_extract(body_json, '$.alert')"
                " = 'store_unwritable' ORDER BY id"
            ).fetchall()
    assert settings.events_file.read_text().splitlines() == table
    assert [row[0] for row in outage] == ["alert_fired", "alert_cleared"]  # one alert
    assert [(n.kind, n.fired) for n in notices] == [("store_unwritable", True),
                                                    ("store_unwritable", False)]  # fmt: skip
    assert 507 in client.statuses and 503 in client.statuses
