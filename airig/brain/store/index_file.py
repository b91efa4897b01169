"""The search index's file (``<BRAIN_DATA_DIR>/index/search.sqlite``), opened safely.

The brain is its one writer, but the file lies on the data volume, where an older kit, a
crash or a user may have left anything: random bytes, a truncated copy, a database of
other tables, a directory, a link. Whatever is there, opening, reading or writing it ends
in one ``IndexUnavailable`` whose message says what is wrong and the fix (never an apsw
or OS exception that would turn a search into a 500, or sink the other reports of the
worker's exchange that carried an embed task's completion):

- a link (the file or ``index/``) is never followed: ``SQLITE_OPEN_NOFOLLOW``, and the
  folder checked with ``lstat``;
- a SQLite file that holds other tables than the index's is not taken over (its tables
  are left alone), nor one whose ``indexes`` / ``entries`` lack the index's columns;
- an index file from before owners were recorded gains its ``owner`` columns (NULL: the
  admin's alone, as a plan of that time).

The file is opened through apsw: its wheels bundle a SQLite that may load extensions,
which the standard library's sqlite3 cannot on a Python built without
``--enable-loadable-sqlite-extensions``. Each call opens its own connection (WAL, a
busy timeout): index writes are rare and searches short.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import apsw
import sqlite_vec

INDEX_FILE = Path("index") / "search.sqlite"
BUSY_TIMEOUT_MS = 10_000
MOVE_ASIDE = (
    "move index/search.sqlite (and search.sqlite-wal, -shm) aside on the data volume: the "
    "next embed tasks start a new index (submit their plans again to refill it)"
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS indexes (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL,
    created REAL NOT NULL,
    owner TEXT
);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    index_id INTEGER NOT NULL REFERENCES indexes(id),
    plan_id TEXT NOT NULL,
    task_key TEXT NOT NULL,
    source TEXT,
    locator TEXT,
    snippet TEXT NOT NULL,
    untrusted INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    owner TEXT
);
"""
# Made after the owner columns exist (an older file gains them first).
INDEXES = """
CREATE INDEX IF NOT EXISTS entries_by_task ON entries(index_id, plan_id, task_key);
CREATE INDEX IF NOT EXISTS entries_by_source ON entries(index_id, source);
CREATE INDEX IF NOT EXISTS entries_by_owner ON entries(index_id, owner);
"""
# The columns each table of the index must have (``owner`` is added when missing).
COLUMNS = {
    "indexes": {"id", "name", "model", "dims", "created"},
    "entries": {"id", "index_id", "plan_id", "task_key", "source", "locator", "snippet",
                "untrusted", "created"},
}  # fmt: skip

_schema_lock = threading.Lock()


class IndexUnavailable(Exception):
    """The index file cannot be opened, read or written; the message ends with the fix."""


def index_path(data_dir: Path) -> Path:
    return data_dir / INDEX_FILE


def fix_for(exc: BaseException) -> str:
    """What to do about a failure: wait for a busy index, make room or make the volume
    writable, or else (a file that is not a sound index) move it aside."""
    code = exc.errno if isinstance(exc, OSError) else None
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return "another connection holds the index: try again"
    if isinstance(exc, apsw.FullError) or code == errno.ENOSPC:
        return "the data volume is full: free space on it, then try again"
    if isinstance(exc, apsw.ReadOnlyError) or code == errno.EROFS:
        return "the data volume is read-only for the brain: make it writable"
    return MOVE_ASIDE


def unavailable(doing: str, path: Path, exc: BaseException) -> IndexUnavailable:
    """One line: what failed, why, and the fix."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return IndexUnavailable(f"cannot {doing} the search index {path}: {why}; {fix_for(exc)}")


def refuse_links(path: Path) -> None:
    """The file and its folder are the brain's own: a link there is refused, not followed
    (the folder by ``lstat``; the file by ``SQLITE_OPEN_NOFOLLOW`` and here, for a
    dangling one that would read as "no index yet")."""
    for part in (path.parent, path):
        if part.is_symlink():
            raise IndexUnavailable(
                f"the search index {part} is a symbolic link, which the brain never "
                f"follows; {MOVE_ASIDE}"
            )


def exists(path: Path) -> bool:
    """Whether there is anything at the index's path (a dangling link counts: refused)."""
    refuse_links(path)
    return path.exists()


def connect(path: Path, create: bool = True) -> apsw.Connection:
    """The index file with sqlite-vec loaded and the index's tables; ``IndexUnavailable``
    (one line with the fix) if not."""
    refuse_links(path)
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_NOFOLLOW
        flags |= apsw.SQLITE_OPEN_CREATE if create else 0
        conn = apsw.Connection(str(path), flags=flags)
    except (OSError, apsw.Error) as exc:
        raise unavailable("open", path, exc) from None
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)  # apsw's Connection.load_extension, as sqlite3's
        conn.enable_load_extension(False)
    except (apsw.Error, AttributeError) as exc:
        conn.close()
        raise IndexUnavailable(f"cannot load sqlite-vec into the search index: {exc}") from None
    try:
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        with _schema_lock:
            _prepare(conn, path)
    except apsw.Error as exc:
        conn.close()
        raise unavailable("open", path, exc) from None
    except IndexUnavailable:
        conn.close()
        raise
    return conn


def _columns(conn: apsw.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}


def _prepare(conn: apsw.Connection, path: Path) -> None:
    """Check that the file is the index's (or empty), then make its tables."""
    tables = {
        str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    ours = set(COLUMNS) & tables
    if tables and not ours:
        shown = ", ".join(repr(name) for name in sorted(tables)[:5])  # a user's names
        raise IndexUnavailable(
            f"{path} is a SQLite file of other tables ({shown}), not a search index; {MOVE_ASIDE}"
        )
    for table in sorted(ours):
        missing = COLUMNS[table] - _columns(conn, table)
        if missing:
            raise IndexUnavailable(
                f"{path} is not a search index: its table {table!r} lacks "
                f"{', '.join(sorted(missing))}; {MOVE_ASIDE}"
            )
    conn.execute("PRAGMA journal_mode=WAL")
    with conn:  # one transaction: a crash leaves the tables whole or not there
        conn.execute(SCHEMA)
        for table in COLUMNS:
            if "owner" not in _columns(conn, table):
                conn.execute(f"ALTER TABLE {table} ADD COLUMN owner TEXT")
        conn.execute(INDEXES)
