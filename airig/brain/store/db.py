"""SQLite in WAL mode: one connection, one writer, explicit transactions.

The brain is the only process that opens the database. A single connection guarded by a
lock makes every transaction serial (SQLite allows one writer anyway) and keeps
read-modify-write sequences such as claims atomic without retry loops on SQLITE_BUSY.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from airig.brain import timing
from airig.brain.store import migrations

# Read connections: reads run beside each other and beside the writer (WAL). A handful
# serves a 2-core host; a read waits only when all are busy.
READERS = 4


def ping(conn: sqlite3.Connection) -> None:
    """One trivial read: the store answers (``/health``)."""
    conn.execute("SELECT 1").fetchone()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class Database:
    """The brain's store handle. Use ``tx()`` for writes and ``read()`` for reads."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Before the first connection: a store a newer brain made is refused as it is, and
        # an older one is brought to this code's revision (schema.py, migrations/).
        migrations.upgrade(path)
        self.path = path
        self._lock = threading.RLock()
        self._local = threading.local()  # this thread's open transactions (reads see them)
        self._conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed completion must survive a power cut, or it could run twice.
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA busy_timeout=5000")
        # A second connection for the event loop's token lookups: in WAL mode it reads the
        # last commit without waiting for the writer's lock (a commit waits on fsync).
        self._lookup = self._reader()
        self._lookup_lock = threading.Lock()
        # Reads on connections of their own, for the same reason: a dashboard's list of 500
        # workers held the one connection for 3-12 ms, and every claim and heartbeat queued
        # behind it (benchmarks/fleet.py, the phase table: their tail was store_wait).
        self._readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._reader_count = READERS
        for _ in range(READERS):
            self._readers.put(self._reader())

    def _reader(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA query_only=1")  # a write on a read connection is a bug: refused
        conn.execute("PRAGMA busy_timeout=5000")
        return conn

    @contextmanager
    def tx(
        self, durable: bool = True, timed: bool = True, exclusive: bool = True
    ) -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back whole on any exception.

        ``exclusive`` is PostgreSQL's (``pg.py``): SQLite's writes are all one at a time.

        ``durable=False`` commits without waiting for the disk (synchronous=NORMAL for this
        commit only): for liveness facts (heartbeats, lease renewals) that a power cut may
        lose harmlessly. The next durable commit's fsync covers them (one WAL file, in
        order), and a crash never corrupts the store. benchmarks/fleet.py: a commit costs
        an fsync of 4-8 ms on a virtual disk, and at 500 workers these were half of them.
        """
        # timed=False: a group commit's batch, whose writers each count their own share.
        with timing.store_call() if timed else nullcontext() as clock:
            asked = time.perf_counter()
            with self._lock:
                held = time.perf_counter()
                if not durable:
                    self._conn.execute("PRAGMA synchronous=NORMAL")
                try:
                    self._conn.execute("BEGIN IMMEDIATE")
                    self._local.writing = getattr(self._local, "writing", 0) + 1
                    try:
                        yield self._conn
                    except BaseException:
                        self._conn.execute("ROLLBACK")
                        raise
                    finally:
                        self._local.writing -= 1
                    committing = time.perf_counter()
                    self._conn.execute("COMMIT")
                    if clock is not None:
                        clock.spent["commit"] += time.perf_counter() - committing
                        clock.spent["statements"] += committing - held
                finally:
                    if not durable:
                        self._conn.execute("PRAGMA synchronous=FULL")
                if clock is not None:
                    clock.spent["store_wait"] += held - asked

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot of the last commit, on a read connection: it waits for no
        writer and holds none up (WAL). Inside this thread's own transaction it is that
        transaction's connection, which sees its uncommitted writes."""
        if getattr(self._local, "writing", 0):
            yield self._conn
            return
        with timing.store_call() as clock:
            asked = time.perf_counter()
            conn = self._readers.get()
            held = time.perf_counter()
            try:
                conn.execute("BEGIN")  # one snapshot for every statement of this read
                try:
                    yield conn
                finally:
                    conn.execute("COMMIT")
            finally:
                self._readers.put(conn)
                if clock is not None:
                    clock.spent["store_wait"] += held - asked
                    clock.spent["statements"] += time.perf_counter() - held

    @contextmanager
    def writer(self) -> Iterator[sqlite3.Connection]:
        """The write connection outside any transaction, for its pragmas (a benchmark's
        synchronous=OFF); writes go through ``tx()``."""
        with self._lock:
            yield self._conn

    @contextmanager
    def lookup(self) -> Iterator[sqlite3.Connection]:
        """Short reads of committed rows that must not wait for a writer (auth)."""
        with self._lookup_lock:
            yield self._lookup

    dialect = "sqlite"  # dialect.of(): the SQL this store's connections speak
    # Group-commit batches at once (groupcommit.py): SQLite has one writer, so one batch,
    # shared and exclusive writes together; PostgreSQL's shared ones have their own (pg.py).
    shared_writers = 1

    def announce_work(self) -> None:
        """Other brains' waiting claims woken (PostgreSQL): a SQLite store has one brain."""

    def listen_work(self, woken: Callable[[], None], stop: threading.Event) -> None:
        """``woken`` on other brains' work (PostgreSQL); nothing to hear on SQLite."""

    def leads(self) -> bool:
        """Whether this brain runs the store's timers (reaper, probes, retention, alerts,
        the external tier's calls): a SQLite store has one brain, so always."""
        return True

    def file_bytes(self) -> tuple[int, int]:
        """What the store takes on disk: the database file's bytes and its WAL's."""
        return _size(self.path), _size(self.path.with_name(self.path.name + "-wal"))

    def close(self) -> None:
        with self._lookup_lock:
            self._lookup.close()
        for _ in range(self._reader_count):  # waits for reads under way to end
            self._readers.get().close()
        with self._lock:
            self._conn.close()
