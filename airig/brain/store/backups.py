"""The kit's backups as the brain knows them: one row per archive `backup` wrote.

The launcher takes the store's snapshot (``python -m airig.brain --snapshot``, SQLite's
online backup API), writes the archive on the host, and then records it here
(``POST /v1/backups``): the dashboard and ``status`` show the last one's age, and the
``backup_old`` alert (``ops/alerts.py``) fires when it is older than
``AIRIG_BACKUP_MAX_AGE_H``. Every function runs inside the caller's transaction or read.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

SCHEMA = """CREATE TABLE IF NOT EXISTS backups (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at REAL NOT NULL,
    archive TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    models INTEGER NOT NULL DEFAULT 0
)"""


def record(
    conn: sqlite3.Connection, created_at: float, archive: str, size: int, sha256: str,
    models: bool,
) -> int:  # fmt: skip
    cursor = conn.execute(
        "INSERT INTO backups (created_at, archive, bytes, sha256, models) VALUES (?,?,?,?,?)",
        (created_at, archive, size, sha256, int(models)),
    )
    return int(cursor.lastrowid or 0)


def newest(conn: sqlite3.Connection, limit: int = 1) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT * FROM backups ORDER BY created_at DESC, id DESC LIMIT ?", (limit,)
    ).fetchall()


def last_at(conn: sqlite3.Connection) -> float | None:
    row = conn.execute("SELECT MAX(created_at) FROM backups").fetchone()
    return None if row[0] is None else float(row[0])


def take_snapshot(db_path: Path, dest: Path) -> dict[str, Any]:
    """A consistent copy of the live store at ``dest`` through SQLite's online backup API:
    one read transaction in WAL mode, so it waits for no writer and holds none up. A file
    copy of a live database can catch a half-written page or miss the WAL; this cannot.
    What it holds (bytes, row counts) is returned for the archive's manifest."""
    dest.unlink(missing_ok=True)
    source = sqlite3.connect(str(db_path))
    try:
        copy = sqlite3.connect(str(dest))
        try:
            source.backup(copy)
            if copy.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("the snapshot failed its integrity check")
            counts = {
                table: copy.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                for table in ("plans", "tasks", "tokens", "workers")
            }
        finally:
            copy.close()
    finally:
        source.close()
    return {"path": str(dest), "bytes": dest.stat().st_size, **counts}
