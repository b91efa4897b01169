"""What the brain's Prometheus collectors read at scrape time (``ops/metrics.py``).

Every function runs inside the caller's read; none opens its own.
"""

from __future__ import annotations

import sqlite3


def task_counts(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """(task_class, state, n): how many tasks of each class are in each state."""
    return conn.execute(
        "SELECT task_class, state, COUNT(*) AS n FROM tasks GROUP BY task_class, state"
    ).fetchall()
