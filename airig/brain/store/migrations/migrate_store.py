"""``migrate-store``: an existing SQLite store copied into PostgreSQL (issue 38).

A user who outgrows one brain on SQLite moves its store, once, into the database
``BRAIN_DATABASE_URL`` will name. What has to hold:

- **Nothing half-moved.** Every row goes in ONE PostgreSQL transaction, checked before it
  commits: a failure, a Ctrl-C or a killed process (the server rolls back a transaction
  whose client went away) leaves the target with no rows, and the run can be repeated.
- **Nothing merged.** A target that holds a row in any store table is refused before a
  row is written: a copy into a store a brain already uses would mix two histories.
  The tables are locked (``EXCLUSIVE``: others may read, nobody writes) before they are
  looked at, so two copies at once cannot both find them empty.
- **The source left as it was.** It is upgraded to this code's revision first (as a
  brain's start would), then read through a read-only connection, in one read
  transaction: one snapshot of every table, even while a brain still writes to it.
- **Bounded memory.** Rows move ``BATCH_ROWS`` at a time (a store's events table can hold
  millions), checksums are folded row by row.
- **The next insert works.** tasks, events and backups have autoincrement keys; their
  PostgreSQL sequences are set past the largest id ever given (SQLite's
  ``sqlite_sequence`` too: an id freed by a delete is never given again, as on SQLite).
- **Proof.** Per table, the rows counted on both sides and an order-free checksum of the
  key columns (``CHECKED``) must match before the commit.

Values are copied as SQLite holds them (JSON stays the text it was); only SQLite's loose
typing is straightened to the column's declared type (an integer in a REAL column is a
float), and what PostgreSQL's types cannot hold (a NUL character in text, bytes) is
refused in one line naming the row, before anything commits. The URL's password is never
said (``postgres.masked``, the driver's words scrubbed).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.pool import NullPool

from airig.brain.store import migrations, schema
from airig.brain.store.migrations import postgres
from airig.brain.store.migrations.revisions import known, newer
from airig.common.errors import AirigError

BATCH_ROWS = 1000
SQLITE_HEADER = b"SQLite format 3\x00"
# Besides each table's primary key, the columns whose values the checksum covers: what a
# brain acts on (a task's state and its fencing attempt, an event's kind and time).
CHECKED: dict[str, tuple[str, ...]] = {
    "tasks": ("state", "attempt", "lease_id", "result_hash", "payload_json"),
    "events": ("ts", "event_type", "task_id"),
}
FIX_SOURCE = "--from must be a brain's SQLite store (BRAIN_DB, /state/brain.db in the container)"


class MoveError(AirigError):
    """The store could not be moved; nothing was written to the target."""


@dataclass
class Moved:
    """One table's outcome: rows on each side and the two checksums."""

    table: str
    rows: int
    checksum: int
    sequence_at: int | None = None  # autoincrement tables: the value the next id follows


def check_source(path: Path) -> None:
    """Refuse, touching nothing, a ``--from`` that is not a brain's SQLite store: missing,
    not SQLite, SQLite with no store's tables, or a store a newer airig made. Upgrading
    any SQLite file would add the store's tables to it, so this comes first."""
    if not path.is_file():
        raise MoveError(f"no brain store at {path}: not a file", FIX_SOURCE)
    try:
        with path.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise MoveError(f"cannot read {path}: {exc.strerror or exc}", FIX_SOURCE) from None
    if header != SQLITE_HEADER:
        raise MoveError(f"{path} is not a SQLite database, so not a brain's store", FIX_SOURCE)
    try:
        conn = _read_only(path)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
            current = None
            if "alembic_version" in tables:
                row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
                current = None if row is None else str(row[0])
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise MoveError(f"cannot read {path}: {exc}", FIX_SOURCE) from None
    if "alembic_version" not in tables and not {"plans", "tasks"} <= tables:
        raise MoveError(f"{path} is a SQLite database but not a brain's store", FIX_SOURCE)
    if current is not None and current not in known():
        raise newer(str(path), current)


def migrate_store(
    source: Path,
    url: str,
    *,
    say: Callable[[str], None] = print,
    batch_rows: int = BATCH_ROWS,
) -> list[Moved]:
    """Copy the SQLite store at ``source`` into the PostgreSQL database ``url``; one line
    per table through ``say`` once it committed. ``AirigError`` (one line, the password
    masked) for anything refused, and then the target holds no row."""
    check_source(source)
    parsed = postgres.parse(url)
    where = postgres.masked(parsed)
    # the target first: a server that cannot be reached changes nothing, not even the file
    migrations.upgrade(url=url)
    migrations.upgrade(source)
    _check_foreign_keys(source)
    connect_args = (
        {} if "connect_timeout" in parsed.query else {"connect_timeout": postgres.CONNECT_TIMEOUT_S}
    )
    engine = sa.create_engine(parsed, poolclass=NullPool, connect_args=connect_args)
    src: sqlite3.Connection | None = None
    try:
        with engine.connect() as pg, pg.begin():
            _lock_empty(pg, where)
            src = _read_only(source)
            src.execute("BEGIN")  # one snapshot of every table, held to the end
            moved = []
            for table in schema.metadata.sorted_tables:
                (count,) = src.execute(f"SELECT count(*) FROM {_q(table.name)}").fetchone()
                if count:  # a large store takes minutes: say what it is at
                    say(f"copying {table.name}: {count} rows")
                moved.append(_copy(src, pg, table, batch_rows))
            for table, done in zip(schema.metadata.sorted_tables, moved, strict=True):
                done.sequence_at = _reset_sequence(src, pg, table)
                _verify(pg, table, done, where)
    except sa.exc.DBAPIError as exc:
        cause = postgres._scrubbed(str(exc.orig or exc), parsed)
        raise MoveError(
            f"cannot copy the brain's store into {where}: {cause}",
            "nothing was written there; fix the cause and run migrate-store again",
        ) from None
    except sqlite3.Error as exc:
        raise MoveError(
            f"cannot read the brain's store {source}: {exc}",
            f"nothing was written to {where}; {FIX_SOURCE}",
        ) from None
    finally:
        if src is not None:
            src.close()
        engine.dispose()
    for done in moved:
        sequence = "" if done.sequence_at is None else f", next id after {done.sequence_at}"
        checksum = f"checksum {done.checksum:016x} matches"
        say(f"{done.table:<14} {done.rows:>10} rows, {checksum}{sequence}")
    say(f"the brain's store {source} is copied into {where}")
    return moved


def _read_only(path: Path) -> sqlite3.Connection:
    # mode=ro: this connection cannot write the file, whatever runs through it;
    # isolation_level=None: BEGIN is said here, once, for one snapshot of every table
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    conn.execute("PRAGMA query_only = ON")
    return conn


def _check_foreign_keys(path: Path) -> None:
    """A row whose parent is gone would stop the copy halfway on PostgreSQL (which checks
    every key); said first, in SQLite's own words."""
    try:
        conn = _read_only(path)
        try:
            broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise MoveError(f"cannot read the brain's store {path}: {exc}", FIX_SOURCE) from None
    if broken:
        table, rowid, parent, _ = broken[0]
        raise MoveError(
            f"the brain's store {path} has {len(broken)} row(s) whose foreign key points at "
            f"no row (the first: {table} rowid {rowid}, of {parent})",
            "nothing was copied; restore a backup of the store, or delete those rows",
        )


def _lock_empty(pg: sa.Connection, where: str) -> None:
    tables = schema.metadata.sorted_tables
    names = ", ".join(pg.dialect.identifier_preparer.format_table(t) for t in tables)
    pg.execute(sa.text(f"LOCK TABLE {names} IN EXCLUSIVE MODE"))
    holding = [
        t.name
        for t in tables
        if pg.execute(sa.select(sa.literal(1)).select_from(t).limit(1)).first()
    ]
    if holding:
        raise MoveError(
            f"the database {where} already holds rows in {', '.join(holding)}: "
            "migrate-store copies into an empty store only",
            "name a new, empty database (or drop this one's store tables if it is not in use)",
        )


def _copy(src: sqlite3.Connection, pg: sa.Connection, table: sa.Table, batch_rows: int) -> Moved:
    columns = list(table.columns)
    names = [c.name for c in columns]
    fit = [_fitter(table.name, c) for c in columns]
    checked = _checked_positions(table)
    cursor = src.execute(f"SELECT {', '.join(_q(n) for n in names)} FROM {_q(table.name)}")
    rows = 0
    checksum = 0
    while batch := cursor.fetchmany(batch_rows):
        values = [{name: f(v) for name, f, v in zip(names, fit, row, strict=True)} for row in batch]
        for value in values:
            checksum = (checksum + _row_hash([value[names[i]] for i in checked])) % 2**64
        insert_batch(pg, table, values)
        rows += len(values)
    return Moved(table.name, rows, checksum)


def insert_batch(pg: sa.Connection, table: sa.Table, values: list[dict[str, Any]]) -> None:
    """One batch into PostgreSQL (a multi-row INSERT per statement: SQLAlchemy's
    insertmanyvalues on psycopg)."""
    pg.execute(table.insert(), values)


def _fitter(table: str, column: sa.Column[Any]) -> Callable[[Any], Any]:
    """What SQLite gave for ``column`` as the column's declared type; refused when the
    type cannot hold it (one line naming the table and column)."""
    kind = column.type

    def refuse(value: Any, why: str) -> MoveError:
        return MoveError(
            f"{table}.{column.name} holds {why} ({str(value)[:60]!r}), which PostgreSQL's "
            f"{kind.compile(dialect=_PG)} cannot hold",
            "nothing was copied; correct that value in the SQLite store and run again",
        )

    def fit(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(kind, sa.Float):
            if isinstance(value, int | float):
                return float(value)
            raise refuse(value, "a value that is not a number")
        if isinstance(kind, sa.Integer):
            if isinstance(value, int):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise refuse(value, "a value that is not an integer")
        if isinstance(value, bytes):
            raise refuse(value, "bytes")
        text = value if isinstance(value, str) else str(value)
        if "\x00" in text:
            raise refuse(value, "a NUL character")
        return text

    return fit


_PG = pg_dialect.dialect()


def _checked_positions(table: sa.Table) -> list[int]:
    wanted = [c.name for c in table.primary_key.columns] + list(CHECKED.get(table.name, ()))
    names = [c.name for c in table.columns]
    return [names.index(name) for name in wanted]


def _row_hash(values: Sequence[Any]) -> int:
    """A row's key columns as 64 bits; the table's checksum is their sum mod 2**64, so
    the order rows come in (which differs between the engines) does not matter, and a row
    copied twice or lost does."""
    text = "\x1f".join("\x00" if v is None else repr(v) for v in values)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _serial_key(table: sa.Table) -> sa.Column[Any] | None:
    """The table's one integer primary key, the column PostgreSQL gave a sequence
    (``Table.autoincrement_column`` says the same, but only from a later SQLAlchemy 2.0
    release than the floor pyproject.toml allows)."""
    keys = list(table.primary_key.columns)
    if len(keys) == 1 and isinstance(keys[0].type, sa.Integer) and keys[0].autoincrement:
        return keys[0]
    return None


def _reset_sequence(src: sqlite3.Connection, pg: sa.Connection, table: sa.Table) -> int | None:
    """Set the serial sequence of an autoincrement key past every id SQLite gave: the
    copied rows carry their ids, which the sequence never handed out."""
    column = _serial_key(table)
    if column is None:
        return None
    sequence = pg.execute(
        sa.text("SELECT pg_get_serial_sequence(:table, :column)"),
        {"table": table.name, "column": column.name},
    ).scalar()
    if sequence is None:
        return None
    largest = pg.execute(sa.select(sa.func.max(column))).scalar() or 0
    given = (
        src.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table.name,)).fetchone()
        if _has_table(src, "sqlite_sequence")
        else None
    )
    last = max(int(largest), int(given[0]) if given and given[0] is not None else 0)
    # setval(seq, 1, false): the next id is 1 (an empty table); else the next is last + 1
    pg.execute(
        sa.text("SELECT setval(:sequence, :value, :called)"),
        {"sequence": sequence, "value": max(last, 1), "called": last > 0},
    )
    return last


def _has_table(src: sqlite3.Connection, name: str) -> bool:
    found = src.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return found is not None


def _verify(pg: sa.Connection, table: sa.Table, done: Moved, where: str) -> None:
    """The target's rows counted and checksummed as they are now, in the transaction about
    to commit; a difference rolls it all back."""
    count = pg.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
    checked = [list(table.columns)[i] for i in _checked_positions(table)]
    checksum = 0
    for row in _stream(pg, sa.select(*checked)):
        checksum = (checksum + _row_hash(list(row))) % 2**64
    if count != done.rows or checksum != done.checksum:
        raise MoveError(
            f"{table.name}: {done.rows} rows read, {count} in {where}; checksum "
            f"{done.checksum:016x} read, {checksum:016x} there",
            "nothing was written; the copy was rolled back, run migrate-store again",
        )


def _stream(pg: sa.Connection, query: sa.Select[Any]) -> Iterator[sa.Row[Any]]:
    # a server-side cursor, BATCH_ROWS at a time: the target's table is never whole in memory
    result = pg.execution_options(stream_results=True, yield_per=BATCH_ROWS).execute(query)
    yield from result


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
