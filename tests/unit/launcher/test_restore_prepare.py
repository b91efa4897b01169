"""`restore ARCHIVE`'s first half (airig/launcher/lifecycle/restore.py ``prepare``): it refuses in
one line, before writing anything, what would lose data; on a fresh clone it writes the
checkout's files and leaves `up` the volumes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import docker.errors
import pytest

from airig.launcher.lifecycle.backup_archive import (
    ArchiveWriter,
    BackupError,
    Manifest,
    archive_name,
)
from airig.launcher.lifecycle.restore import PENDING, prepare

ENV = b"AIRIG_PROJECT_PREFIX=airig\nBRAIN_ADMIN_TOKEN=restored-secret-token-0123456789\n"


class FakeDocker:
    def __init__(self, running: list[str] = (), volumes: list[str] = ()) -> None:
        self.running, self.volumes, self.removed = list(running), set(volumes), []

    def containers(self, **filters: str) -> list:
        project = filters["label"].split("=", 1)[1]
        return [SimpleNamespace(name=n) for n in self.running if n.startswith(project)]

    def sdk(self):
        def get(name: str):
            if name not in self.volumes:
                raise docker.errors.NotFound(name)
            return SimpleNamespace(name=name)

        return SimpleNamespace(volumes=SimpleNamespace(get=get))

    def remove_volumes(self, names: list[str]) -> list[str]:
        self.removed += names
        self.volumes -= set(names)
        return names


@pytest.fixture
def archive(tmp_path) -> Path:
    path = tmp_path / archive_name(time.time())
    writer = ArchiveWriter(path)
    writer.add_bytes("env/.env", ENV)
    writer.add_bytes("state/tuning.log", b'{"knob": "x"}\n')
    writer.add_bytes("volumes/brain-state/brain.db", b"SQLite format 3\x00")
    writer.add_bytes("volumes/results/p/out.json", b"{}")
    writer.finish(Manifest(created_at=time.time(), airig_version="0.1.0",
                           project_prefix="airig", files=[]))  # fmt: skip
    return path


def fresh_root(tmp_path: Path) -> Path:
    root = tmp_path / "clone"
    root.mkdir()
    return root


def test_a_fresh_clone_gets_env_state_and_a_pending_restore(tmp_path, archive):
    root = fresh_root(tmp_path)
    manifest = prepare(root, archive, False, FakeDocker(), lambda line: None)
    assert manifest.project_prefix == "airig"
    assert (root / ".env").read_bytes() == ENV
    assert (root / ".env").stat().st_mode & 0o777 == 0o600
    assert (root / ".airig" / "tuning.log").read_bytes() == b'{"knob": "x"}\n'
    pending = json.loads((root / ".airig" / PENDING).read_text())
    assert pending["volumes"] == ["brain-state", "results"]
    assert pending["archive"] == str(archive.resolve())


def test_a_running_kit_is_refused_and_nothing_is_written(tmp_path, archive):
    root = fresh_root(tmp_path)
    with pytest.raises(BackupError, match="the kit is running"):
        prepare(root, archive, True, FakeDocker(running=["airig-agents-brain-1"]), print)
    assert list(root.iterdir()) == []


def test_data_needs_yes_and_then_is_replaced(tmp_path, archive):
    root = fresh_root(tmp_path)
    (root / ".env").write_text("BRAIN_ADMIN_TOKEN=the-old-one-0123456789abcdef\n")
    engine = FakeDocker(volumes=["airig-brain-state", "airig-results"])
    with pytest.raises(BackupError, match=r"already has data \(.env, airig-brain-state"):
        prepare(root, archive, False, engine, print)
    assert "the-old-one" in (root / ".env").read_text()
    assert engine.removed == [] and not (root / ".airig").exists()
    prepare(root, archive, True, engine, print)
    assert engine.removed == ["airig-brain-state", "airig-results"]
    assert (root / ".env").read_bytes() == ENV
    assert "the-old-one" in (root / ".env.before-restore").read_text()


def test_a_corrupt_archive_is_refused_before_anything(tmp_path, archive):
    root = fresh_root(tmp_path)
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) - 100])
    engine = FakeDocker(volumes=["airig-brain-state"])
    with pytest.raises(BackupError, match="truncated"):
        prepare(root, archive, True, engine, print)
    assert engine.removed == [] and list(root.iterdir()) == []
