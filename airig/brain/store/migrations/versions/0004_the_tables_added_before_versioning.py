"""The tables added before versioning (input_hashes, escalations, alerts) and the rooms' indexes

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29

What issue 37's ROOM_TABLES made at each start, and the input_hashes table: each only where
the store lacks it. The partial indexes' conditions are the text of that time
(store/escalations.py's DUE_WHERE and REVIEW_DUE), copied: this file is history.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from airig.brain.store.migrations import legacy
from airig.brain.store.schema import FLOAT, INT

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

DUE_WHERE = """escalate = 'always' OR (escalate = 'on_failure'
             AND (context_tokens IS NULL OR task_errors >= 2))"""
REVIEW_DUE = "escalate = 'on_failure' AND reviewed = 0 AND task_errors = 1"


def zero(name: str, kind: Any = INT) -> sa.Column[Any]:
    return sa.Column(name, kind, nullable=False, server_default=sa.text("0"))


def partial(where: str) -> dict[str, Any]:
    return {"sqlite_where": sa.text(where), "postgresql_where": sa.text(where)}


def upgrade() -> None:
    legacy.create_table(
        "input_hashes",
        sa.Column("path", sa.Text, primary_key=True, nullable=True),
        sa.Column("size", INT, nullable=False),
        sa.Column("mtime_ns", INT, nullable=False),
        sa.Column("ctime_ns", INT, nullable=False),
        sa.Column("inode", INT, nullable=False),
        sa.Column("sha256", sa.Text, nullable=False),
        sa.Column("seen_at", FLOAT, nullable=False),
    )
    legacy.create_index(
        "tasks_ready_heads", "tasks", ["state", "task_class", "model", "priority", "ready_at", "id"]
    )
    legacy.create_table(
        "escalations",
        sa.Column("id", sa.Text, primary_key=True, nullable=True),
        sa.Column("task_id", INT, nullable=False),
        sa.Column("plan_id", sa.Text, nullable=False),
        sa.Column("task_key", sa.Text, nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        zero("attempts"),
        sa.Column("next_try_at", FLOAT),
        sa.Column("created_at", FLOAT, nullable=False),
        sa.Column("sent_at", FLOAT),
        sa.Column("answered_at", FLOAT),
        zero("reask"),
        sa.Column("request_json", sa.Text),
        sa.Column("provider", sa.Text),
        sa.Column("model", sa.Text),
        zero("input_tokens"),
        zero("output_tokens"),
        zero("estimated_cost", FLOAT),
        zero("cost", FLOAT),
        sa.Column("outcome", sa.Text),
        sa.Column("subtasks_json", sa.Text),
        sa.Column("error", sa.Text),
    )
    legacy.create_index("escalations_due", "escalations", ["state", "next_try_at"])
    legacy.create_index("escalations_task", "escalations", ["task_id"])
    legacy.create_index("escalations_answered", "escalations", ["answered_at"])
    legacy.create_index("escalations_sent", "escalations", ["sent_at"])
    legacy.create_index("tasks_escalation_due", "tasks", ["state"], **partial(DUE_WHERE))
    legacy.create_index("tasks_review_due", "tasks", ["state"], **partial(REVIEW_DUE))
    legacy.create_table(
        "alerts",
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("fired_at", FLOAT, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("kind", "subject"),
    )
    legacy.create_index("events_ts", "events", ["ts"])
