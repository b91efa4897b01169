"""The brain store's migration history: Alembic revisions, numbered, in ``versions/``.

``upgrade`` runs at the brain's start (``db.Database``), before the store's first
connection. ``python -m airig.brain.store.migrations new "what changes"`` writes the next
revision's file (AGENTS.md, "How to change the store's schema"). No alembic.ini: the
script location is set in code (``runner.config``).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from airig.brain.store.migrations.revisions import StoreVersionError, known, newer, store_revision


def upgrade(path: Path | None = None, *, url: str = "") -> None:
    """Bring the store at ``path`` to ``schema.metadata``: make a new one, upgrade an older
    one revision by revision (each in one transaction: a brain killed between two, or in
    one, finishes the job at its next start), refuse a newer one (``StoreVersionError``,
    one line, the file as it was). A store at this code's revision costs one read.

    ``url`` (``BRAIN_DATABASE_URL``), when given, names a PostgreSQL store instead of the
    file (``postgres.py``): the same rules, with the URL's password never said."""
    if url:
        logging.getLogger("alembic").setLevel(logging.WARNING)
        from airig.brain.store.migrations import postgres

        postgres.upgrade(url)
        return
    if path is None:
        raise TypeError("upgrade() needs the SQLite store's path or a database URL")
    try:
        current = store_revision(path)
    except sqlite3.Error as exc:
        raise StoreVersionError(
            f"cannot read the brain's store {path}: {exc}",
            "BRAIN_DB must be a brain's SQLite store on a readable volume, or restore a backup",
        ) from exc
    revisions = known()
    if current == revisions[-1]:
        return
    if current is not None and current not in revisions:
        raise newer(str(path), current)
    # Alembic says each step (and its plugins, as it is imported) at INFO: the brain's log
    # gets one line for the upgrade (runner.py), and a failure stays the one line of main().
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from airig.brain.store.migrations import runner  # Alembic: only when there is work

    runner.upgrade(path)
