"""Plans left behind: a brain about to serve an empty PostgreSQL store while the SQLite
store it ran on before still holds plans (issue 38). The user set
``AIRIG_BRAIN_STORE=postgres`` and forgot `migrate-store`: started, the brain would serve
an empty history, every plan "lost", and its first write (a worker registering) would
make the store one `migrate-store` refuses to copy into. So the brain refuses to start,
in one line naming the command, before it writes anything.

When it refuses, all of:

- the PostgreSQL store is empty: no row in any table of the schema, the same test
  `migrate-store` makes of its target (so the command the line names can run). A store a
  brain has served holds rows (its workers, tokens, events), so one whose finished plans
  retention deleted after a quiet month is not refused;
- the SQLite file (``BRAIN_DB``, on the state volume) holds at least one plan, or cannot
  be read (not a database, damaged, unreadable): it may hold plans, and only the person
  can say whether they matter. No file, an empty one, or a store with no plan: start;
- ``AIRIG_BRAIN_START_EMPTY`` is not set: set, the brain starts on the empty store, and
  its first write makes the store non-empty, so the knob is needed once.

The SQLite file is opened read-only (``mode=ro``): this look never writes or upgrades the
store `migrate-store` may copy next.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from airig.brain.store import schema
from airig.brain.store.db import Database
from airig.common.errors import ConfigError

KNOB = "AIRIG_BRAIN_START_EMPTY"
MIGRATE = "python start_services.py migrate-store"


class PlansLeftBehind(ConfigError):
    """The brain would start on an empty PostgreSQL store beside a SQLite store with plans."""


def check(db: Database, sqlite_path: Path, start_empty: bool) -> None:
    """PlansLeftBehind, one line, when ``db`` (the PostgreSQL store) is empty and the
    SQLite store at ``sqlite_path`` holds plans or cannot be read; else nothing."""
    if start_empty or not _empty(db):
        return
    where = str(getattr(db, "where", "") or "the PostgreSQL store")
    override = f"or set {KNOB}=1 in .env to start on the empty store and leave them behind"
    try:
        plans = sqlite_plans(sqlite_path)
    except (OSError, sqlite3.Error) as exc:
        raise PlansLeftBehind(
            f"the brain's store is now {where}, which is empty, and its SQLite store "
            f"{sqlite_path} cannot be read ({_one_line(exc)}): it may hold plans",
            f"run `{MIGRATE}` to copy them (it says what is wrong with the file), " + override,
        ) from None
    if plans:
        raise PlansLeftBehind(
            f"the brain's store is now {where}, which is empty, but its SQLite store "
            f"{sqlite_path} holds {plans} plan{'s' if plans != 1 else ''}",
            f"run `{MIGRATE}` to copy them, then `up` again; " + override,
        )


def sqlite_plans(path: Path) -> int:
    """The plans the SQLite store at ``path`` holds: 0 with no file, an empty file or no
    ``plans`` table; OSError or sqlite3.Error for a file that cannot be read as a store."""
    try:
        if path.stat().st_size == 0:
            return 0
    except FileNotFoundError:
        return 0
    with path.open("rb") as file:  # sqlite3 opens anything, and fails on its first read
        if file.read(16) != b"SQLite format 3\x00":
            raise sqlite3.DatabaseError("not a SQLite database")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute("PRAGMA query_only = ON")
        found = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'plans'"
        ).fetchone()
        if found is None:
            return 0
        (count,) = conn.execute("SELECT count(*) FROM plans").fetchone()
        return int(count)
    finally:
        conn.close()


def _empty(db: Database) -> bool:
    """No row in any table the schema declares (``migrate_store._lock_empty``'s test)."""
    with db.read() as conn:
        for table in schema.metadata.sorted_tables:
            if conn.execute(f'SELECT 1 FROM "{table.name}" LIMIT 1').fetchone() is not None:
                return False
    return True


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__
