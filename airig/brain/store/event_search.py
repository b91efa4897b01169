"""Reads of the ``events`` table for the dashboard (``events.py`` writes it): the newest
events, filtered by plan, type, task or worker.

Events without a plan filter are searched among the newest ``EVENT_WINDOW`` rows (a range
of the primary key), so a rare filter never scans a long history; a plan filter uses the
plan index and reaches all of that plan's events.

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from airig.brain.store import dialect

EVENT_WINDOW = 100_000


def last_id(conn: sqlite3.Connection) -> int:
    """Reads the newest event's id (0 when there is none)."""
    return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0])


def events_query(
    newest_id: int, plan: str | None, event_type: str | None, task: str | None,
    worker: str | None, after_id: int, limit: int, engine: str = dialect.SQLITE,
) -> tuple[str, list[Any]]:  # fmt: skip
    """The SQL (newest first) for one filter; every form is an indexed range or lookup."""
    clauses: list[str] = []
    params: list[Any] = []
    if plan:
        clauses.append("plan_id = ?")
        params.append(plan)
    floor = after_id if plan else max(after_id, newest_id - EVENT_WINDOW)
    if floor > 0:
        clauses.append("id > ?")
        params.append(floor)
    for clause, value in (
        ("event_type = ?", event_type),
        (f"{dialect.json_text(engine, 'body_json', 'task_id')} = ?", task),
        (f"{dialect.json_text(engine, 'body_json', 'worker_id')} = ?", worker),
    ):
        if value:
            clauses.append(clause)
            params.append(value)
    where = " AND ".join(clauses) or "TRUE"
    sql = f"SELECT id, body_json FROM events WHERE {where} ORDER BY id DESC LIMIT ?"
    return sql, [*params, limit]


def search(
    conn: sqlite3.Connection, newest: int, plan: str | None, event_type: str | None,
    task: str | None, worker: str | None, after_id: int, limit: int,
) -> list[sqlite3.Row]:  # fmt: skip
    """Reads up to ``limit`` events (id, body_json) that match the filter, newest first."""
    sql, params = events_query(
        newest, plan, event_type, task, worker, after_id, limit, engine=dialect.of(conn)
    )
    return conn.execute(sql, params).fetchall()
