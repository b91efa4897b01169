"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One transaction (runner.py): a brain killed in the middle redoes all of it at its next
    # start. Spell the columns out here (sa.Column, not schema.py's objects): this file is
    # history, and schema.py will change after it. Mirror the change in schema.py's metadata.
    ${upgrades if upgrades else "raise NotImplementedError"}
