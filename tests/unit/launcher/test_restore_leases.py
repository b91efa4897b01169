"""`restore` leaves the brain its cue (``restored.json`` beside the store, in the state
volume's files): the attempts leased or running in the backup's snapshot are the old kit's,
released at the restored brain's start, not failed when a worker of the same name
registers (airig/brain/store/restored.py). The PostgreSQL archive's path:
test_postgres_backup.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import brain_helpers as h
from fastapi.testclient import TestClient
from test_restore_data import Writer, settings_of
from test_restore_prepare import FakeDocker
from test_restore_record import archive_of

from airig.brain.api.app import create_app
from airig.brain.store import backups, restored
from airig.launcher.lifecycle.restore import RESTORED_MARKER, apply_pending, prepare

BOOT = {"Authorization": "Bearer bootstrap-secret-token"}


def snapshot_mid_plan(tmp_path: Path) -> tuple[bytes, str]:
    """A backup taken mid-plan: three tasks leased to cpu-2, one of them running."""
    brain = h.make_brain(tmp_path / "old-kit", BRAIN_DATABASE_URL="")  # an SQLite kit's
    plan = h.submit(brain, [h.noop(f"t{i}") for i in range(3)])
    for _ in range(3):
        assert h.claim(brain, 1000.0, "cpu-2") is not None
    h.do(brain, plan, "t0", "start", 1000.0, worker="cpu-2")
    backups.take_snapshot(brain.settings.db_path, tmp_path / "snap.db")
    brain.db.close()
    return (tmp_path / "snap.db").read_bytes(), plan


def restore(tmp_path: Path, archive: Path, run: str) -> dict[str, tuple[bytes, int]]:
    """`restore ARCHIVE` then `up`'s half: the state volume's files as they went in."""
    root = tmp_path / run
    root.mkdir()
    prepare(root, archive, False, FakeDocker(), print)
    put = Writer()
    assert apply_pending(settings_of(root), put, print)
    return put.files("brain-state")


def test_the_marker_goes_into_the_state_volume_beside_the_store(tmp_path):
    store, _ = snapshot_mid_plan(tmp_path)
    archive = archive_of(tmp_path, store)
    files = restore(tmp_path, archive, "one")
    assert sorted(files) == ["brain.db", RESTORED_MARKER]
    data, owner = files[RESTORED_MARKER]
    assert owner == 10001  # the brain's: it removes the marker once applied
    body = json.loads(data)
    assert body["archive"] == archive.name and body["created_at"] == 1_800_000_000.0
    again = restore(tmp_path, archive, "two")[RESTORED_MARKER][0]
    assert again != data  # each restore's marker is its own: applied once each
    assert RESTORED_MARKER == restored.MARKER  # the name the brain looks for


def test_the_restored_brain_releases_the_backups_leases_and_fails_none(tmp_path):
    store, plan = snapshot_mid_plan(tmp_path)
    archive = archive_of(tmp_path, store)
    state = tmp_path / "new-kit" / "state"
    state.mkdir(parents=True)
    for name, (data, _) in restore(tmp_path, archive, "clone").items():
        (state / name).write_bytes(data)
    settings = h.make_settings(
        tmp_path / "new-kit", BRAIN_REAPER_INTERVAL_S=3600, BRAIN_DATABASE_URL=""
    )
    with TestClient(create_app(settings)) as client:
        brain = client.app.state.brain
        answer = client.post("/v1/workers/register", headers=BOOT, json={"name": "cpu-2"})
        assert answer.status_code == 200, answer.text
        states = h.state_of(brain, plan)
        with brain.db.read() as conn:
            kinds = [r[0] for r in conn.execute("SELECT event_type FROM events ORDER BY id")]
        fired = [n.kind for n in brain.check_alerts(time.time()) if n.fired]
    assert states == {"t0": "READY", "t1": "READY", "t2": "READY"}
    assert kinds.count("task_released") == 3 and "task_retry_scheduled" not in kinds
    assert fired == []
    assert not (state / RESTORED_MARKER).exists()
