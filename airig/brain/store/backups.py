"""The kit's backups as the brain knows them: one row per archive `backup` wrote.

The launcher takes the store's snapshot (``python -m airig.brain --snapshot``, SQLite's
online backup API), writes the archive on the host, and then records it here
(``POST /v1/backups``): the dashboard and ``status`` show the last one's age, and the
``backup_old`` alert (``ops/alerts.py``) fires when it is older than
``AIRIG_BACKUP_MAX_AGE_H``. Every function runs inside the caller's transaction or read.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airig.common.errors import AirigError, ConfigError


def record(
    conn: sqlite3.Connection, created_at: float, archive: str, size: int, sha256: str,
    models: bool,
) -> int:  # fmt: skip
    row = conn.execute(
        """INSERT INTO backups (created_at, archive, bytes, sha256, models) VALUES (?,?,?,?,?)
           RETURNING id""",  # PostgreSQL has no lastrowid
        (created_at, archive, size, sha256, int(models)),
    ).fetchone()
    return int(row[0])


def newest(conn: sqlite3.Connection, limit: int = 1) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT * FROM backups ORDER BY created_at DESC, id DESC LIMIT ?", (limit,)
    ).fetchall()


def last_at(conn: sqlite3.Connection) -> float | None:
    row = conn.execute("SELECT MAX(created_at) FROM backups").fetchone()
    return None if row[0] is None else float(row[0])


SNAPSHOT_TABLES = ("plans", "tasks", "tokens", "workers")
# what SQLite may leave beside a database file it wrote
SIDE_FILES = ("", "-journal", "-wal", "-shm")


def take_snapshot(db_path: Path, dest: Path, database_url: str = "") -> dict[str, Any]:
    """A consistent copy of the live store at ``dest`` through SQLite's online backup API:
    one read transaction in WAL mode, so it waits for no writer and holds none up. A file
    copy of a live database can catch a half-written page or miss the WAL; this cannot.
    What it holds (bytes, row counts) is returned for the archive's manifest.

    The store must exist: connecting to a BRAIN_DB that is not there would create an
    empty store and snapshot that. The copy is written to a ``.part`` file beside ``dest``
    (``O_EXCL|O_NOFOLLOW``, mode 600) and renamed over it only once whole and checked, so
    a full or read-only destination leaves no empty or half file, and ``dest`` keeps what
    it held. Every failure is one AirigError naming the store or the destination.

    A store on PostgreSQL (``database_url``) has no file to copy and is refused before
    anything is opened: its backup is ``pg_dump``'s, which `backup` takes instead."""
    if database_url:
        raise ConfigError(
            "the brain's store is on PostgreSQL (BRAIN_DATABASE_URL): --snapshot copies only "
            "a SQLite store, and backups of a PostgreSQL store are pg_dump's",
            "run `backup` on the host (it takes pg_dump -Fc in the postgres container); "
            "nothing was written",
        )
    source = _open_store(db_path)
    try:
        return _write_copy(source, dest)
    finally:
        source.close()


def _open_store(db_path: Path) -> sqlite3.Connection:
    fix = (
        "BRAIN_DB must name the brain's store (in its container /state/brain.db); "
        "nothing was written"
    )
    if not db_path.is_file():
        what = "is not a file" if db_path.exists() else "does not exist"
        raise ConfigError(f"BRAIN_DB {db_path} {what}: there is no store to snapshot", fix)
    try:
        # mode=rw: SQLite creates no file (a read-only open could not read a live WAL store)
        source = sqlite3.connect(f"file:{quote(str(db_path))}?mode=rw", uri=True)
        try:
            rows = source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            missing = sorted(set(SNAPSHOT_TABLES) - {row[0] for row in rows})
        except sqlite3.Error:
            source.close()
            raise
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot read the store BRAIN_DB {db_path}: {exc}", fix) from None
    if missing:  # an empty file is an empty database to SQLite
        source.close()
        raise ConfigError(
            f"BRAIN_DB {db_path} is not the brain's store (no {missing[0]} table)", fix
        )
    return source


def _write_copy(source: sqlite3.Connection, dest: Path) -> dict[str, Any]:
    fix = (
        f"free space in {dest.parent} or name a writable folder; the store is untouched and "
        "nothing was left there"
    )
    if dest.is_symlink() or (dest.exists() and not dest.is_file()):
        raise AirigError(
            f"cannot write the snapshot to {dest}: it exists and is not a regular file",
            "name a new file in a writable folder; nothing was written",
        )
    part = dest.with_name(f".{dest.name}.part-{secrets.token_hex(4)}")
    try:
        os.close(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        try:
            counts = _copy_into(source, part)
            os.replace(part, dest)
        except BaseException:
            _remove(part)
            raise
    except (OSError, sqlite3.Error) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise AirigError(f"cannot write the snapshot to {dest}: {why}", fix) from None
    return {"path": str(dest), "bytes": dest.stat().st_size, **counts}


def _copy_into(source: sqlite3.Connection, part: Path) -> dict[str, int]:
    copy = sqlite3.connect(str(part))
    try:
        source.backup(copy)
        if copy.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise sqlite3.DatabaseError("the snapshot failed its integrity check")
        counts = {
            table: int(copy.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for table in SNAPSHOT_TABLES
        }
    finally:
        copy.close()
    with open(part, "rb") as written:  # on disk before it takes dest's name
        os.fsync(written.fileno())
    return counts


def _remove(part: Path) -> None:
    for suffix in SIDE_FILES:
        # not there, or the folder went read-only meanwhile: nothing more to do
        with contextlib.suppress(OSError):
            os.unlink(f"{part}{suffix}")
