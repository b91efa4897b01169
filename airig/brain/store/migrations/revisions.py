"""Which revision a store is at and which ones this code knows, without Alembic.

A revision's file is ``versions/<revision>_<slug>.py``, its revision four digits: the
newest is the highest number, read from the file names (``test_store_migrations.py``
checks that Alembic reads the same line from the files). A store at this code's revision
costs one read-only query at start and no import of SQLAlchemy or Alembic.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from airig.common.errors import AirigError

MIGRATIONS = Path(__file__).parent
_REVISION_FILE = re.compile(r"(\d{4})_\w+\.py")


class StoreVersionError(AirigError):
    """The store is at a revision this brain cannot run on, or could not be upgraded."""


# Revisions up to this one are SQLite's history before versioning (``legacy.py``): a store
# on PostgreSQL is made new from ``schema.metadata`` and stamped, so it never runs them;
# every revision after it runs on both engines.
LAST_SQLITE_ONLY = "0004"


def newer(where: str, current: str) -> StoreVersionError:
    """The one line for a store a newer brain made, on either engine."""
    return StoreVersionError(
        f"the brain's store {where} was made by a newer airig (revision {current[:40]!r}, "
        f"this brain knows revisions up to {head()})",
        "update airig, or restore a backup this version made",
    )


def known() -> list[str]:
    """Every revision this code knows, oldest first."""
    names = (_REVISION_FILE.fullmatch(path.name) for path in (MIGRATIONS / "versions").iterdir())
    return sorted(match.group(1) for match in names if match)


def head() -> str:
    """The revision of ``schema.metadata``: the newest this code knows."""
    return known()[-1]


def store_revision(path: Path) -> str | None:
    """The revision the store at ``path`` says it is at; None when it says none (no store
    yet, or one made before revisions). Read only: this writes nothing to the file."""
    if not path.exists():
        return None
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        if not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
        ).fetchone():
            return None
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()
