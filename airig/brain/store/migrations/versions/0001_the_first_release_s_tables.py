"""The first release's tables, as its brain made them (tests/unit/brain/stores/first_release.sql)

Revision ID: 0001
Revises:
Create Date: 2026-11-29

The baseline: the tables and indexes of a store made before any column of 0002. A store
from before revisions that has them keeps them as they are (``legacy.create_table``).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from airig.brain.store.migrations import legacy
from airig.brain.store.schema import FLOAT, INT

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def key(name: str, kind: Any) -> sa.Column[Any]:
    return sa.Column(name, kind, primary_key=True, nullable=True)  # as schema._key


def zero(name: str) -> sa.Column[Any]:
    return sa.Column(name, INT, nullable=False, server_default=sa.text("0"))


def upgrade() -> None:
    legacy.create_table(
        "plans",
        key("id", sa.Text),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("idempotency_key", sa.Text, unique=True),
        sa.Column("body_hash", sa.Text, nullable=False),
        sa.Column("submitted_by", sa.Text, nullable=False),
        sa.Column("created_at", FLOAT, nullable=False),
        sa.Column("fixes_json", sa.Text, nullable=False, server_default="[]"),
        zero("cancelled"),
    )
    legacy.create_index("plans_created", "plans", ["created_at", "id"])
    if legacy.create_table(
        "tasks",
        key("id", INT),
        sa.Column("plan_id", sa.Text, sa.ForeignKey("plans.id"), nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("task_class", sa.Text, nullable=False),
        sa.Column("payload_json", sa.Text, nullable=False),
        sa.Column("model", sa.Text),
        sa.Column("priority", INT, nullable=False),
        sa.Column("trusted", INT, nullable=False),
        sa.Column("sensitive", INT, nullable=False),
        sa.Column("timeout_s", FLOAT, nullable=False),
        sa.Column("retry_count", INT, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        zero("attempt"),
        zero("task_errors"),
        zero("infra_errors"),
        sa.Column("lease_id", sa.Text),
        sa.Column("worker_id", sa.Text),
        sa.Column("lease_expires_at", FLOAT),
        sa.Column("attempt_deadline", FLOAT),
        sa.Column("created_at", FLOAT, nullable=False),
        sa.Column("ready_at", FLOAT),
        sa.Column("not_before", FLOAT),
        sa.Column("started_at", FLOAT),
        sa.Column("finished_at", FLOAT),
        sa.Column("output_json", sa.Text),
        sa.Column("output_file", sa.Text),
        sa.Column("files_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("metrics_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("result_hash", sa.Text),
        sa.Column("error_type", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("reason", sa.Text),
        sa.UniqueConstraint("plan_id", "key"),
        sqlite_autoincrement=True,
    ):
        # the first release's index on state alone, which 0003 drops: made with its table only
        legacy.create_index("tasks_state", "tasks", ["state"])
    legacy.create_index("tasks_plan_state", "tasks", ["plan_id", "state"])
    legacy.create_index("tasks_queue", "tasks", ["state", "task_class", "model", "ready_at"])
    legacy.create_table(
        "deps",
        sa.Column("task_id", INT, sa.ForeignKey("tasks.id"), nullable=False),
        sa.Column("depends_on", INT, sa.ForeignKey("tasks.id"), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "depends_on"),
    )
    legacy.create_index("deps_upstream", "deps", ["depends_on"])
    legacy.create_table(
        "workers",
        key("id", sa.Text),
        sa.Column("token_hash", sa.Text, nullable=False),
        sa.Column("classes_json", sa.Text, nullable=False),
        sa.Column("gpu_index", INT),
        sa.Column("gpus_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("models_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("registered_at", FLOAT, nullable=False),
        sa.Column("last_heartbeat", FLOAT, nullable=False),
    )
    legacy.create_index("workers_token", "workers", ["token_hash"])
    legacy.create_table(
        "tokens",
        key("token_hash", sa.Text),
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("created_at", FLOAT, nullable=False),
    )
    legacy.create_table(
        "events",
        key("id", INT),
        sa.Column("ts", FLOAT, nullable=False),
        sa.Column("event_type", sa.Text, nullable=False),
        sa.Column("plan_id", sa.Text),
        sa.Column("task_id", INT),
        sa.Column("body_json", sa.Text, nullable=False),
        sqlite_autoincrement=True,
    )
    legacy.create_index("events_plan", "events", ["plan_id"])
    legacy.create_table(
        "goals",
        key("id", sa.Text),
        sa.Column("goal", sa.Text, nullable=False),
        sa.Column("inputs_dir", sa.Text),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("draft_json", sa.Text),
        sa.Column("errors_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("plan_id", sa.Text),
        sa.Column("drafting_plan_id", sa.Text),
        sa.Column("submitted_by", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", FLOAT, nullable=False),
        sa.Column("updated_at", FLOAT),
    )
    legacy.create_table(
        "backups",
        key("id", INT),
        sa.Column("created_at", FLOAT, nullable=False),
        sa.Column("archive", sa.Text, nullable=False),
        sa.Column("bytes", INT, nullable=False),
        sa.Column("sha256", sa.Text, nullable=False),
        zero("models"),
        sqlite_autoincrement=True,
    )
