"""learned estimates table

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29 13:11:36.649233

Issue 40 §1: what the brain learns from finished attempts per (task type, model, GPU),
kept in the store so it survives restarts and backups (``store/estimates.py``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from airig.brain.store.schema import FLOAT, INT

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One transaction (runner.py): a brain killed in the middle redoes all of it at its next
    # start. The columns are spelled out here: this file is history.
    op.create_table(
        "estimates",
        sa.Column("task_type", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("gpu", sa.Text, nullable=False),
        sa.Column("samples", INT, nullable=False, server_default=sa.text("0")),
        sa.Column("failures", INT, nullable=False, server_default=sa.text("0")),
        sa.Column("updated_at", FLOAT, nullable=False),
        sa.Column("run_p50_s", FLOAT),
        sa.Column("run_p90_s", FLOAT),
        sa.Column("load_p50_s", FLOAT),
        sa.Column("load_p90_s", FLOAT),
        sa.Column("vram_peak_mb", INT),
        sa.Column("tokens_per_s", FLOAT),
        sa.Column("failure_rate", FLOAT),
        sa.Column("window_json", sa.Text, nullable=False, server_default="{}"),
        sa.PrimaryKeyConstraint("task_type", "model", "gpu"),
    )
    op.create_index("estimates_updated", "estimates", ["updated_at"])
