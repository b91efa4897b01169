"""The store on PostgreSQL (``BRAIN_DATABASE_URL``, issue 38), behind sqlite3's interface.

The store's modules speak the sqlite3 module's DB-API: ``conn.execute(sql, params)``,
``?`` and ``?N`` placeholders, rows read by name or index (``sqlite3.Row``), ``rowcount``,
``sqlite3.Error`` and its kinds. ``PgConnection`` is that subset on psycopg 3, so the same
modules run on either engine; where the two dialects differ the SQL says so itself
(``dialect.py``), and everything else is written in the SQL both accept.

``PgDatabase`` is ``db.Database``'s contract (``tx``, ``read``, ``writer``, ``lookup``,
``close``) on a small pool of connections:
- **A write transaction is exclusive unless its caller says it is not**
  (``tx(exclusive=False)``). An exclusive one takes the store-wide advisory lock
  (``pg_advisory_xact_lock(WRITE_LOCK)``, first, released by its commit), so the store's
  read-modify-write sequences written for SQLite's one writer (a plan's submit, a cancel,
  the reaper's pass, retention, registration) run one at a time across every brain. The
  hot writes a worker sends (the exchange's reports and claim, a claim's long poll, a
  lease renewal, a heartbeat) take no such lock: they run beside each other in every
  brain at once, safe by row locks instead (``dialect.for_update``): a claim's candidate
  rows ``FOR UPDATE SKIP LOCKED`` (another brain's claim passes over them), a fenced
  write's task ``FOR UPDATE`` (it decides on the row as the other write left it), a
  child's row before its readiness is judged, and every state move a conditional UPDATE
  from the state it was read in (``states.RowMoved`` otherwise: the write is run again).
  An exclusive transaction runs beside those too: it is exclusive only among the
  exclusive ones, and its task writes are held to the same row rules. Reads never take
  a lock (MVCC snapshots, as WAL gives on SQLite). Being safe beside other brains' writes,
  the shared durable ones are safe beside each other in one brain too: the group commit's
  batches of them run on write connections of their own (``pg_writers.py``:
  ``BRAIN_PG_WRITERS`` at once, one by default), the exclusive ones on the store-wide
  lock's connection, one at a time.
- ``durable=False`` is ``synchronous_commit = off`` for that transaction only: the same
  trade as SQLite's synchronous=NORMAL (a crash may lose the last liveness writes, never
  corrupts, and the next durable commit's flush covers them).
"""

from __future__ import annotations

import functools
import logging
import queue
import re
import select
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import Dumper, Loader

from airig.brain import timing
from airig.brain.store import migrations
from airig.brain.store.db import Database
from airig.brain.store.pg_writers import SHARED_WRITERS, Writers

log = logging.getLogger("airig.brain.store")
# pg_advisory_xact_lock's key for "an exclusive write transaction of the brain's store":
# the one-writer rule across brains for the writes that keep it (the module's docstring;
# UPGRADE_LOCK is the schema's; these must differ).
WRITE_LOCK = 0x61697269675F7772  # "airig_wr"
# pg_try_advisory_lock's key for "this brain runs the timers": a session lock, held while
# its connection lives, so a killed brain's is released by the server and the next brain's
# pass takes it.
TIMERS_LOCK = 0x61697269675F746D  # "airig_tm"
# LISTEN/NOTIFY channel: "a commit made work READY". A brain's long-polling claims wait on
# its own condition; a plan submitted through another brain wakes them through this.
WORK_CHANNEL = "airig_work"
CONNECT_TIMEOUT_S = 10  # a server that drops packets is an error after this, not a hang
POOL = 4  # connections for reads, as db.READERS: a 2-core brain's reads side by side
_INT8 = psycopg.postgres.types["int8"].oid


class Row:
    """One result row as ``sqlite3.Row`` reads: by index, by column name (any case),
    ``keys()``, iteration over the values (so ``dict(row)`` and ``tuple(row)`` work)."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: dict[str, int], values: Sequence[Any]) -> None:
        self._names = names
        self._values = tuple(values)

    def __getitem__(self, key: int | str | slice) -> Any:
        if isinstance(key, str):
            index = self._names.get(key)
            if index is None:
                index = self._names.get(key.lower())
            if index is None:
                raise IndexError(f"No item with that key: {key!r}")  # sqlite3.Row's words
            return self._values[index]
        return self._values[key]

    def keys(self) -> list[str]:
        return [name for name, index in self._names.items() if name == self._order[index]]

    @property
    def _order(self) -> list[str]:
        order = [""] * len(self._values)
        for name, index in self._names.items():
            if not order[index]:
                order[index] = name
        return order

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Row):
            return self._values == other._values and self.keys() == other.keys()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._order, self._values, strict=True))!r})"


def _row_factory(cursor: psycopg.Cursor[Any]) -> Any:
    # The result's column names straight from libpq, not ``cursor.description``: that
    # builds a Column object per column per statement (a claim reads `SELECT * FROM tasks`
    # twice), a fifth of a claim's time in the brain on PostgreSQL.
    result = cursor.pgresult
    fields = result.nfields if result is not None else 0
    names = _names(tuple(result.fname(i) or b"" for i in range(fields)) if result else ())

    def make(values: Sequence[Any]) -> Row:
        return Row(names, values)

    return make


@functools.lru_cache(maxsize=1024)  # one entry per distinct column list the store reads
def _names(fields: tuple[bytes, ...]) -> dict[str, int]:
    """Column name (as written, and lower-cased) → index; the first of two same-named
    columns, as sqlite3.Row. Shared by every row of every result with these columns:
    nothing writes to it."""
    names: dict[str, int] = {}
    for index, raw in enumerate(fields):
        name = raw.decode("utf-8", "replace")
        names.setdefault(name, index)
        names.setdefault(name.lower(), index)
    return names


class _BoolAsInt(Dumper):
    """A Python bool as 0/1: the store's flags are integers on both engines (SQLite has no
    boolean), so ``WHERE sensitive = ?`` with True compares integers, as on SQLite."""

    oid = _INT8

    def dump(self, obj: bool) -> bytes:
        return b"1" if obj else b"0"


class _Number(Loader):
    """NUMERIC as int or float: PostgreSQL's SUM of integers and AVG are NUMERIC
    (``decimal.Decimal`` in Python, which json cannot write); SQLite gives int or float."""

    def load(self, data: Any) -> int | float:
        text = bytes(data)
        if b"." in text or b"e" in text.lower() or text in (b"NaN", b"Infinity", b"-Infinity"):
            return float(text)
        return int(text)


_TOKEN = re.compile(
    r"""'(?:[^']|'')*'"""  # a string literal
    r'''|"(?:[^"]|"")*"'''  # a quoted name
    r"|--[^\n]*"  # a comment
    r"|::"  # PostgreSQL's cast, never a :name placeholder
    r"|\?(\d+)"  # ?NNN
    r"|\?"  # ?
    r"|:([A-Za-z_]\w*)"  # :name
    r"|%"
)


@functools.lru_cache(maxsize=2048)
def translate(sql: str) -> tuple[str, str]:
    """sqlite3's placeholders as psycopg's: ``?`` is ``%s``, ``?N`` and ``:name`` are
    ``%(pN)s`` and ``%(name)s``, a literal ``%`` is ``%%``. Also the style the query
    takes: "" (no placeholder), "qmark", "numbered" or "named". A query mixing two is
    refused, as sqlite3 refuses a mismatch."""
    styles: set[str] = set()

    def swap(match: re.Match[str]) -> str:
        token = match.group(0)
        if token[0] in "'\"-":
            return token.replace("%", "%%")
        if token == "::":
            return token
        if token == "%":
            return "%%"
        if match.group(1) is not None:
            styles.add("numbered")
            return f"%(p{int(match.group(1))})s"
        if token == "?":
            styles.add("qmark")
            return "%s"
        styles.add("named")
        return f"%({match.group(2)})s"

    converted = _TOKEN.sub(swap, sql)
    if len(styles) > 1:
        raise sqlite3.ProgrammingError(f"a query mixes placeholder styles {sorted(styles)}")
    return converted, styles.pop() if styles else ""


def _params(style: str, params: Any) -> Any:
    if style == "":
        if params:
            raise sqlite3.ProgrammingError(
                f"the query has no placeholder but {len(params)} parameters were given"
            )
        return None
    if style == "numbered":
        if isinstance(params, Mapping):
            raise sqlite3.ProgrammingError("?N placeholders take a sequence of parameters")
        return {f"p{index}": value for index, value in enumerate(params, 1)}
    if style == "named" and not isinstance(params, Mapping):
        raise sqlite3.ProgrammingError(":name placeholders take a mapping of parameters")
    if style == "qmark" and isinstance(params, Mapping):
        raise sqlite3.ProgrammingError("? placeholders take a sequence of parameters")
    return params


# psycopg's error classes as the sqlite3 ones the store's handlers catch: a constraint is an
# IntegrityError (a plan id taken), a full disk, a lost server or a lock an OperationalError
# (StoreUnwritable, 503), anything else the server refused a DatabaseError.
def _as_sqlite(exc: psycopg.Error) -> sqlite3.Error:
    words = " ".join(str(exc).split())[:400]
    if isinstance(exc, psycopg.IntegrityError):
        kind: type[sqlite3.Error] = sqlite3.IntegrityError
    elif isinstance(
        exc, psycopg.OperationalError | pg_errors.DiskFull | pg_errors.ReadOnlySqlTransaction
    ):
        kind = sqlite3.OperationalError
    elif isinstance(exc, psycopg.ProgrammingError | psycopg.DataError):
        kind = (
            sqlite3.ProgrammingError
            if isinstance(exc, psycopg.ProgrammingError)
            else sqlite3.DatabaseError
        )
    else:
        kind = sqlite3.DatabaseError
    converted = kind(f"PostgreSQL: {words}")
    # the server's SQLSTATE, as sqlite3 keeps sqlite_errorcode: unwritable.py tells a full
    # disk (53100) or a server refusing writes (25006) from any other failure by it
    converted.sqlstate = exc.sqlstate  # type: ignore[attr-defined]
    return converted


class PgCursor:
    """What ``execute`` returns: the rows, ``rowcount``, ``description``."""

    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def lastrowid(self) -> None:
        # PostgreSQL has no rowid: an INSERT that needs its id says RETURNING id.
        raise sqlite3.NotSupportedError("lastrowid on PostgreSQL: use INSERT ... RETURNING id")

    def fetchone(self) -> Any:
        return self._wrap(self._cursor.fetchone)

    def fetchall(self) -> list[Any]:
        return cast(list[Any], self._wrap(self._cursor.fetchall))

    def fetchmany(self, size: int = 1) -> list[Any]:
        return cast(list[Any], self._wrap(lambda: self._cursor.fetchmany(size)))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    @staticmethod
    def _wrap(read: Any) -> Any:
        try:
            return read()
        except psycopg.ProgrammingError as exc:
            if "no result" in str(exc) or "no results" in str(exc):
                return None if read.__name__ == "fetchone" else []
            raise _as_sqlite(exc) from exc
        except psycopg.Error as exc:
            raise _as_sqlite(exc) from exc


class PgConnection:
    """One psycopg connection in autocommit, spoken to as a sqlite3 connection is: the
    store's BEGIN/COMMIT are its own statements, as with ``isolation_level=None``."""

    dialect = "postgresql"
    locks_rows = False  # the write connection's: its transactions lock what they change

    def __init__(self, conninfo: str, *, read_only: bool = False) -> None:
        try:
            self._conn = psycopg.connect(
                conninfo, autocommit=True, row_factory=_row_factory,
                connect_timeout=CONNECT_TIMEOUT_S,
            )  # fmt: skip
        except psycopg.Error as exc:
            raise _as_sqlite(exc) from exc
        self._conn.adapters.register_dumper(bool, _BoolAsInt)
        self._conn.adapters.register_loader("numeric", _Number)
        if read_only:  # a write on a read connection is a bug: refused, as query_only
            self._conn.execute("SET default_transaction_read_only = on")

    def execute(self, sql: str, params: Any = ()) -> PgCursor:
        text, style = translate(sql)
        cursor = self._conn.cursor()
        try:
            cursor.execute(cast(Any, text), _params(style, params))
        except psycopg.Error as exc:
            raise _as_sqlite(exc) from exc
        return PgCursor(cursor)

    def executemany(self, sql: str, seq: Any) -> PgCursor:
        text, style = translate(sql)
        cursor = self._conn.cursor()
        rows = [_params(style, params) for params in seq]
        if not rows:
            return PgCursor(cursor)
        try:
            cursor.executemany(cast(Any, text), rows)
        except psycopg.Error as exc:
            raise _as_sqlite(exc) from exc
        return PgCursor(cursor)

    def close(self) -> None:
        self._conn.close()

    @property
    def in_transaction(self) -> bool:
        return self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    @property
    def lost(self) -> bool:
        """Closed, or dropped by the server or the network: no statement can run on it."""
        return self._conn.closed or self._conn.broken


def _conninfo(parsed: Any) -> str:
    """libpq's connection string from the URL's parts, each quoted by psycopg: a URL
    re-rendered as text holds a decoded password bare (a space, which libpq refuses, then
    quoting the password in its refusal)."""
    from psycopg.conninfo import make_conninfo

    parts: dict[str, Any] = {
        "host": parsed.host, "port": parsed.port, "user": parsed.username,
        "password": parsed.password, "dbname": parsed.database,
    }  # fmt: skip
    for key, value in parsed.query.items():  # ?host=/socket/folder, sslmode=...
        parts[key] = value[-1] if isinstance(value, tuple) else value
    return make_conninfo(**{k: v for k, v in parts.items() if v is not None})


class PgDatabase(Database):
    """``db.Database`` on PostgreSQL (the module's docstring says how writes stay serial):
    every method of it, none of its SQLite connections."""

    dialect = "postgresql"

    # no super().__init__: its files are SQLite's
    def __init__(self, url: str, *, writers: int = SHARED_WRITERS) -> None:  # noqa: D107
        # Before the first connection, as on SQLite: made or upgraded, a newer one refused.
        migrations.upgrade(url=url)
        # after upgrade(): it quiets Alembic's loggers before Alembic is first imported
        from airig.brain.store.migrations import postgres as pg_schema

        parsed = pg_schema.parse(url)
        self.where = pg_schema.masked(parsed)
        self._pginfo = _conninfo(parsed)
        self._lock = threading.RLock()
        self._local = threading.local()
        self._pg = PgConnection(self._pginfo)
        self._pg.locks_rows = True  # dialect.for_update: other brains write beside it
        # Liveness writes (a renewal, a heartbeat: shared, not durable) on a connection of
        # their own: they waited behind the group commit's batches of claims and reports
        # on the one above, past their leases at 500 workers. Row-locked like every shared
        # write, so beside this brain's batches as beside another brain's.
        self._side_lock = threading.Lock()
        self._pg_side = PgConnection(self._pginfo)
        self._pg_side.locks_rows = True
        # Shared durable writes (claims, reports) on connections of their own, ``writers``
        # batches at once (pg_writers.py): on the one above they waited behind exclusive
        # batches, which wait for other brains' store-wide lock.
        self.shared_writers = writers  # the group commit's leaders of shared batches
        self._writers = Writers[PgConnection](lambda: PgConnection(self._pginfo), writers)
        self._pg_lookup = PgConnection(self._pginfo, read_only=True)
        self._pg_lookup_lock = threading.Lock()
        self._pg_readers: queue.SimpleQueue[PgConnection] = queue.SimpleQueue()
        self._pg_announce_lock = threading.Lock()
        self._pg_announcer: PgConnection | None = None
        self._pg_lead_lock = threading.Lock()
        self._pg_leader: PgConnection | None = None  # holds TIMERS_LOCK while it lives
        self._pg_leading = False
        self._pg_made = 0  # read connections opened so far, up to POOL: each is a server process
        self._pg_making = threading.Lock()

    def leads(self) -> bool:
        """Whether this brain runs the store's timers now: it holds ``TIMERS_LOCK`` on a
        connection of its own (checked alive each time: a lost connection lost the lock),
        or takes it when no brain holds it. One brain of those sharing the database does,
        at any time; another takes over within one pass of its holder's death."""
        with self._pg_lead_lock:
            conn = self._pg_leader
            if conn is not None and self._pg_leading:
                try:
                    conn.execute("SELECT 1").fetchone()
                    return True
                except sqlite3.Error:
                    conn.close()
                    self._pg_leader = conn = None
                    self._pg_leading = False
                    log.warning("this brain lost the store's timers lock (its connection)")
            try:
                if conn is None:
                    self._pg_leader = conn = PgConnection(self._pginfo)
                got = conn.execute("SELECT pg_try_advisory_lock(?)", (TIMERS_LOCK,)).fetchone()
            except sqlite3.Error:
                if self._pg_leader is not None:
                    self._pg_leader.close()
                self._pg_leader = None
                return False
            self._pg_leading = bool(got[0])
            if self._pg_leading:
                log.info("this brain runs the store's timers", extra={"store": self.where})
            return self._pg_leading

    def announce_work(self) -> None:
        """Tell every brain on the database that a commit made work READY (their waiting
        claims look again). A lost NOTIFY costs one claim wait, never a task."""
        with self._pg_announce_lock:
            try:
                if self._pg_announcer is None:
                    self._pg_announcer = PgConnection(self._pginfo)
                self._pg_announcer.execute("SELECT pg_notify(?, '')", (WORK_CHANNEL,))
            except sqlite3.Error:
                if self._pg_announcer is not None:
                    self._pg_announcer.close()
                self._pg_announcer = None

    def listen_work(self, woken: Callable[[], None], stop: threading.Event) -> None:
        """Call ``woken`` whenever any brain announces work, until ``stop`` is set: a
        thread of its own, on a connection of its own (LISTEN), reconnecting after a
        lost one."""
        threading.Thread(
            target=self._listen, args=(woken, stop), name="work-listener", daemon=True
        ).start()

    def _listen(self, woken: Callable[[], None], stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                conn = psycopg.connect(
                    self._pginfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                )
            except psycopg.Error:
                stop.wait(1.0)
                continue
            try:
                conn.execute(f"LISTEN {WORK_CHANNEL}")
                raw = conn.pgconn
                while not stop.is_set():
                    # libpq's own pattern: wait for the socket, read, drain what arrived
                    readable, _, _ = select.select([conn.fileno()], [], [], 0.5)
                    if not readable:
                        continue
                    raw.consume_input()
                    heard = False
                    while raw.notifies() is not None:
                        heard = True
                    if heard:
                        woken()
            except (psycopg.Error, OSError):
                stop.wait(1.0)  # the server went away: listen again once it is back
            finally:
                conn.close()

    def file_bytes(self) -> tuple[int, int]:
        """The database's size as the server counts it (no WAL of its own to add)."""
        with self.read() as conn:
            return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]), 0

    @contextmanager
    def tx(
        self, durable: bool = True, timed: bool = True, exclusive: bool = True
    ) -> Iterator[sqlite3.Connection]:
        """One write transaction, rolled back whole on any exception. ``exclusive``: serial
        with every other brain's exclusive ones (the module's docstring says which are
        not)."""
        with timing.store_call() if timed else nullcontext() as clock:
            asked = time.perf_counter()
            with self._write_connection(durable, exclusive) as conn:
                conn.execute("BEGIN")
                try:
                    if exclusive:
                        conn.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
                    held = time.perf_counter()
                    if not durable:
                        conn.execute("SET LOCAL synchronous_commit = off")
                    self._local.writing = getattr(self._local, "writing", 0) + 1
                    self._local.conn = conn  # what this thread's reads see meanwhile
                    try:
                        yield cast(sqlite3.Connection, conn)
                    finally:
                        self._local.writing -= 1
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                committing = time.perf_counter()
                conn.execute("COMMIT")
                if clock is not None:
                    clock.spent["commit"] += time.perf_counter() - committing
                    clock.spent["statements"] += committing - held
                    clock.spent["store_wait"] += held - asked

    @contextmanager
    def _write_connection(self, durable: bool, exclusive: bool) -> Iterator[PgConnection]:
        """The connection a write transaction runs on: an exclusive one on the store-wide
        lock's (one at a time in this brain too), a shared liveness write on its own, a
        shared durable batch on whichever of the writers is free."""
        if exclusive:
            with self._lock:
                yield self._pg
        elif not durable:
            with self._side_lock:
                yield self._pg_side
        else:
            with self._writers.take() as conn:
                yield conn

    def _pg_reader(self) -> PgConnection:
        """An idle read connection; a new one while fewer than POOL are open."""
        try:
            return self._pg_readers.get_nowait()
        except queue.Empty:
            pass
        with self._pg_making:
            if self._pg_made < POOL:
                self._pg_made += 1
                try:
                    return PgConnection(self._pginfo, read_only=True)
                except BaseException:
                    self._pg_made -= 1
                    raise
        return self._pg_readers.get()

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One snapshot (REPEATABLE READ) of the last commit; inside this thread's own
        write transaction, that transaction's connection."""
        if getattr(self._local, "writing", 0):
            yield cast(sqlite3.Connection, self._local.conn)
            return
        with timing.store_call() as clock:
            asked = time.perf_counter()
            conn = self._pg_reader()
            held = time.perf_counter()
            try:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                try:
                    yield cast(sqlite3.Connection, conn)
                finally:
                    conn.execute("COMMIT")
            finally:
                self._pg_readers.put(conn)
                if clock is not None:
                    clock.spent["store_wait"] += held - asked
                    clock.spent["statements"] += time.perf_counter() - held

    @contextmanager
    def writer(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield cast(sqlite3.Connection, self._pg)

    @contextmanager
    def lookup(self) -> Iterator[sqlite3.Connection]:
        with self._pg_lookup_lock:
            yield cast(sqlite3.Connection, self._pg_lookup)

    def close(self) -> None:
        with self._pg_announce_lock:
            if self._pg_announcer is not None:
                self._pg_announcer.close()
                self._pg_announcer = None
        with self._pg_lead_lock:  # the timers lock goes with its connection
            if self._pg_leader is not None:
                self._pg_leader.close()
                self._pg_leader = None
                self._pg_leading = False
        with self._pg_lookup_lock:
            self._pg_lookup.close()
        with self._pg_making:
            for _ in range(self._pg_made):  # waits for reads under way to end
                self._pg_readers.get().close()
            self._pg_made = 0
        self._writers.close()
        with self._side_lock:
            self._pg_side.close()
        with self._lock:
            self._pg.close()
