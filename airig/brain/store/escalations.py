"""The statements of the external tier (``airig/brain/escalation/``): the ``escalations``
table (``ledger.py`` says what a row is) and the task columns the escalation criteria, the
review and the sender read and write.

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

from airig.brain.store import dialect

DUE_STATES = ("queued", "sent", "over_budget")
OPEN_STATES = DUE_STATES  # a task with a row in one of these has a call to come
# Must repeat the WHERE of the partial index schema.ESCALATIONS makes, word for word:
# SQLite uses a partial index only for a query that holds its condition.
DUE_WHERE = """escalate = 'always' OR (escalate = 'on_failure'
             AND (context_tokens IS NULL OR task_errors >= 2))"""
# Must repeat the WHERE of the partial index schema.ESCALATIONS makes (tasks_review_due).
REVIEW_DUE = "escalate = 'on_failure' AND reviewed = 0 AND task_errors = 1"


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
    # an error may quote the provider's or the model's words: a NUL written escaped, as
    # PostgreSQL's text refuses one (request_json is JSON, where json.dumps escapes it)
    values = [v.replace("\x00", "\\x00") if isinstance(v, str) else v for v in columns.values()]
    conn.execute(f"UPDATE escalations SET {assignments} WHERE id = ?", (*values, request_id))


def get(conn: sqlite3.Connection, request_id: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM escalations WHERE id = ?", (request_id,)).fetchone()


def due(conn: sqlite3.Connection, now: float, limit: int = 20) -> list[sqlite3.Row]:
    """Calls to send now, oldest first (``sent`` ones: re-sent after a restart)."""
    return conn.execute(
        f"""SELECT * FROM escalations WHERE state IN ({", ".join("?" * len(DUE_STATES))})
            AND next_try_at <= ? ORDER BY created_at, id LIMIT ?""",
        (*DUE_STATES, now, limit),
    ).fetchall()


def spent_since(conn: sqlite3.Connection, since: float, excluding: str = "") -> float:
    """What was spent since ``since``: answered calls' cost, calls in flight (but
    ``excluding``) at their estimate."""
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
        """SELECT COALESCE(SUM(CASE WHEN attempts > 0 THEN 1 ELSE 0 END), 0) AS calls,
                  COALESCE(SUM(input_tokens), 0) AS input_tokens,
                  COALESCE(SUM(output_tokens), 0) AS output_tokens,
                  COALESCE(SUM(cost), 0) AS cost FROM escalations"""
    ).fetchone()
    by_state = conn.execute("SELECT state, COUNT(*) AS n FROM escalations GROUP BY state")
    return {**dict(row), "by_state": {r["state"]: r["n"] for r in by_state.fetchall()}}


# --- the criteria (criteria.py) ---


def sensitive_upstream(conn: sqlite3.Connection, task_id: int) -> list[str]:
    """Keys of the sensitive tasks ``task_id`` depends on, directly or through others."""
    rows = conn.execute(
        """WITH RECURSIVE up(id) AS (
               SELECT depends_on FROM deps WHERE task_id = ?
               UNION SELECT d.depends_on FROM deps d JOIN up ON d.task_id = up.id)
           SELECT t.key FROM tasks t JOIN up ON t.id = up.id
           WHERE t.sensitive = 1 ORDER BY t.key""",
        (task_id,),
    ).fetchall()
    return [str(row[0]) for row in rows]


def count_failure(conn: sqlite3.Connection, task_id: int, failures: int, result_hash: str) -> None:
    """A local failure counted on a task that goes on to escalate (or fail)."""
    conn.execute(
        "UPDATE tasks SET task_errors = ?, result_hash = ? WHERE id = ?",
        (failures, result_hash, task_id),
    )


def hold_for_review(conn: sqlite3.Connection, task_id: int, until: float, reason: str) -> None:
    """A waiting retry held back until ``until`` at least, saying ``reason``."""
    conn.execute(
        # the later of the two; a retry with no not_before yet is held until ``until``
        "UPDATE tasks SET not_before = CASE WHEN not_before > ? THEN not_before ELSE ? END,"
        " reason = ? WHERE id = ?",
        (until, until, reason, task_id),
    )


def due_to_divert(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """READY tasks the criteria have to look at (through the partial index)."""
    return conn.execute(f"SELECT * FROM tasks WHERE state = 'READY' AND ({DUE_WHERE})").fetchall()


def any_due_to_divert(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        f"SELECT 1 FROM tasks WHERE state = 'READY' AND ({DUE_WHERE}) LIMIT 1"
    ).fetchone()
    return row is not None


def set_context_tokens(conn: sqlite3.Connection, task_id: int, tokens: int) -> None:
    conn.execute("UPDATE tasks SET context_tokens = ? WHERE id = ?", (tokens, task_id))


# --- the brain model's review of a first failure (review.py) ---


def any_review_due(conn: sqlite3.Connection) -> bool:
    found = conn.execute(
        f"SELECT 1 FROM tasks WHERE state IN ('RETRY_WAIT', 'READY') AND ({REVIEW_DUE}) LIMIT 1"
    ).fetchone()
    return found is not None


def take_review_due(conn: sqlite3.Connection, limit: int) -> list[sqlite3.Row]:
    """Tasks whose first failure is to be judged, oldest first, each marked judged now."""
    rows = conn.execute(
        f"""SELECT * FROM tasks WHERE state IN ('RETRY_WAIT', 'READY') AND ({REVIEW_DUE})
            ORDER BY id LIMIT ?""",
        (limit,),
    ).fetchall()
    for task in rows:
        conn.execute("UPDATE tasks SET reviewed = 1 WHERE id = ?", (task["id"],))
    return rows


def release_review_hold(conn: sqlite3.Connection, task_id: int, now: float) -> None:
    """A retry held for the verdict: free to run now."""
    conn.execute(
        # the earlier of the two; none stays none (SQLite's MIN(NULL, x) is NULL too)
        "UPDATE tasks SET not_before = CASE WHEN not_before > ? THEN ? ELSE not_before END"
        " WHERE id = ?",
        (now, now, task_id),
    )


# --- the handoff (handoff.py), the sender and the reply ---


def attempt_events(
    conn: sqlite3.Connection, task_id: int, event_types: Sequence[str]
) -> list[sqlite3.Row]:
    """The task's events of these types (their ``body_json``), oldest first."""
    return conn.execute(
        f"""SELECT body_json FROM events WHERE task_id = ?
            AND event_type IN ({", ".join("?" * len(event_types))}) ORDER BY id""",
        (task_id, *event_types),
    ).fetchall()


def upstream_tasks(conn: sqlite3.Connection, task_id: int) -> list[sqlite3.Row]:
    """The tasks ``task_id`` depends on directly, by key."""
    return conn.execute(
        """SELECT t.* FROM tasks t
           JOIN deps d ON d.depends_on = t.id WHERE d.task_id = ? ORDER BY t.key""",
        (task_id,),
    ).fetchall()


def set_reason(conn: sqlite3.Connection, task_id: int, reason: str) -> None:
    """Why an escalated task waits (its ``reason``)."""
    conn.execute("UPDATE tasks SET reason = ? WHERE id = ?", (reason, task_id))


def task_keys(conn: sqlite3.Connection, ids: list[int]) -> list[str]:
    """The keys of these tasks, in id order."""
    return [
        row["key"]
        for row in conn.execute(
            f"SELECT key FROM tasks WHERE id IN ({dialect.json_values(conn, cast='bigint')})"
            " ORDER BY id",
            (json.dumps(ids),),
        ).fetchall()
    ]
