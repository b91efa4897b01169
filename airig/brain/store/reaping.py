"""The leases' statements: what the reaper (``scheduling/reaper.py``) reads and writes (live
leases extended after a restart, attempts over their runtime limit, leases that expired),
a lease renewed and a worker's leases (``leases.py``).

Every function runs inside the caller's transaction; none opens its own.
"""

from __future__ import annotations

import sqlite3

from airig.brain.store import dialect


def extend_live_leases(conn: sqlite3.Connection, now: float, lease_s: float) -> int:
    """Every live lease runs at least ``lease_s`` from ``now``; how many there are."""
    cursor = conn.execute(
        """UPDATE tasks SET lease_expires_at = CASE WHEN lease_expires_at > ?
           THEN lease_expires_at ELSE ? END WHERE state IN ('LEASED', 'RUNNING')""",
        (now + lease_s, now + lease_s),
    )
    return cursor.rowcount


def over_time(conn: sqlite3.Connection, now: float) -> list[sqlite3.Row]:
    """Leased or running attempts past their deadline, whole rows (PostgreSQL: locked, a
    row another brain is writing (its worker's report) left to the next pass)."""
    return conn.execute(
        """SELECT * FROM tasks WHERE state IN ('LEASED', 'RUNNING')
           AND attempt_deadline < ?"""
        + dialect.for_update(conn, skip_locked=True),
        (now,),
    ).fetchall()


def lease_expired(conn: sqlite3.Connection, now: float) -> list[sqlite3.Row]:
    """Leased or running attempts whose lease ran out, whole rows (locked as ``over_time``)."""
    return conn.execute(
        """SELECT * FROM tasks WHERE state IN ('LEASED', 'RUNNING')
           AND lease_expires_at < ?"""
        + dialect.for_update(conn, skip_locked=True),
        (now,),
    ).fetchall()


def renew_lease(conn: sqlite3.Connection, task_id: int, expires: float) -> None:
    """A renewed lease (``leases.renew``): it now runs out at ``expires``."""
    conn.execute("UPDATE tasks SET lease_expires_at = ? WHERE id = ?", (expires, task_id))


def leases_of(conn: sqlite3.Connection, worker_id: str) -> list[sqlite3.Row]:
    """The worker's leased or running attempts, whole rows (``leases.drop_leases``;
    locked on PostgreSQL: a report of one of them in another brain is waited for)."""
    return conn.execute(
        "SELECT * FROM tasks WHERE worker_id = ? AND state IN ('LEASED', 'RUNNING')"
        + dialect.for_update(conn),
        (worker_id,),
    ).fetchall()
