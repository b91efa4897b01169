"""A store `restore` put back: the attempts its backup caught leased or running are the old
kit's, released at the brain's start (airig/brain/store/restored.py), not failed when a
worker of the same name registers (a `worker_failures` alert for a worker that did
nothing wrong, an infra retry spent per task). No marker, no release: a plain restart
keeps the leases its workers still hold."""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from pathlib import Path

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.store import restored

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
ARCHIVE = "airig-backup-20261129-170000.tar.gz"
LOGGER = "airig.brain.service"


def leased_store(tmp_path: Path, n: int = 6, worker: str = "cpu-2") -> str:
    """The store as a backup's snapshot caught it: ``n`` tasks leased to ``worker``, the
    first one running. Its plan's id."""
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop(f"t{i}") for i in range(n)])
    for _ in range(n):
        assert h.claim(brain, 1000.0, worker) is not None
    h.do(brain, plan, "t0", "start", 1000.0, worker=worker)
    brain.db.close()
    return plan


def marker_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / restored.MARKER


def mark(tmp_path: Path) -> Path:
    body = {"archive": ARCHIVE, "created_at": 1.8e9, "restored_at": 1.8e9, "restore": "ab12"}
    path = marker_path(tmp_path)
    path.write_text(json.dumps(body))
    return path


def start(tmp_path: Path) -> TestClient:
    # no reaper pass during the test: what happens is the start's and the registration's
    return TestClient(create_app(h.make_settings(tmp_path, BRAIN_REAPER_INTERVAL_S=3600)))


def register(client: TestClient, name: str = "cpu-2") -> None:
    answer = client.post("/v1/workers/register", headers=BOOT, json={"name": name})
    assert answer.status_code == 200, answer.text


def bodies(brain, plan: str | None, event_type: str) -> list[dict]:
    with brain.db.read() as conn:
        rows = conn.execute(
            "SELECT plan_id, body_json FROM events WHERE event_type = ? ORDER BY id",
            (event_type,),
        ).fetchall()
    return [json.loads(r["body_json"]) for r in rows if plan is None or r["plan_id"] == plan]


def test_a_restored_stores_leases_are_released_and_its_workers_hear_of_no_failure(tmp_path):
    plan = leased_store(tmp_path, n=6)
    mark(tmp_path)
    with start(tmp_path) as client:
        brain = client.app.state.brain
        register(client, "cpu-2")  # the new kit's cpu-2: before, each lease failed here
        register(client, "cpu-1")
        assert set(h.state_of(brain, plan).values()) == {"READY"}
        released = bodies(brain, plan, "task_released")
        assert bodies(brain, plan, "task_retry_scheduled") == []
        assert bodies(brain, plan, "task_failed") == []
        fired = [(n.kind, n.subject) for n in brain.check_alerts(time.time()) if n.fired]
        rows = [h.row(brain, plan, f"t{i}") for i in range(6)]
        [summary] = bodies(brain, None, restored.EVENT)
    assert sorted(fired) == [], fired  # no worker_failures for cpu-2, no task_failures
    assert len(released) == 6
    assert {r["reason"] for r in released} == {
        f"restored from {ARCHIVE}, backed up during attempt 1"
    }
    assert {r["from"] for r in released} == {"LEASED", "RUNNING"}
    # as leases.release leaves them: no retry budget spent, the next claim is attempt 2
    assert {(r["attempt"], r["infra_errors"], r["task_errors"]) for r in rows} == {(1, 0, 0)}
    assert summary["released"] == 6 and ARCHIVE in summary["reason"]
    assert not marker_path(tmp_path).exists()


def test_a_released_task_is_claimed_again_by_the_new_worker(tmp_path):
    plan = leased_store(tmp_path, n=1)
    mark(tmp_path)
    with start(tmp_path) as client:
        brain = client.app.state.brain
        register(client, "cpu-2")
        leased, _ = h.claim(brain, time.time(), "cpu-2")
        h.do(brain, plan, "t0", "complete", time.time(), worker="cpu-2")
        assert h.state_of(brain, plan) == {"t0": "SUCCEEDED"}
    assert leased["attempt"] == 2


def test_a_plain_restart_keeps_the_leases_its_workers_hold(tmp_path):
    plan = leased_store(tmp_path, n=3)
    with start(tmp_path) as client:
        brain = client.app.state.brain
        states = h.state_of(brain, plan)
        released = bodies(brain, plan, "task_released")
        summaries = bodies(brain, None, restored.EVENT)
    assert states == {"t0": "RUNNING", "t1": "LEASED", "t2": "LEASED"}
    assert released == [] and summaries == []


def fifo(path: Path) -> None:
    os.mkfifo(path)


def folder(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_text("x")


def link(path: Path) -> None:
    (path.parent / "kept").write_text("kept")
    path.symlink_to(path.parent / "kept")


HOSTILE = {
    "garbage": lambda p: p.write_bytes(b"\xff\xfe not json {{{"),
    "nul": lambda p: p.write_bytes(b'{"archive": "a\x00b"}\x00\x00'),
    "huge": lambda p: p.write_bytes(b"{" + b" " * (restored.MAX_MARKER_BYTES + 10) + b"}"),
    "empty": lambda p: p.write_bytes(b""),
    "wrong JSON": lambda p: p.write_text('{"archive": 12}'),
    "a folder": folder,
    "a FIFO": fifo,
    "a link": link,
    "a dangling link": lambda p: p.symlink_to(p.parent / "nowhere"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_marker_whose_content_is_unreadable_still_releases_with_one_line(tmp_path, caplog, kind):
    plan = leased_store(tmp_path, n=2)
    HOSTILE[kind](marker_path(tmp_path))
    with caplog.at_level(logging.INFO, logger=LOGGER), start(tmp_path) as client:
        brain = client.app.state.brain
        states = h.state_of(brain, plan)
        released = bodies(brain, plan, "task_released")
    said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert states == {"t0": "READY", "t1": "READY"}
    assert {r["reason"] for r in released} == {"restored from a backup, backed up during attempt 1"}
    warned = [line for line in said if line.startswith("restore marker")]
    assert len(warned) == 1 and "releasing" in warned[0], said
    assert not os.path.lexists(marker_path(tmp_path))
    if kind == "a link":  # the link went, never what it points to
        assert (tmp_path / "state" / "kept").read_text() == "kept"


def test_an_archive_name_in_the_marker_reaches_the_reason_printable_and_cut(tmp_path):
    plan = leased_store(tmp_path, n=1)
    name = "evil\x1b[31m\nname" + "x" * 500
    marker_path(tmp_path).write_text(json.dumps({"archive": name}))
    with start(tmp_path) as client:
        [event] = bodies(client.app.state.brain, plan, "task_released")
    shown = event["reason"].removeprefix("restored from ").split(", backed up")[0]
    assert shown.isprintable() and len(shown) == restored.ARCHIVE_CHARS
    assert shown.startswith("evil[31mname")


def unremovable(monkeypatch) -> None:
    """The state volume mounted read-only: the marker cannot go (root ignores modes)."""

    def refuse(path):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(restored.os, "unlink", refuse)
    monkeypatch.setattr(restored.shutil, "rmtree", refuse)


def test_a_marker_that_cannot_be_removed_is_said_once_and_never_applied_twice(
    tmp_path, caplog, monkeypatch
):
    plan = leased_store(tmp_path, n=3)
    mark(tmp_path)
    unremovable(monkeypatch)
    with caplog.at_level(logging.INFO, logger=LOGGER), start(tmp_path) as client:
        brain = client.app.state.brain
        assert set(h.state_of(brain, plan).values()) == {"READY"}
        register(client, "cpu-2")  # the new kit's workers claim and run them
        h.claim(brain, time.time(), "cpu-2")
        h.claim(brain, time.time(), "cpu-2")
    first = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    caplog.clear()
    assert marker_path(tmp_path).exists()
    assert len([line for line in first if "cannot remove restore marker" in line]) == 1
    assert "Read-only file system" in " ".join(first)
    with caplog.at_level(logging.INFO, logger=LOGGER), start(tmp_path) as client:
        brain = client.app.state.brain
        states = h.state_of(brain, plan)
        released = bodies(brain, plan, "task_released")
        summaries = bodies(brain, None, restored.EVENT)
    second = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    # the new workers' leases stand: a brain restart is no restore
    assert sorted(states.values()) == ["LEASED", "LEASED", "READY"]
    assert len(released) == 3 and len(summaries) == 1
    assert len([line for line in second if "cannot remove restore marker" in line]) == 1
    assert not any("released" in line and "restored from" in line for line in second)


def test_a_crash_between_the_commit_and_the_marker_removal_releases_once(tmp_path, monkeypatch):
    plan = leased_store(tmp_path, n=2)
    mark(tmp_path)

    def crash(marker):
        raise RuntimeError("the brain died here")

    monkeypatch.setattr(restored, "remove", crash)
    with pytest.raises(RuntimeError, match="died"), start(tmp_path):
        pass
    assert marker_path(tmp_path).exists()  # committed, marker still there
    monkeypatch.undo()
    with start(tmp_path) as client:
        brain = client.app.state.brain
        states = h.state_of(brain, plan)
        released = bodies(brain, plan, "task_released")
        summaries = bodies(brain, None, restored.EVENT)
    assert states == {"t0": "READY", "t1": "READY"}
    assert len(released) == 2 and len(summaries) == 1
    assert not marker_path(tmp_path).exists()


def test_a_new_restore_over_an_applied_one_releases_again(tmp_path):
    """Each restore's marker is new (its nonce): the store's record of an earlier one
    does not keep a later restore of the same archive from releasing."""
    plan = leased_store(tmp_path, n=1)
    mark(tmp_path)
    with start(tmp_path) as client:
        brain = client.app.state.brain
        h.claim(brain, time.time(), "cpu-2")
    marker_path(tmp_path).write_text(json.dumps({"archive": ARCHIVE, "restore": "cd34"}))
    with start(tmp_path) as client:
        brain = client.app.state.brain
        assert h.state_of(brain, plan) == {"t0": "READY"}
        assert len(bodies(brain, None, restored.EVENT)) == 2


def test_a_store_that_cannot_be_written_at_the_start_is_released_by_the_reapers_pass(tmp_path):
    from test_brain_store_unwritable import Store

    plan = leased_store(tmp_path, n=2)
    mark(tmp_path)
    app = create_app(h.make_settings(tmp_path, BRAIN_REAPER_INTERVAL_S=3600))
    brain = app.state.brain
    store = Store(brain)
    store.read_only()
    with TestClient(app, raise_server_exceptions=False):
        assert h.state_of(brain, plan) == {"t0": "RUNNING", "t1": "LEASED"}  # it started
        assert marker_path(tmp_path).exists()  # owed, not dropped
        store.writable()
        brain.reap_once()
        assert h.state_of(brain, plan) == {"t0": "READY", "t1": "READY"}
        assert len(bodies(brain, plan, "task_released")) == 2
    assert not marker_path(tmp_path).exists()
