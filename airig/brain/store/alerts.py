"""Reads of the ``alerts`` table (``ops/alerts.py`` fires and clears them).

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import sqlite3


def active(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Reads every alert that holds (kind, subject, fired_at, message), oldest first."""
    return conn.execute(
        "SELECT kind, subject, fired_at, message FROM alerts ORDER BY fired_at, kind, subject"
    ).fetchall()
