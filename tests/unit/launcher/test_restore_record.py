"""After `restore`, the archive restored from is the last backup (issue 35 §5): `status`
said "No backup yet" right after a restore, because the store's snapshot is taken before
`backup` records the archive with the brain. `up` records it in the restored store."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient
from test_restore_data import Writer, settings_of
from test_restore_prepare import ENV, FakeDocker

from airig.brain.api.app import create_app
from airig.brain.store import backups
from airig.launcher.cli.backup import backup_line
from airig.launcher.lifecycle.backup_archive import ArchiveWriter, Manifest, archive_name
from airig.launcher.lifecycle.restore import apply_pending, prepare

ADMIN = {"Authorization": "Bearer admin-secret-token"}


def snapshot_of_a_store(tmp_path: Path, recorded: list[str]) -> bytes:
    """A brain's store as `backup` archives it: its online snapshot, with the archives
    ``recorded`` before this one (this one is recorded only after the snapshot)."""
    brain = h.make_brain(tmp_path / "brain")
    h.submit(brain, [h.noop("a")])
    with brain.db.tx() as conn:
        for number, name in enumerate(recorded):
            backups.record(conn, 1_700_000_000.0 + number, name, 10, f"{number:064x}", False)
    backups.take_snapshot(brain.settings.db_path, tmp_path / "snap.db")
    return (tmp_path / "snap.db").read_bytes()


def archive_of(folder: Path, store: bytes, models: bool = False) -> Path:
    path = folder / archive_name(time.time())
    writer = ArchiveWriter(path)
    writer.add_bytes("env/.env", ENV)
    writer.add_bytes("volumes/brain-state/brain.db", store)
    writer.finish(Manifest(created_at=1_800_000_000.0, airig_version="0.1.0",
                           project_prefix="airig", files=[], models_included=models))  # fmt: skip
    return path


def restored_store(tmp_path: Path, archive: Path, run: str = "clone") -> Path:
    """`restore ARCHIVE` then `up`'s half: the brain.db that went into the volume."""
    root = tmp_path / run
    root.mkdir()
    prepare(root, archive, False, FakeDocker(), print)
    put = Writer()
    assert apply_pending(settings_of(root), put, print)
    data, owner = put.files("brain-state")["brain.db"]
    assert owner == 10001
    store = tmp_path / f"{run}-state" / "state" / "brain.db"
    store.parent.mkdir(parents=True)
    store.write_bytes(data)
    return store.parent.parent


def test_the_archive_restored_from_is_the_last_backup(tmp_path):
    store = snapshot_of_a_store(tmp_path, ["older.tar.gz"])
    archive = archive_of(tmp_path, store)
    brain_dir = restored_store(tmp_path, archive)
    with TestClient(create_app(h.make_settings(brain_dir))) as client:
        listed = client.get("/v1/backups", headers=ADMIN).json()["backups"]
        summary = client.get("/v1/store", headers=ADMIN).json()
        plans = client.get("/v1/plans", headers=ADMIN).json()
    assert [b["archive"] for b in listed] == [archive.name, "older.tar.gz"]
    assert listed[0] | {"id": 0} == {
        "id": 0, "archive": archive.name, "bytes": archive.stat().st_size,
        "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
        "created_at": 1_800_000_000.0, "models": False,
    }  # fmt: skip
    assert summary["last_backup_archive"] == archive.name
    assert "No backup yet" not in backup_line(summary)
    assert archive.name in backup_line(summary)
    assert len(plans["plans"]) == 1  # the rest of the store is as it was archived


def test_each_restore_of_an_archive_records_it_once(tmp_path):
    archive = archive_of(tmp_path, snapshot_of_a_store(tmp_path, []), models=True)
    for run in ("one", "two"):  # the same archive restored again, e.g. on another machine
        brain_dir = restored_store(tmp_path, archive, run)
        conn = sqlite3.connect(brain_dir / "state" / "brain.db")
        rows = conn.execute("SELECT archive, models FROM backups").fetchall()
        conn.close()
        assert rows == [(archive.name, 1)]


@pytest.mark.parametrize(
    "store",
    [
        b"SQLite format 3\x00 but not a database",  # a foreign or damaged file
        # (an empty file is refused before anything: test_restore_hostile.py)
        "old kit",  # a store without the backups table
    ],
)
def test_a_store_that_cannot_take_the_record_goes_back_as_it_was(tmp_path, store):
    if store == "old kit":
        old = sqlite3.connect(tmp_path / "old.db")
        old.execute("CREATE TABLE plans (id TEXT)")
        old.commit()
        old.close()
        store = (tmp_path / "old.db").read_bytes()
    brain_dir = restored_store(tmp_path, archive_of(tmp_path, store))
    assert (brain_dir / "state" / "brain.db").read_bytes() == store
