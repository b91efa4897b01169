"""The indexes on the added columns (issue 37's ADDED_INDEXES); tasks_state goes

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa

from airig.brain.store.migrations import legacy

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    legacy.create_index("tokens_id", "tokens", ["id"], unique=True)
    legacy.create_index("workers_registered_by", "workers", ["registered_by"])
    legacy.create_index("tasks_lease", "tasks", ["lease_id"])
    legacy.create_index("tasks_fanout", "tasks", ["plan_id", "fanout_group", "state"])
    where = sa.text("fingerprint IS NOT NULL")
    legacy.create_index(
        "tasks_fingerprint", "tasks", ["fingerprint"], sqlite_where=where, postgresql_where=where
    )
    # tasks_queue (state, task_class, model, ready_at) serves every query this one did.
    legacy.drop_index("tasks_state", "tasks")
