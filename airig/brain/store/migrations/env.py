"""Alembic's environment: the brain's store, on the connection ``runner.upgrade`` opened.

Each revision runs in a transaction of its own with the version it reaches (SQLite's DDL
is transactional once the driver leaves BEGIN to us, ``runner.engine``): a brain killed
between two revisions, or in the middle of one, leaves the store at the last one it
finished, and its next start goes on from there.
"""

from __future__ import annotations

from alembic import context

from airig.brain.store import schema

context.configure(
    connection=context.config.attributes["connection"],
    target_metadata=schema.metadata,
    transaction_per_migration=True,
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
