"""The durable record of every call to the external tier (the ``escalations`` table).

One row per call: its id is the ``request_id`` the gateway dedupes on, so a call re-sent
after a brain restart (state ``sent``, no answer recorded) reaches the gateway as the same
request. A retry of the same call after a retryable error keeps its row and id; a re-ask
after an unusable reply is a new call and a new row. The table has no foreign keys to
tasks or plans on purpose: what was spent must stay on record when those are deleted.

States: ``queued`` (waiting to be sent: new, backing off, or rate limited), ``sent`` (in
flight, or in flight when the brain stopped), ``over_budget`` (waits for the budget, or
failed over it), ``answered`` (the provider answered; ``outcome`` says what it was) and
``failed`` (given up on: refused, attempts used up, task cancelled).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Any

from airig.brain.escalation.budget import Spend, day_start, month_start

DUE_STATES = ("queued", "sent", "over_budget")
OPEN_STATES = DUE_STATES  # a task with a row in one of these has a call to come


def enqueue(
    conn: sqlite3.Connection, task: sqlite3.Row, why: str, now: float,
    request: dict[str, Any] | None = None, reask: int = 0,
) -> str:  # fmt: skip
    """A new call for ``task``; its request is built when it is first sent (unless given)."""
    request_id = uuid.uuid4().hex
    conn.execute(
        """INSERT INTO escalations (id, task_id, plan_id, task_key, why, state, next_try_at,
               created_at, reask, request_json) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?)""",
        (
            request_id, task["id"], task["plan_id"], task["key"], why, now, now, reask,
            json.dumps(request) if request is not None else None,
        ),
    )  # fmt: skip
    return request_id


def update(conn: sqlite3.Connection, request_id: str, **columns: Any) -> None:
    assignments = ", ".join(f"{name} = ?" for name in columns)
    conn.execute(
        f"UPDATE escalations SET {assignments} WHERE id = ?", (*columns.values(), request_id)
    )


def get(conn: sqlite3.Connection, request_id: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM escalations WHERE id = ?", (request_id,)).fetchone()


def due(conn: sqlite3.Connection, now: float, limit: int = 20) -> list[sqlite3.Row]:
    """Calls to send now, oldest first (``sent`` ones: re-sent after a restart)."""
    return conn.execute(
        f"""SELECT * FROM escalations WHERE state IN ({", ".join("?" * len(DUE_STATES))})
            AND next_try_at <= ? ORDER BY created_at, id LIMIT ?""",
        (*DUE_STATES, now, limit),
    ).fetchall()


def spend(conn: sqlite3.Connection, now: float, excluding: str = "") -> Spend:
    """What was spent today and this month (UTC), calls in flight counted at their estimate."""

    def total(since: float) -> float:
        row = conn.execute(
            """SELECT COALESCE(SUM(cost), 0) FROM escalations WHERE answered_at >= ?""",
            (since,),
        ).fetchone()
        flying = conn.execute(
            "SELECT COALESCE(SUM(estimated_cost), 0) FROM escalations "
            "WHERE state = 'sent' AND sent_at >= ? AND id != ?",
            (since, excluding),
        ).fetchone()
        return float(row[0]) + float(flying[0])

    return Spend(today=total(day_start(now)), month=total(month_start(now)))


def recent_sends(conn: sqlite3.Connection, since: float) -> list[float]:
    rows = conn.execute("SELECT sent_at FROM escalations WHERE sent_at > ?", (since,)).fetchall()
    return [row[0] for row in rows]


def calls(conn: sqlite3.Connection, limit: int = 50) -> list[dict[str, Any]]:
    """The latest calls, newest first, as the API shows them (never the request text)."""
    rows = conn.execute(
        """SELECT id, task_id, plan_id, task_key, why, state, attempts, next_try_at,
                  created_at, sent_at, answered_at, reask, provider, model, input_tokens,
                  output_tokens, estimated_cost, cost, outcome, error
           FROM escalations ORDER BY created_at DESC, id LIMIT ?""",
        (limit,),
    ).fetchall()
    return [dict(row) for row in rows]


def totals(conn: sqlite3.Connection) -> dict[str, Any]:
    row = conn.execute(
        # calls made (sent at least once); rows still queued or stopped by the budget are
        # in by_state
        """SELECT COALESCE(SUM(attempts > 0), 0) AS calls,
                  COALESCE(SUM(input_tokens), 0) AS input_tokens,
                  COALESCE(SUM(output_tokens), 0) AS output_tokens,
                  COALESCE(SUM(cost), 0) AS cost FROM escalations"""
    ).fetchone()
    by_state = conn.execute("SELECT state, COUNT(*) AS n FROM escalations GROUP BY state")
    return {**dict(row), "by_state": {r["state"]: r["n"] for r in by_state.fetchall()}}
