"""`restore` and the data volume (issue 35 §1): an archive's outputs, index and inputs go
back into the data volume; an older kit's archive (no data part) still restores and leaves
the data volume alone; a hostile member in the data part is refused before anything is
written; a full or read-only disk leaves what was there."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import unprivileged
from test_restore_prepare import ENV, FakeDocker

from airig.launcher.lifecycle import restore
from airig.launcher.lifecycle.backup_archive import (
    ArchiveWriter,
    BackupError,
    Manifest,
    archive_name,
)
from airig.launcher.lifecycle.restore import PENDING, apply_pending, prepare

OLD_ENV = b"BRAIN_ADMIN_TOKEN=the-old-one-0123456789abcdef\n"
DATA_FILES = {
    "volumes/data/outputs/video-notes/talks/volcanoes.md": b"# volcanoes\n",
    "volumes/data/index/search.sqlite": b"SQLite format 3\x00 the index",
    "volumes/data/inputs/talks/volcanoes.mp4": b"video",
}


def write(folder: Path, files: dict[str, bytes], **manifest: object) -> Path:
    path = folder / archive_name(time.time())
    writer = ArchiveWriter(path)
    writer.add_bytes("env/.env", ENV)
    writer.add_bytes("state/tuning.log", b'{"knob": "x"}\n')
    writer.add_bytes("volumes/brain-state/brain.db", b"SQLite format 3\x00")
    writer.add_bytes("volumes/results/p/out.json", b"{}")
    for name, data in files.items():
        writer.add_bytes(name, data)
    writer.finish(Manifest(created_at=time.time(), airig_version="0.1.0",
                           project_prefix="airig", files=[], **manifest))  # fmt: skip
    return path


def over_a_kit(tmp_path: Path) -> tuple[Path, FakeDocker]:
    """A stopped kit that has data: its .env and its volumes, the data volume's included."""
    root = tmp_path / "clone"
    root.mkdir()
    (root / ".env").write_bytes(OLD_ENV)
    return root, FakeDocker(volumes=["airig-brain-state", "airig-results", "airig-data"])


def test_the_data_part_replaces_the_data_volume_and_goes_back_with_up(tmp_path):
    archive = write(tmp_path, DATA_FILES, data_included=True, inputs_included=True)
    root, engine = over_a_kit(tmp_path)
    with pytest.raises(BackupError, match=r"already has data \(.env, airig-brain-state, "
                                          r"airig-results, airig-data\)"):  # fmt: skip
        prepare(root, archive, False, engine, print)
    prepare(root, archive, True, engine, print)
    assert engine.removed == ["airig-brain-state", "airig-results", "airig-data"]
    pending = json.loads((root / ".airig" / PENDING).read_text())
    assert pending["volumes"] == ["brain-state", "data", "results"]
    # `up`: the files go into the volumes, the data volume's owned by the kit's user
    put = Writer()
    assert apply_pending(settings_of(root), put, print)
    assert put.files("data") == {
        "outputs/video-notes/talks/volcanoes.md": (b"# volcanoes\n", 10001),
        "index/search.sqlite": (b"SQLite format 3\x00 the index", 10001),
        "inputs/talks/volcanoes.mp4": (b"video", 10001),
    }
    assert put.mounts == {f"airig-{v}": {"bind": f"/restore/{v}", "mode": "rw"}
                          for v in ("brain-state", "data", "results")}  # fmt: skip
    assert not (root / ".airig" / PENDING).exists()
    assert [p.name for p in (root / ".airig").iterdir() if p.name.startswith("restore-")] == []


def test_an_older_kits_archive_restores_and_leaves_the_data_volume(tmp_path):
    archive = write(tmp_path, {})  # as an older kit wrote it: no data part, no flags
    root, engine = over_a_kit(tmp_path)
    prepare(root, archive, True, engine, print)
    assert engine.removed == ["airig-brain-state", "airig-results"]
    assert "airig-data" in engine.volumes
    pending = json.loads((root / ".airig" / PENDING).read_text())
    assert pending["volumes"] == ["brain-state", "results"]
    put = Writer()
    assert apply_pending(settings_of(root), put, print)
    assert sorted(put.tars) == ["brain-state", "results"]


def hostile(tmp_path: Path, member: tarfile.TarInfo, data: bytes = b"x") -> Path:
    """A well-formed archive but for one member of the data part."""
    path = write(tmp_path, {"volumes/data/outputs/fine.md": b"fine"}, data_included=True)
    with tarfile.open(path, "r:gz") as tar:
        good = [(info, tar.extractfile(info).read() if info.isfile() else b"")
                for info in tar.getmembers()]  # fmt: skip
    bad = tmp_path / "hostile.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        for info, body in good[:-1]:  # the manifest stays last
            tar.addfile(info, io.BytesIO(body))
        tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
        tar.addfile(*(lambda i, b: (i, io.BytesIO(b)))(*good[-1]))
    return bad


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize("bad, why", [
    (member("volumes/data/../../../etc/cron.d/x"), "outside env/, state/ and volumes/"),
    (member("volumes/data/outputs/../../../../etc/passwd"), "outside env/, state/ and volumes/"),
    (member("/volumes/data/outputs/x"), "outside env/, state/ and volumes/"),
    (member("volumes/data/outputs/link", tarfile.SYMTYPE, "/etc/passwd"), "not a regular file"),
    (member("volumes/data/outputs/hard", tarfile.LNKTYPE, "env/.env"), "not a regular file"),
    (member("volumes/data/.bashrc"), "data volume file outside outputs, index, inputs"),
    (member("volumes/data"), "outside its volume's folder"),
])  # fmt: skip
def test_a_hostile_member_in_the_data_part_is_refused_before_anything(tmp_path, bad, why):
    archive = hostile(tmp_path, bad)
    root, engine = over_a_kit(tmp_path)
    with pytest.raises(BackupError, match=why):
        prepare(root, archive, True, engine, print)
    assert engine.removed == [] and sorted(p.name for p in root.iterdir()) == [".env"]
    assert (root / ".env").read_bytes() == OLD_ENV
    # swapped in after a good prepare: `up` refuses it too, and writes no volume
    good = write(tmp_path, DATA_FILES, data_included=True)
    prepare(root, good, True, engine, print)
    shutil.copyfile(archive, good)
    put = Writer()
    with pytest.raises(BackupError, match=why):
        apply_pending(settings_of(root), put, print)
    assert put.tars == {} and (root / ".airig" / PENDING).exists()


def test_a_full_disk_while_the_checkout_is_written_leaves_what_was_there(tmp_path, monkeypatch):
    archive = write(tmp_path, DATA_FILES, data_included=True)
    root, engine = over_a_kit(tmp_path)
    written = []
    real = restore._write_private

    def fills_up(path: Path, data: bytes) -> None:
        if written:  # the first file fits, the second does not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(path)
        real(path, data)

    monkeypatch.setattr(restore, "_write_private", fills_up)
    with pytest.raises(BackupError, match="No space left on device") as failed:
        prepare(root, archive, True, engine, print)
    assert "nothing was changed" in failed.value.hint
    assert written, "the first file was written, then the disk was full"
    assert sorted(p.name for p in root.iterdir()) == [".env"]  # no .part, no .airig
    assert (root / ".env").read_bytes() == OLD_ENV
    assert engine.removed == [] and "airig-data" in engine.volumes


def test_a_read_only_checkout_leaves_what_was_there(tmp_path):
    shared = Path(tempfile.mkdtemp(prefix="airig-restore-ro-"))  # where nobody can read
    try:
        shared.chmod(0o755)
        archive = write(shared, DATA_FILES, data_included=True)
        archive.chmod(0o644)
        root, engine = over_a_kit(shared)
        (root / ".env").chmod(0o644)
        root.chmod(0o555)

        def attempt() -> None:
            try:
                prepare(root, archive, True, engine, print)
            finally:  # seen in the child, where the fake engine lives
                assert engine.removed == [], "volumes removed"

        outcome = unprivileged(attempt)
        assert outcome is not None and outcome[0] == "BackupError", outcome
        assert "Permission denied" in outcome[1] or "Read-only" in outcome[1], outcome
        assert sorted(p.name for p in root.iterdir()) == [".env"]
        assert (root / ".env").read_bytes() == OLD_ENV
    finally:
        root.chmod(0o755)
        shutil.rmtree(shared)


def test_a_full_disk_while_up_spools_the_files_keeps_the_restore_pending(tmp_path, monkeypatch):
    archive = write(tmp_path, DATA_FILES, data_included=True)
    root = tmp_path / "clone"
    root.mkdir()
    prepare(root, archive, False, FakeDocker(), print)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(restore.tempfile, "TemporaryFile", full)
    put = Writer()
    with pytest.raises(BackupError, match="No space left on device") as failed:
        apply_pending(settings_of(root), put, print)
    assert "finishes the restore" in failed.value.hint
    assert put.tars == {}  # no volume was written
    assert (root / ".airig" / PENDING).exists()
    assert [p.name for p in (root / ".airig").iterdir() if p.name.startswith("restore-")] == []
    monkeypatch.undo()
    assert apply_pending(settings_of(root), put, print)  # the next `up` finishes it
    assert "outputs/video-notes/talks/volcanoes.md" in put.files("data")


def settings_of(root: Path) -> SimpleNamespace:
    return SimpleNamespace(state_dir=root / ".airig", project_prefix="airig", image="airig:t")


class Writer:
    """The engine as `apply_pending` uses it: one never-started container, put_archive."""

    def __init__(self) -> None:
        self.tars: dict[str, bytes] = {}
        self.mounts: dict = {}

    def sdk(self):
        def create(image, command, volumes, **kwargs):
            self.mounts = volumes
            return self

        return SimpleNamespace(containers=SimpleNamespace(create=create))

    def put_archive(self, path: str, data) -> bool:
        self.tars[path.removeprefix("/restore/")] = data.read()
        return True

    def remove(self, force: bool) -> None:
        pass

    def files(self, volume: str) -> dict[str, tuple[bytes, int]]:
        with tarfile.open(fileobj=io.BytesIO(self.tars[volume])) as tar:
            return {i.name: (tar.extractfile(i).read(), i.uid) for i in tar if i.isfile()}
