"""The ``alerts`` table and what the alert rules read (``ops/alerts.py`` fires and clears
them; ``ops/metrics.py`` shows them).

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from airig.brain.store import dialect


def active(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Reads every alert that holds (kind, subject, fired_at, message), oldest first."""
    return conn.execute(
        "SELECT kind, subject, fired_at, message FROM alerts ORDER BY fired_at, kind, subject"
    ).fetchall()


def kinds_and_subjects(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Every alert that holds (kind, subject), in no order."""
    return conn.execute("SELECT kind, subject FROM alerts").fetchall()


def known(conn: sqlite3.Connection) -> sqlite3.Cursor:
    """Every alert recorded as holding (kind, subject, message), in no order."""
    return conn.execute("SELECT kind, subject, message FROM alerts")


def fire(conn: sqlite3.Connection, kind: str, subject: str, now: float, message: str) -> None:
    conn.execute(
        "INSERT INTO alerts (kind, subject, fired_at, message) VALUES (?,?,?,?)",
        (kind, subject, now, message),
    )


def clear(conn: sqlite3.Connection, kind: str, subject: str) -> None:
    conn.execute("DELETE FROM alerts WHERE kind = ? AND subject = ?", (kind, subject))


def ready_count(conn: sqlite3.Connection) -> int:
    """How many tasks are READY."""
    return int(conn.execute("SELECT COUNT(*) FROM tasks WHERE state = 'READY'").fetchone()[0])


def failures_since(
    conn: sqlite3.Connection, since: float, event_types: Sequence[str]
) -> list[sqlite3.Row]:
    """(type, worker) of every task event of these types since ``since``."""
    return conn.execute(
        f"""SELECT t.type AS type, {dialect.json_text(conn, "e.body_json", "worker_id")} AS worker
            FROM events e JOIN tasks t ON t.id = e.task_id
            WHERE e.ts >= ? AND e.event_type IN ({",".join("?" * len(event_types))})""",
        (since, *event_types),
    ).fetchall()


def workers_heard_after(conn: sqlite3.Connection, after: float) -> sqlite3.Cursor:
    """(id, gpus_json, last_heartbeat) of the workers whose last heartbeat is after ``after``."""
    return conn.execute(
        "SELECT id, gpus_json, last_heartbeat FROM workers WHERE last_heartbeat > ?",
        (after,),
    )
