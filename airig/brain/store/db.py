"""SQLite in WAL mode: one connection, one writer, explicit transactions.

The brain is the only process that opens the database. A single connection guarded by a
lock makes every transaction serial (SQLite allows one writer anyway) and keeps
read-modify-write sequences such as claims atomic without retry loops on SQLITE_BUSY.
"""

from __future__ import annotations

import queue
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from airig.brain import timing
from airig.brain.store import backups

SCHEMA = """
CREATE TABLE IF NOT EXISTS plans (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    body_hash TEXT NOT NULL,
    submitted_by TEXT NOT NULL,
    created_at REAL NOT NULL,
    fixes_json TEXT NOT NULL DEFAULT '[]',
    cancelled INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    plan_id TEXT NOT NULL REFERENCES plans(id),
    key TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    task_class TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    model TEXT,
    priority INTEGER NOT NULL,
    trusted INTEGER NOT NULL,
    sensitive INTEGER NOT NULL,
    timeout_s REAL NOT NULL,
    retry_count INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    task_errors INTEGER NOT NULL DEFAULT 0,
    infra_errors INTEGER NOT NULL DEFAULT 0,
    lease_id TEXT,
    worker_id TEXT,
    lease_expires_at REAL,
    attempt_deadline REAL,
    created_at REAL NOT NULL,
    ready_at REAL,
    not_before REAL,
    started_at REAL,
    finished_at REAL,
    output_json TEXT,
    output_file TEXT,
    files_json TEXT NOT NULL DEFAULT '[]',
    metrics_json TEXT NOT NULL DEFAULT '{}',
    result_hash TEXT,
    error_type TEXT,
    error TEXT,
    reason TEXT,
    tainted_output INTEGER NOT NULL DEFAULT 0,
    origin TEXT,
    depth INTEGER NOT NULL DEFAULT 0,
    escalate TEXT NOT NULL DEFAULT 'never',
    allow_external INTEGER NOT NULL DEFAULT 0,
    context_tokens INTEGER,
    reviewed INTEGER NOT NULL DEFAULT 0,
    fanout_group TEXT,
    fanout_index INTEGER,
    fingerprint TEXT,
    reused_from TEXT,
    written_json TEXT,
    UNIQUE (plan_id, key)
);
CREATE TABLE IF NOT EXISTS deps (
    task_id INTEGER NOT NULL REFERENCES tasks(id),
    depends_on INTEGER NOT NULL REFERENCES tasks(id),
    PRIMARY KEY (task_id, depends_on)
);
CREATE INDEX IF NOT EXISTS deps_upstream ON deps(depends_on);
CREATE TABLE IF NOT EXISTS workers (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL,
    classes_json TEXT NOT NULL,
    gpu_index INTEGER,
    gpus_json TEXT NOT NULL DEFAULT '[]',
    models_json TEXT NOT NULL DEFAULT '[]',
    registered_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL,
    host TEXT NOT NULL DEFAULT '',
    registered_by TEXT,
    last_claim_at REAL
);
CREATE TABLE IF NOT EXISTS tokens (
    token_hash TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at REAL NOT NULL,
    id TEXT,
    revoked_at REAL,
    trust TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    event_type TEXT NOT NULL,
    plan_id TEXT,
    task_id INTEGER,
    body_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_plan ON events(plan_id);
-- Goals the brain's model drafts into plans (airig/brain/planner/goals.py). plan_id and
-- drafting_plan_id are plain text, no foreign key: retention deletes finished plans.
CREATE TABLE IF NOT EXISTS goals (
    id TEXT PRIMARY KEY,
    goal TEXT NOT NULL,
    inputs_dir TEXT,
    state TEXT NOT NULL,
    draft_json TEXT,
    errors_json TEXT NOT NULL DEFAULT '[]',
    plan_id TEXT,
    drafting_plan_id TEXT,
    submitted_by TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL
);
CREATE INDEX IF NOT EXISTS workers_token ON workers(token_hash);
-- Per-plan counts (the plans list, every dashboard poll) read this index alone instead
-- of every task row of the plan (benchmarks/dashboard.py: 252 ms at 100k tasks before).
CREATE INDEX IF NOT EXISTS tasks_plan_state ON tasks(plan_id, state);
-- The queue view groups live tasks by class and model with their oldest ready time:
-- covered by this index, no task row is read.
CREATE INDEX IF NOT EXISTS tasks_queue ON tasks(state, task_class, model, ready_at);
-- Retention (retention.py) walks plans created before its cutoff, oldest first, and
-- the plans list reads the newest: both are ranges of this index, not a sort of all plans.
CREATE INDEX IF NOT EXISTS plans_created ON plans(created_at, id);
-- An input file's sha256 by what its stat says (plans/reuse.py): a second submit of an
-- unchanged folder reads none of its files again. Any change of size, times or inode
-- (a file replaced, rewritten in place, even with its mtime set back) misses it.
CREATE TABLE IF NOT EXISTS input_hashes (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    seen_at REAL NOT NULL
);
"""
# Columns added after the first release, as (table, column, declaration). A database made
# before them gains them when it is opened: an upgraded brain keeps its plans, workers and
# tokens. New columns go here (and in SCHEMA), never by editing a released column.
ADDED_COLUMNS = (
    ("workers", "host", "TEXT NOT NULL DEFAULT ''"),
    # tokens.id of the join token a worker registered with (NULL: the bootstrap token)
    ("workers", "registered_by", "TEXT"),
    ("tokens", "id", "TEXT"),
    ("tokens", "revoked_at", "REAL"),
    # a join token's trust level (airig/brain/store/trust.py); NULL for other scopes
    ("tokens", "trust", "TEXT"),
    # the output may not be trusted: an untrusted rig made it, or the task ran untrusted
    ("tasks", "tainted_output", "INTEGER NOT NULL DEFAULT 0"),
    # the external tier (airig/brain/escalation/): never | on_failure | always, whether a
    # sensitive task may be sent, and its prompt's size in tokens once estimated (NULL: not yet)
    ("tasks", "escalate", "TEXT NOT NULL DEFAULT 'never'"),
    ("tasks", "allow_external", "INTEGER NOT NULL DEFAULT 0"),
    ("tasks", "context_tokens", "INTEGER"),
    # the brain's model has judged its first failure (airig/brain/escalation/review.py)
    ("tasks", "reviewed", "INTEGER NOT NULL DEFAULT 0"),
    # where a task came from (NULL: its plan as submitted; "plan:<key>" / "external:<key>":
    # added by that task, airig/brain/planner/grow.py) and how many growths deep it is
    ("tasks", "origin", "TEXT"),
    ("tasks", "depth", "INTEGER NOT NULL DEFAULT 0"),
    # a fan-out item's task: its group's key and the item's index (plans/fanout.py)
    ("tasks", "fanout_group", "TEXT"),
    ("tasks", "fanout_index", "INTEGER"),
    # a glob item's fingerprint (its input's sha256 and its rendered template tasks), the
    # task that really ran a reused one ("<plan>/<key>"), and the files on the data volume
    # it wrote with their size and mtime when it succeeded (plans/reuse.py)
    ("tasks", "fingerprint", "TEXT"),
    ("tasks", "reused_from", "TEXT"),
    ("tasks", "written_json", "TEXT"),
    # when the worker last leased a task (NULL: never): triage's "registered, idle, work waits"
    ("workers", "last_claim_at", "REAL"),
    # who may act on a plan or goal besides admin: auth.owner_of of the submitting token
    ("plans", "owner", "TEXT"),
    ("goals", "owner", "TEXT"),
    # who drafted a goal's plan: {"worker", "rig", "trusted"} (planner/goals.py)
    ("goals", "draft_origin", "TEXT"),
)
# Indexes on added columns: created after the columns exist.
ADDED_INDEXES = (
    "CREATE UNIQUE INDEX IF NOT EXISTS tokens_id ON tokens(id)",
    "CREATE INDEX IF NOT EXISTS workers_registered_by ON workers(registered_by)",
    # A claim with a claim_id looks up its earlier leases (queue.claim_leases) by lease id:
    # without it every live lease was read per claim (benchmarks/fleet.py, 500 workers).
    "CREATE INDEX IF NOT EXISTS tasks_lease ON tasks(lease_id)",
    # a group's items, for its progress and its end (store/fanout.py)
    "CREATE INDEX IF NOT EXISTS tasks_fanout ON tasks(plan_id, fanout_group, state)",
    # the newest item of a fingerprint, for a submit that may reuse it (store/reuse.py)
    "CREATE INDEX IF NOT EXISTS tasks_fingerprint ON tasks(fingerprint)"
    " WHERE fingerprint IS NOT NULL",
)


# Read connections: reads run beside each other and beside the writer (WAL). A handful
# serves a 2-core host; a read waits only when all are busy.
READERS = 4


def new_token_id() -> str:
    """A token's public handle (listed, used to revoke it); unrelated to the token."""
    return secrets.token_hex(6)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring a database made by an older brain up to SCHEMA (idempotent)."""
    for table, column, declaration in ADDED_COLUMNS:
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    # Tokens stored before ids existed get one, so they can be listed and revoked.
    for (rowid,) in conn.execute("SELECT rowid FROM tokens WHERE id IS NULL").fetchall():
        conn.execute("UPDATE tokens SET id = ? WHERE rowid = ?", (new_token_id(), rowid))
    # Join tokens made before trust levels existed get the default, untrusted.
    conn.execute("UPDATE tokens SET trust = 'untrusted' WHERE scope = 'join' AND trust IS NULL")
    for statement in ADDED_INDEXES:  # one by one: executescript would commit the transaction
        conn.execute(statement)
    # tasks_queue (state, task_class, model, ready_at) serves every query this one did.
    conn.execute("DROP INDEX IF EXISTS tasks_state")


class Database:
    """The brain's store handle. Use ``tx()`` for writes and ``read()`` for reads."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
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
        self._conn.executescript(SCHEMA)
        self._conn.execute(backups.SCHEMA)
        with self.tx() as conn:
            migrate(conn)
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
    def tx(self, durable: bool = True, timed: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back whole on any exception.

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

    def close(self) -> None:
        with self._lookup_lock:
            self._lookup.close()
        for _ in range(self._reader_count):  # waits for reads under way to end
            self._readers.get().close()
        with self._lock:
            self._conn.close()
