"""``python -m airig.brain --snapshot PATH`` where it cannot write, or has nothing to copy
(issue 36 §4): a full or read-only destination is one line naming it, exit ≠ 0, and no
empty or half file left there; a BRAIN_DB that does not exist is an error, not a new empty
store (airig/brain/store/backups.py ``take_snapshot``, airig/brain/__main__.py).

A real full and a real read-only filesystem are tmpfs mounts (root only; CI runs as root):
unprivileged, the injected ENOSPC / SQLITE_FULL of the in-process tests still cover it."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import brain_helpers as h
import pytest

from airig.brain.store import backups
from airig.common.errors import AirigError

ROOT = Path(__file__).resolve().parents[3]
SKIP = "a tmpfs mount needs root (CAP_SYS_ADMIN)"


def store(tmp_path: Path, filler_bytes: int = 0) -> Path:
    """A brain's store with one plan (and ``filler_bytes`` more in a table of its own).
    SQLite's, whatever AIRIG_TEST_STORE says: --snapshot copies the SQLite file by SQLite's
    backup API; on PostgreSQL it refuses (test_a_store_on_postgresql_is_refused...)."""
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL="")
    h.submit(brain, [h.noop("a")])
    if filler_bytes:
        with sqlite3.connect(brain.settings.db_path) as conn:
            conn.execute("CREATE TABLE filler (b BLOB)")
            conn.executemany("INSERT INTO filler VALUES (?)",
                             [(os.urandom(4096),)] * (filler_bytes // 4096))  # fmt: skip
    return brain.settings.db_path


def snapshot_cli(db: Path, dest: Path, **more: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "AIRIG_"))}
    env.update({"BRAIN_DB": str(db), "BRAIN_RESULTS_DIR": str(db.parent / "results"),
                "BRAIN_ADMIN_TOKEN": "admin-secret-token",
                "WORKER_BOOTSTRAP_TOKEN": "bootstrap-secret-token", **more})  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "airig.brain", "--snapshot", str(dest)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode != 0, done.stdout
    assert done.stdout == ""  # no summary: nothing was written
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[object]:
    """``mount(folder, options)``: a tmpfs there, unmounted after the test."""
    mounted: list[Path] = []

    def make(folder: Path, options: str) -> Path:
        folder.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode != 0:
            pytest.skip(SKIP)
        mounted.append(folder)
        return folder

    yield make
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], check=False)


# ------------------------------------------------------------------ the destination
def test_a_snapshot_to_a_full_disk_is_one_line_naming_it_and_leaves_no_file(
    tmp_path: Path, mount
) -> None:
    db = store(tmp_path, filler_bytes=1 << 20)
    full = mount(tmp_path / "full", "size=256k")
    dest = full / "snap.db"
    line = one_line(snapshot_cli(db, dest), f"cannot write the snapshot to {dest}", "full")
    assert "free space" in line
    assert sorted(os.listdir(full)) == []  # no 0-byte file, no .part, no journal
    assert db.stat().st_size > 0 and sqlite3.connect(db).execute("SELECT 1 FROM plans").fetchone()


def test_a_snapshot_to_a_read_only_filesystem_is_one_line_and_leaves_no_file(
    tmp_path: Path, mount
) -> None:
    db = store(tmp_path)
    read_only = mount(tmp_path / "ro", "ro,size=256k")
    dest = read_only / "snap.db"
    one_line(snapshot_cli(db, dest), f"cannot write the snapshot to {dest}", "Read-only")
    assert os.listdir(read_only) == []


def test_a_snapshot_into_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    db = store(tmp_path)
    dest = tmp_path / "nowhere" / "snap.db"
    one_line(snapshot_cli(db, dest), f"cannot write the snapshot to {dest}")
    assert not dest.parent.exists()


@pytest.mark.parametrize(
    "error",
    [sqlite3.OperationalError("database or disk is full"),
     OSError(errno.ENOSPC, "No space left on device")],
    ids=["sqlite full", "ENOSPC"],
)  # fmt: skip
def test_a_copy_that_runs_out_of_space_leaves_no_part_and_keeps_the_old_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """Unprivileged too: the copy is cut half way (some bytes written, then full)."""
    db = store(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "snap.db"
    dest.write_bytes(b"an earlier, whole snapshot")

    def half_then_full(_source: object, part: Path) -> dict[str, int]:
        part.write_bytes(b"\0" * 8192)
        Path(f"{part}-journal").write_bytes(b"j")
        raise error

    monkeypatch.setattr(backups, "_copy_into", half_then_full)
    with pytest.raises(AirigError) as caught:
        backups.take_snapshot(db, dest)
    assert caught.value.message.startswith(f"cannot write the snapshot to {dest}: ")
    assert "\n" not in caught.value.message
    assert sorted(os.listdir(out)) == ["snap.db"]
    assert dest.read_bytes() == b"an earlier, whole snapshot"


def test_a_snapshot_is_written_whole_mode_600_with_nothing_beside_it(tmp_path: Path) -> None:
    db = store(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "snap.db"
    dest.write_bytes(b"stale")
    done = snapshot_cli(db, dest)
    assert done.returncode == 0, done.stderr
    assert '"plans": 1' in done.stdout
    assert os.listdir(out) == ["snap.db"]
    assert dest.stat().st_mode & 0o777 == 0o600
    assert sqlite3.connect(dest).execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 1


@pytest.mark.parametrize("kind", ["directory", "symlink", "dangling symlink", "fifo"])
def test_a_destination_that_is_not_a_plain_file_is_refused_untouched(
    tmp_path: Path, kind: str
) -> None:
    db = store(tmp_path)
    target = tmp_path / "precious"
    target.write_text("keep me")
    dest = tmp_path / "snap.db"
    if kind == "directory":
        dest.mkdir()
    elif kind == "symlink":
        dest.symlink_to(target)
    elif kind == "dangling symlink":
        dest.symlink_to(tmp_path / "gone")
    else:
        os.mkfifo(dest)
    one_line(snapshot_cli(db, dest), str(dest), "not a regular file")
    assert target.read_text() == "keep me" and not (tmp_path / "gone").exists()
    assert os.path.lexists(dest)


# ------------------------------------------------------------------ the store
def test_a_brain_db_that_does_not_exist_is_an_error_not_a_new_empty_store(
    tmp_path: Path,
) -> None:
    db = tmp_path / "state" / "brain.db"
    db.parent.mkdir()
    dest = tmp_path / "snap.db"
    one_line(snapshot_cli(db, dest), f"BRAIN_DB {db} does not exist")
    assert os.listdir(db.parent) == []  # no empty store made
    assert not dest.exists()


@pytest.mark.parametrize("content", [b"", b"not a database at all" * 100, b"\0" * 4096])
def test_a_brain_db_that_is_not_a_store_is_one_line_and_left_as_it_was(
    tmp_path: Path, content: bytes
) -> None:
    """An empty file is an empty database to SQLite: it has none of the store's tables."""
    db = tmp_path / "brain.db"
    db.write_bytes(content)
    dest = tmp_path / "snap.db"
    done = snapshot_cli(db, dest)
    one_line(done, f"BRAIN_DB {db}")
    assert db.read_bytes() == content
    assert not dest.exists() and sorted(os.listdir(tmp_path)) == ["brain.db"]


def test_a_brain_db_that_is_a_folder_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "brain.db"
    db.mkdir()
    one_line(snapshot_cli(db, tmp_path / "snap.db"), f"BRAIN_DB {db} is not a file")


# ------------------------------------------------------------------ a store on PostgreSQL
# No server is needed: the refusal comes before anything is opened.
PG_URL = "postgresql://brain:s3cret-pw@127.0.0.1:1/airig"


def test_a_store_on_postgresql_is_refused_in_one_line_naming_pg_dump(tmp_path: Path) -> None:
    """BRAIN_DATABASE_URL set: the SQLite file at BRAIN_DB (here a real one, left from before
    the move) is not the store, and copying it would be a backup of stale data."""
    db = store(tmp_path)
    before = db.read_bytes()
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "snap.db"
    dest.write_bytes(b"an earlier, whole snapshot")
    line = one_line(snapshot_cli(db, dest, BRAIN_DATABASE_URL=PG_URL), "PostgreSQL", "pg_dump")
    assert "s3cret-pw" not in line  # the URL's password is never printed
    assert sorted(os.listdir(out)) == ["snap.db"]
    assert dest.read_bytes() == b"an earlier, whole snapshot"
    assert db.read_bytes() == before


def test_take_snapshot_on_postgresql_opens_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "state" / "brain.db"  # no file at all: still the PostgreSQL refusal
    with pytest.raises(AirigError) as caught:
        backups.take_snapshot(missing, tmp_path / "snap.db", database_url=PG_URL)
    assert "pg_dump" in caught.value.message and "\n" not in caught.value.message
    assert "nothing was written" in (caught.value.hint or "")
    assert os.listdir(tmp_path) == []
