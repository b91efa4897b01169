"""The ``goals`` table's statements (``planner/goals.py`` holds the goal's life).

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


def set_origin(conn: sqlite3.Connection, plan_id: str, origin: str) -> None:
    """Every task of ``plan_id`` came from ``origin`` (``goal:<id>``)."""
    conn.execute("UPDATE tasks SET origin = ? WHERE plan_id = ?", (origin, plan_id))


def insert(
    conn: sqlite3.Connection, goal_id: str, goal: str, inputs_dir: str | None,
    drafting_plan_id: str, submitted_by: str, now: float, owner: str | None,
) -> None:  # fmt: skip
    """A new goal, drafting."""
    conn.execute(
        """INSERT INTO goals (id, goal, inputs_dir, state, drafting_plan_id, submitted_by,
               created_at, updated_at, owner) VALUES (?, ?, ?, 'drafting', ?, ?, ?, ?, ?)""",
        (goal_id, goal, inputs_dir, drafting_plan_id, submitted_by, now, now, owner),
    )


def of_drafting_plan(conn: sqlite3.Connection, plan_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM goals WHERE drafting_plan_id = ?", (plan_id,)
    ).fetchone()
    return row


def set_errors(conn: sqlite3.Connection, goal_id: str, errors_json: str, now: float) -> None:
    conn.execute(
        "UPDATE goals SET errors_json = ?, updated_at = ? WHERE id = ?",
        (errors_json, now, goal_id),
    )


def await_approval(
    conn: sqlite3.Connection, goal_id: str, draft_json: str, now: float, origin_json: str
) -> None:
    """The goal's draft is valid: it waits for approval."""
    conn.execute(
        """UPDATE goals SET state = 'awaiting_approval', draft_json = ?, updated_at = ?,
               draft_origin = ? WHERE id = ?""",
        (draft_json, now, origin_json, goal_id),
    )


def worker_host(conn: sqlite3.Connection, worker_id: str | None) -> str | None:
    """The rig (host) of a worker; None for a worker the store does not know."""
    row = conn.execute("SELECT host FROM workers WHERE id = ?", (worker_id,)).fetchone()
    return row["host"] if row is not None else None


def drafting_task_end(
    conn: sqlite3.Connection, drafting_plan_id: str, key: str
) -> sqlite3.Row | None:
    """The drafting task's state and error."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT state, error FROM tasks WHERE plan_id = ? AND key = ?",
        (drafting_plan_id, key),
    ).fetchone()
    return row


def drafting_task_view(
    conn: sqlite3.Connection, drafting_plan_id: str, key: str
) -> sqlite3.Row | None:
    """The drafting task as a goal's view shows it."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT state, attempt, error, error_type, model FROM tasks WHERE plan_id = ? AND key = ?",
        (drafting_plan_id, key),
    ).fetchone()
    return row


def fail(conn: sqlite3.Connection, goal_id: str, errors_json: str, now: float) -> sqlite3.Row:
    """The goal failed, with these errors; its row as now stored."""
    updated: sqlite3.Row = conn.execute(
        """UPDATE goals SET state = 'failed', errors_json = ?, updated_at = ? WHERE id = ?
           RETURNING *""",
        (errors_json, now, goal_id),
    ).fetchone()
    return updated


def load(conn: sqlite3.Connection, goal_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM goals WHERE id = ?", (goal_id,)
    ).fetchone()
    return row


def approve(conn: sqlite3.Connection, goal_id: str, plan_id: str, now: float) -> None:
    conn.execute(
        "UPDATE goals SET state = 'approved', plan_id = ?, updated_at = ? WHERE id = ?",
        (plan_id, now, goal_id),
    )


def reject(conn: sqlite3.Connection, goal_id: str, now: float) -> None:
    conn.execute("UPDATE goals SET state = 'rejected', updated_at = ? WHERE id = ?", (now, goal_id))
