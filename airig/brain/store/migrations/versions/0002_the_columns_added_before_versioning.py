"""The columns added before versioning (issue 37's ADDED_COLUMNS), with what they start as

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

Each one only where the store lacks it (``legacy.add_columns``): a store from before
revisions may have any of them.
"""

from __future__ import annotations

import secrets
from typing import Any

import sqlalchemy as sa
from alembic import op

from airig.brain.store.migrations import legacy
from airig.brain.store.schema import FLOAT, INT

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def zero(name: str) -> sa.Column[Any]:
    return sa.Column(name, INT, nullable=False, server_default=sa.text("0"))


def upgrade() -> None:
    legacy.add_columns(
        "workers",
        sa.Column("host", sa.Text, nullable=False, server_default=""),
        sa.Column("registered_by", sa.Text),
        sa.Column("last_claim_at", FLOAT),
    )
    legacy.add_columns(
        "tokens",
        sa.Column("id", sa.Text),
        sa.Column("revoked_at", FLOAT),
        sa.Column("trust", sa.Text),
    )
    legacy.add_columns(
        "tasks",
        zero("tainted_output"),
        sa.Column("escalate", sa.Text, nullable=False, server_default="never"),
        zero("allow_external"),
        sa.Column("context_tokens", INT),
        zero("reviewed"),
        sa.Column("origin", sa.Text),
        zero("depth"),
        sa.Column("fanout_group", sa.Text),
        sa.Column("fanout_index", INT),
        sa.Column("fingerprint", sa.Text),
        sa.Column("reused_from", sa.Text),
        sa.Column("written_json", sa.Text),
    )
    legacy.add_columns("plans", sa.Column("owner", sa.Text))
    legacy.add_columns("goals", sa.Column("owner", sa.Text), sa.Column("draft_origin", sa.Text))
    bind = op.get_bind()
    # Tokens stored before ids existed get one (schema.new_token_id), so they can be listed
    # and revoked.
    missing = bind.execute(sa.text("SELECT token_hash FROM tokens WHERE id IS NULL")).all()
    for (token_hash,) in missing:
        bind.execute(
            sa.text("UPDATE tokens SET id = :id WHERE token_hash = :hash"),
            {"id": secrets.token_hex(6), "hash": token_hash},
        )
    # Join tokens made before trust levels existed get the default, untrusted.
    bind.execute(
        sa.text("UPDATE tokens SET trust = 'untrusted' WHERE scope = 'join' AND trust IS NULL")
    )
