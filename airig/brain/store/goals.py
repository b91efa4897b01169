"""Reads of the ``goals`` table (``planner/goals.py`` holds the goal's life).

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import sqlite3


def newest(conn: sqlite3.Connection, owner: str | None, limit: int) -> list[sqlite3.Row]:
    """Reads the ``limit`` newest goals, whole rows: all of them (``owner`` None), or
    those of one owner."""
    mine = "" if owner is None else "WHERE owner = ?"
    params: tuple[str, ...] = () if owner is None else (owner,)
    return conn.execute(
        f"SELECT * FROM goals {mine} ORDER BY created_at DESC LIMIT ?", (*params, limit)
    ).fetchall()
