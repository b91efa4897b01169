"""The brain store's schema, declared here only: every table and index of ``brain.db``.

- ``TABLES`` and ``BACKUPS``: made when the store opens (``Database``);
- ``ADDED_COLUMNS`` and ``ADDED_INDEXES``: what came after the first release; ``migrate``
  adds them to a store an older brain made (idempotent), then a new store is the same;
- ``ROOM_TABLES``: the tables and indexes of the brain's rooms (the ready heads of
  ``scheduling/candidates.py``, the ``escalations`` of ``escalation/ledger.py``, the
  ``alerts`` of ``ops/alerts.py``), made by ``Brain`` after ``migrate`` (their partial
  indexes need its columns).

The search index (``<BRAIN_DATA_DIR>/index/search.sqlite``) is a database file of its own
and keeps its schema beside the code that opens it (``index_file.py``, ``vectors.py``).
``tests/unit/brain/test_store_schema.py`` checks that a new store is the one the code
before this module made, and that an early brain's store opens and migrates to it.
"""

from __future__ import annotations

import secrets
import sqlite3

TABLES = """
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
# tokens. New columns go here (and in TABLES), never by editing a released column.
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


BACKUPS = """CREATE TABLE IF NOT EXISTS backups (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at REAL NOT NULL,
    archive TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    models INTEGER NOT NULL DEFAULT 0
)"""

READY_HEADS = """CREATE INDEX IF NOT EXISTS tasks_ready_heads
           ON tasks(state, task_class, model, priority, ready_at, id)"""

ESCALATIONS = (
    """CREATE TABLE IF NOT EXISTS escalations (
        id TEXT PRIMARY KEY,
        task_id INTEGER NOT NULL,
        plan_id TEXT NOT NULL,
        task_key TEXT NOT NULL,
        why TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_try_at REAL,
        created_at REAL NOT NULL,
        sent_at REAL,
        answered_at REAL,
        reask INTEGER NOT NULL DEFAULT 0,
        request_json TEXT,
        provider TEXT,
        model TEXT,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        estimated_cost REAL NOT NULL DEFAULT 0,
        cost REAL NOT NULL DEFAULT 0,
        outcome TEXT,
        subtasks_json TEXT,
        error TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS escalations_due ON escalations(state, next_try_at)",
    "CREATE INDEX IF NOT EXISTS escalations_task ON escalations(task_id)",
    "CREATE INDEX IF NOT EXISTS escalations_answered ON escalations(answered_at)",
    "CREATE INDEX IF NOT EXISTS escalations_sent ON escalations(sent_at)",
    # READY tasks the escalation criteria still have to look at: a claim finds them
    # through this partial index without reading the queue (escalations.DUE_WHERE).
    """CREATE INDEX IF NOT EXISTS tasks_escalation_due ON tasks(state)
       WHERE escalate = 'always' OR (escalate = 'on_failure'
             AND (context_tokens IS NULL OR task_errors >= 2))""",
    # Tasks whose first failure the brain's model has yet to judge (escalations.REVIEW_DUE).
    """CREATE INDEX IF NOT EXISTS tasks_review_due ON tasks(state)
       WHERE escalate = 'on_failure' AND reviewed = 0 AND task_errors = 1""",
)
ALERTS = (
    """CREATE TABLE IF NOT EXISTS alerts (
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        fired_at REAL NOT NULL,
        message TEXT NOT NULL,
        PRIMARY KEY (kind, subject)
    )""",
    # the failure window reads recent events only
    "CREATE INDEX IF NOT EXISTS events_ts ON events(ts)",
)
# Made by ``Brain`` after ``migrate``, in this order.
ROOM_TABLES = (READY_HEADS, *ESCALATIONS, *ALERTS)


def new_token_id() -> str:
    """A token's public handle (listed, used to revoke it); unrelated to the token."""
    return secrets.token_hex(6)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring a database made by an older brain up to TABLES (idempotent)."""
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


def create(conn: sqlite3.Connection) -> None:
    """The tables of a store that lacks them (outside a transaction: executescript commits)."""
    conn.executescript(TABLES)
    conn.execute(BACKUPS)


def create_room_tables(conn: sqlite3.Connection) -> None:
    """The rooms' tables and indexes (``ROOM_TABLES``), inside the caller's transaction."""
    for statement in ROOM_TABLES:  # one by one: executescript would commit the transaction
        conn.execute(statement)
