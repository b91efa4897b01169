"""The brain store's schema, declared here only: every table and index of ``brain.db``.

``metadata`` (SQLAlchemy Core) is the schema of this code, one declaration for every
engine: a new store is made from it (on SQLite now, the same tables on PostgreSQL later,
issue 38). ``migrations/versions/`` is its history, one numbered Alembic revision per
change; ``migrations.upgrade`` brings a store an older brain made to it at start and
refuses one a newer brain made. A change to the schema is a change here and a new
revision there (AGENTS.md, "How to change the store's schema");
``tests/unit/brain/test_store_migrations.py`` fails when the two disagree.

The runtime queries are plain SQL on ``sqlite3`` (``db.py``); SQLAlchemy and Alembic only
make and upgrade the store, at start.

The search index (``<BRAIN_DATA_DIR>/index/search.sqlite``) is a database file of its own
and keeps its schema beside the code that opens it (``index_file.py``, ``vectors.py``).
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.types import REAL, TypeEngine

from airig.brain.store.escalations import DUE_WHERE, REVIEW_DUE

# SQLite stores every integer in up to 8 bytes under the name INTEGER (and only a column
# typed exactly INTEGER PRIMARY KEY is the rowid); PostgreSQL's INTEGER is 4 bytes, too
# small for mtime_ns, byte counts or a long-lived store's event ids: BIGINT there.
INT: TypeEngine[int] = BigInteger().with_variant(Integer(), "sqlite")
# Seconds since the epoch as a float: PostgreSQL's REAL is 4 bytes (a timestamp to the
# minute), so DOUBLE PRECISION there; REAL (8 bytes) on SQLite, as the stores made so far.
FLOAT: TypeEngine[float] = Double().with_variant(REAL(), "sqlite")


def _key(name: str, kind: Any) -> Column[Any]:
    # nullable=True only keeps SQLite's "id TEXT PRIMARY KEY" as every store so far has it
    # (no NOT NULL written, so PRAGMA table_info says nullable); PostgreSQL's PRIMARY KEY
    # is NOT NULL whatever the column says.
    return Column(name, kind, primary_key=True, nullable=True)


def _json(name: str, empty: str) -> Column[str]:
    return Column(name, Text, nullable=False, server_default=empty)


def _zero(name: str, kind: Any = INT) -> Column[Any]:
    return Column(name, kind, nullable=False, server_default=text("0"))


metadata = MetaData()

plans = Table(
    "plans", metadata,
    _key("id", Text),
    Column("name", Text, nullable=False),
    Column("idempotency_key", Text, unique=True),
    Column("body_hash", Text, nullable=False),
    Column("submitted_by", Text, nullable=False),
    Column("created_at", FLOAT, nullable=False),
    _json("fixes_json", "[]"),
    _zero("cancelled"),
    # who may act on a plan besides admin: auth.owner_of of the submitting token
    Column("owner", Text),
    # Retention (retention.py) walks plans created before its cutoff, oldest first, and
    # the plans list reads the newest: both are ranges of this index, not a sort of all plans.
    Index("plans_created", "created_at", "id"),
)  # fmt: skip

tasks = Table(
    "tasks", metadata,
    _key("id", INT),
    Column("plan_id", Text, ForeignKey("plans.id"), nullable=False),
    Column("key", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("task_class", Text, nullable=False),
    Column("payload_json", Text, nullable=False),
    Column("model", Text),
    Column("priority", INT, nullable=False),
    Column("trusted", INT, nullable=False),
    Column("sensitive", INT, nullable=False),
    Column("timeout_s", FLOAT, nullable=False),
    Column("retry_count", INT, nullable=False),
    Column("state", Text, nullable=False),
    _zero("attempt"),
    _zero("task_errors"),
    _zero("infra_errors"),
    Column("lease_id", Text),
    Column("worker_id", Text),
    Column("lease_expires_at", FLOAT),
    Column("attempt_deadline", FLOAT),
    Column("created_at", FLOAT, nullable=False),
    Column("ready_at", FLOAT),
    Column("not_before", FLOAT),
    Column("started_at", FLOAT),
    Column("finished_at", FLOAT),
    Column("output_json", Text),
    Column("output_file", Text),
    _json("files_json", "[]"),
    _json("metrics_json", "{}"),
    Column("result_hash", Text),
    Column("error_type", Text),
    Column("error", Text),
    Column("reason", Text),
    # the output may not be trusted: an untrusted rig made it, or the task ran untrusted
    _zero("tainted_output"),
    # where a task came from (NULL: its plan as submitted; "plan:<key>" / "external:<key>":
    # added by that task, airig/brain/planner/grow.py) and how many growths deep it is
    Column("origin", Text),
    _zero("depth"),
    # the external tier (airig/brain/escalation/): never | on_failure | always, whether a
    # sensitive task may be sent, and its prompt's size in tokens once estimated (NULL: not yet)
    Column("escalate", Text, nullable=False, server_default="never"),
    _zero("allow_external"),
    Column("context_tokens", INT),
    # the brain's model has judged its first failure (airig/brain/escalation/review.py)
    _zero("reviewed"),
    # a fan-out item's task: its group's key and the item's index (plans/fanout.py)
    Column("fanout_group", Text),
    Column("fanout_index", INT),
    # a glob item's fingerprint (its input's sha256 and its rendered template tasks), the
    # task that really ran a reused one ("<plan>/<key>"), and the files on the data volume
    # it wrote with their size and mtime when it succeeded (plans/reuse.py)
    Column("fingerprint", Text),
    Column("reused_from", Text),
    Column("written_json", Text),
    UniqueConstraint("plan_id", "key"),
    # Per-plan counts (the plans list, every dashboard poll) read this index alone instead
    # of every task row of the plan (benchmarks/dashboard.py: 252 ms at 100k tasks before).
    Index("tasks_plan_state", "plan_id", "state"),
    # The queue view groups live tasks by class and model with their oldest ready time:
    # covered by this index, no task row is read.
    Index("tasks_queue", "state", "task_class", "model", "ready_at"),
    # A claim with a claim_id looks up its earlier leases (queue.claim_leases) by lease id:
    # without it every live lease was read per claim (benchmarks/fleet.py, 500 workers).
    Index("tasks_lease", "lease_id"),
    # a group's items, for its progress and its end (store/fanout.py)
    Index("tasks_fanout", "plan_id", "fanout_group", "state"),
    # the newest item of a fingerprint, for a submit that may reuse it (store/reuse.py)
    Index("tasks_fingerprint", "fingerprint", sqlite_where=text("fingerprint IS NOT NULL"),
          postgresql_where=text("fingerprint IS NOT NULL")),
    # the ready heads a claim scans (store/candidates.py: a loose index scan, one indexed
    # probe per class and model)
    Index("tasks_ready_heads", "state", "task_class", "model", "priority", "ready_at", "id"),
    # READY tasks the escalation criteria still have to look at: a claim finds them
    # through this partial index without reading the queue (escalations.DUE_WHERE).
    Index("tasks_escalation_due", "state", sqlite_where=text(DUE_WHERE),
          postgresql_where=text(DUE_WHERE)),
    # Tasks whose first failure the brain's model has yet to judge (escalations.REVIEW_DUE).
    Index("tasks_review_due", "state", sqlite_where=text(REVIEW_DUE),
          postgresql_where=text(REVIEW_DUE)),
    sqlite_autoincrement=True,  # a task id is never given twice, even after a delete
)  # fmt: skip

deps = Table(
    "deps", metadata,
    Column("task_id", INT, ForeignKey("tasks.id"), nullable=False),
    Column("depends_on", INT, ForeignKey("tasks.id"), nullable=False),
    PrimaryKeyConstraint("task_id", "depends_on"),
    Index("deps_upstream", "depends_on"),
)  # fmt: skip

workers = Table(
    "workers", metadata,
    _key("id", Text),
    Column("token_hash", Text, nullable=False),
    Column("classes_json", Text, nullable=False),
    Column("gpu_index", INT),
    _json("gpus_json", "[]"),
    _json("models_json", "[]"),
    Column("registered_at", FLOAT, nullable=False),
    Column("last_heartbeat", FLOAT, nullable=False),
    Column("host", Text, nullable=False, server_default=""),
    # tokens.id of the join token a worker registered with (NULL: the bootstrap token)
    Column("registered_by", Text),
    # when the worker last leased a task (NULL: never): triage's "registered, idle, work waits"
    Column("last_claim_at", FLOAT),
    Index("workers_token", "token_hash"),
    Index("workers_registered_by", "registered_by"),
)  # fmt: skip

tokens = Table(
    "tokens", metadata,
    _key("token_hash", Text),
    Column("scope", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("created_at", FLOAT, nullable=False),
    Column("id", Text),  # the public handle (new_token_id), listed and used to revoke it
    Column("revoked_at", FLOAT),
    # a join token's trust level (airig/brain/store/trust.py); NULL for other scopes
    Column("trust", Text),
    Index("tokens_id", "id", unique=True),
)  # fmt: skip

events = Table(
    "events", metadata,
    _key("id", INT),
    Column("ts", FLOAT, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("plan_id", Text),
    Column("task_id", INT),
    Column("body_json", Text, nullable=False),
    Index("events_plan", "plan_id"),
    Index("events_ts", "ts"),  # the alerts' failure window reads recent events only
    sqlite_autoincrement=True,
)  # fmt: skip

# Goals the brain's model drafts into plans (airig/brain/planner/goals.py). plan_id and
# drafting_plan_id are plain text, no foreign key: retention deletes finished plans.
goals = Table(
    "goals", metadata,
    _key("id", Text),
    Column("goal", Text, nullable=False),
    Column("inputs_dir", Text),
    Column("state", Text, nullable=False),
    Column("draft_json", Text),
    _json("errors_json", "[]"),
    Column("plan_id", Text),
    Column("drafting_plan_id", Text),
    Column("submitted_by", Text, nullable=False, server_default=""),
    Column("created_at", FLOAT, nullable=False),
    Column("updated_at", FLOAT),
    Column("owner", Text),
    # who drafted a goal's plan: {"worker", "rig", "trusted"} (planner/goals.py)
    Column("draft_origin", Text),
)  # fmt: skip

# An input file's sha256 by what its stat says (plans/reuse.py): a second submit of an
# unchanged folder reads none of its files again. Any change of size, times or inode
# (a file replaced, rewritten in place, even with its mtime set back) misses it.
input_hashes = Table(
    "input_hashes", metadata,
    _key("path", Text),
    Column("size", INT, nullable=False),
    Column("mtime_ns", INT, nullable=False),
    Column("ctime_ns", INT, nullable=False),
    Column("inode", INT, nullable=False),
    Column("sha256", Text, nullable=False),
    Column("seen_at", FLOAT, nullable=False),
)  # fmt: skip

backups = Table(
    "backups", metadata,
    _key("id", INT),
    Column("created_at", FLOAT, nullable=False),
    Column("archive", Text, nullable=False),
    Column("bytes", INT, nullable=False),
    Column("sha256", Text, nullable=False),
    _zero("models"),
    sqlite_autoincrement=True,
)  # fmt: skip

# The external tier's calls (airig/brain/escalation/ledger.py).
escalations = Table(
    "escalations", metadata,
    _key("id", Text),
    Column("task_id", INT, nullable=False),
    Column("plan_id", Text, nullable=False),
    Column("task_key", Text, nullable=False),
    Column("why", Text, nullable=False),
    Column("state", Text, nullable=False),
    _zero("attempts"),
    Column("next_try_at", FLOAT),
    Column("created_at", FLOAT, nullable=False),
    Column("sent_at", FLOAT),
    Column("answered_at", FLOAT),
    _zero("reask"),
    Column("request_json", Text),
    Column("provider", Text),
    Column("model", Text),
    _zero("input_tokens"),
    _zero("output_tokens"),
    _zero("estimated_cost", FLOAT),
    _zero("cost", FLOAT),
    Column("outcome", Text),
    Column("subtasks_json", Text),
    Column("error", Text),
    Index("escalations_due", "state", "next_try_at"),
    Index("escalations_task", "task_id"),
    Index("escalations_answered", "answered_at"),
    Index("escalations_sent", "sent_at"),
)  # fmt: skip

# Alerts that fired and have not cleared (airig/brain/ops/alerts.py).
alerts = Table(
    "alerts", metadata,
    Column("kind", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("fired_at", FLOAT, nullable=False),
    Column("message", Text, nullable=False),
    PrimaryKeyConstraint("kind", "subject"),
)  # fmt: skip


# What the brain learned from finished attempts per (task type, model, GPU): the figures
# the scheduler and GET /v1/estimates read, and the bounded window of recent observations
# they are computed from (airig/brain/store/estimates.py).
estimates = Table(
    "estimates", metadata,
    Column("task_type", Text, nullable=False),
    Column("model", Text, nullable=False),  # '' for a task that needs none
    Column("gpu", Text, nullable=False),  # the GPU's model name, or 'cpu'
    _zero("samples"),
    _zero("failures"),
    Column("updated_at", FLOAT, nullable=False),
    Column("run_p50_s", FLOAT),
    Column("run_p90_s", FLOAT),
    Column("load_p50_s", FLOAT),
    Column("load_p90_s", FLOAT),
    Column("vram_peak_mb", INT),
    Column("tokens_per_s", FLOAT),
    Column("failure_rate", FLOAT),
    _json("window_json", "{}"),
    PrimaryKeyConstraint("task_type", "model", "gpu"),
    Index("estimates_updated", "updated_at"),
)  # fmt: skip


def new_token_id() -> str:
    """A token's public handle (listed, used to revoke it); unrelated to the token."""
    return secrets.token_hex(6)
