"""Reads of a stored plan for its views: the ``plans`` row, its tasks, their counts and
dependencies, and its events; and the bulk inserts ``plans/submit.py`` stores a plan with.

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import sqlite3

from sqlalchemy.dialects import postgresql

from airig.brain.store import dialect, schema

# Read on every dashboard poll of the plans list: the index covers it (test_dashboard_api.py).
STATE_COUNTS = "SELECT state, COUNT(*) AS n FROM tasks WHERE plan_id = ? GROUP BY state"


def by_id(conn: sqlite3.Connection, plan_id: str) -> sqlite3.Row | None:
    """Reads a plan's whole row, or None when no plan has this id."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM plans WHERE id = ?", (plan_id,)
    ).fetchone()
    return row


def by_idempotency_key(conn: sqlite3.Connection, key: str) -> sqlite3.Row | None:
    """Reads the plan submitted with this idempotency key, or None."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM plans WHERE idempotency_key = ?", (key,)
    ).fetchone()
    return row


def insert_plan(
    conn: sqlite3.Connection, plan_id: str, name: str, idempotency_key: str | None,
    digest: str, submitted_by: str, now: float, fixes_json: str, owner: str | None,
) -> None:  # fmt: skip
    """A new plan's row (its tasks: ``insert_tasks``)."""
    conn.execute(
        """INSERT INTO plans (id, name, idempotency_key, body_hash, submitted_by, created_at,
               fixes_json, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
        (plan_id, name, idempotency_key, digest, submitted_by, now, fixes_json, owner),
    )


def newest(conn: sqlite3.Connection, owner: str | None, limit: int) -> list[sqlite3.Row]:
    """Reads the ``limit`` newest plans, whole rows: all (``owner`` None) or one owner's."""
    if owner is None:
        return conn.execute(
            "SELECT * FROM plans ORDER BY created_at DESC LIMIT ?", (limit,)
        ).fetchall()
    return conn.execute(
        "SELECT * FROM plans WHERE owner = ? ORDER BY created_at DESC LIMIT ?", (owner, limit)
    ).fetchall()


def tasks(conn: sqlite3.Connection, plan_id: str) -> list[sqlite3.Row]:
    """Reads every task row of a plan, whole, by id."""
    return conn.execute("SELECT * FROM tasks WHERE plan_id = ? ORDER BY id", (plan_id,)).fetchall()


def state_counts(conn: sqlite3.Connection, plan_id: str) -> dict[str, int]:
    """Reads how many of a plan's tasks are in each state (one grouped read, no task rows)."""
    return {row["state"]: row["n"] for row in conn.execute(STATE_COUNTS, (plan_id,)).fetchall()}


def dependencies(conn: sqlite3.Connection, plan_id: str) -> list[sqlite3.Row]:
    """Reads a plan's dependencies: each dependent's ``task_id`` and the ``key`` it waits on."""
    return conn.execute(
        """SELECT d.task_id, u.key FROM deps d JOIN tasks u ON u.id = d.depends_on
           WHERE u.plan_id = ?""",
        (plan_id,),
    ).fetchall()


def task(conn: sqlite3.Connection, plan_id: str, key: str) -> sqlite3.Row | None:
    """Reads the whole row of a plan's task by its key, or None."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM tasks WHERE plan_id = ? AND key = ?", (plan_id, key)
    ).fetchone()
    return row


def event_bodies(conn: sqlite3.Connection, plan_id: str) -> list[str]:
    """Reads a plan's recorded events (their JSON bodies), oldest first."""
    rows = conn.execute(
        "SELECT body_json FROM events WHERE plan_id = ? ORDER BY id", (plan_id,)
    ).fetchall()
    return [row["body_json"] for row in rows]


# A plan's tasks and dependencies: one statement each over a JSON document of rows
# (plans/submit.py ``prepare``, built before the transaction). executemany steps once per
# row, and each step gives the GIL away and waits to get it back (up to the switch
# interval while another thread computes): 500 tasks held the write lock 30-70 ms at 500
# workers, every claim and heartbeat behind them (benchmarks/fleet.py). One step each here.
TASK_COLUMNS = (
    "key", "name", "type", "task_class", "payload_json", "model", "priority", "trusted",
    "sensitive", "timeout_s", "retry_count", "state", "escalate", "allow_external",
    "fanout_group", "fanout_index",
    # a glob item's fingerprint, and what a reused one carries (plans/reuse.py)
    "fingerprint", "reused_from", "reason", "output_json", "output_file", "files_json",
    "written_json", "result_hash", "tainted_output",
)  # fmt: skip
_STATE = TASK_COLUMNS.index("state")
_INSERT_TASKS = (
    f"INSERT INTO tasks (plan_id, created_at, ready_at, finished_at, {', '.join(TASK_COLUMNS)})"
    f" SELECT ?1, ?2, CASE WHEN value ->> {_STATE} = 'READY' THEN ?2 END,"
    f" CASE WHEN value ->> {_STATE} = 'SUCCEEDED' THEN ?2 END, "
    + ", ".join(f"value ->> {n}" for n in range(len(TASK_COLUMNS)))
    + " FROM json_each(?3, '$.tasks') ORDER BY key + 0"  # json_each's key: the row's index
)
_INSERT_DEPS = """
INSERT INTO deps (task_id, depends_on)
SELECT t.id, d.id FROM json_each(?2, '$.deps') AS pair
CROSS JOIN tasks AS t ON t.plan_id = ?1 AND t.key = pair.value ->> 0
CROSS JOIN tasks AS d ON d.plan_id = ?1 AND d.key = pair.value ->> 1
"""
# CROSS JOIN fixes the loop order (SQLite's rule): the pairs outside, then two lookups in
# the (plan_id, key) index. Left to the planner it scanned the plan's tasks twice and read
# the JSON per pair of rows: 19 s for 500 tasks.


def _pg_type(column: str) -> str:
    """The column's type on PostgreSQL, which casts ``->>``'s text only when told to."""
    return str(schema.tasks.c[column].type.compile(dialect=postgresql.dialect()))


# PostgreSQL: the same two statements, the rows from jsonb in their order (ORDINALITY), each
# value cast to its column's type (SQLite converts by the column's affinity itself).
_INSERT_TASKS_PG = (
    f"INSERT INTO tasks (plan_id, created_at, ready_at, finished_at, {', '.join(TASK_COLUMNS)})"
    f" SELECT ?1, ?2, CASE WHEN value ->> {_STATE} = 'READY' THEN ?2 END,"
    f" CASE WHEN value ->> {_STATE} = 'SUCCEEDED' THEN ?2 END, "
    + ", ".join(f"(value ->> {n})::{_pg_type(c)}" for n, c in enumerate(TASK_COLUMNS))
    + " FROM jsonb_array_elements((?3)::jsonb -> 'tasks') WITH ORDINALITY AS r(value, n)"
    " ORDER BY n"
)
_INSERT_DEPS_PG = """
INSERT INTO deps (task_id, depends_on)
SELECT t.id, d.id FROM jsonb_array_elements((?2)::jsonb -> 'deps') AS pair(value)
JOIN tasks AS t ON t.plan_id = ?1 AND t.key = pair.value ->> 0
JOIN tasks AS d ON d.plan_id = ?1 AND d.key = pair.value ->> 1
"""


def insert_tasks(conn: sqlite3.Connection, plan_id: str, now: float, prepared: str) -> None:
    """A new plan's tasks and dependencies, from ``prepared``: ``{"tasks": [[one value per
    TASK_COLUMNS], ...], "deps": [[task key, key it depends on], ...]}``."""
    pg = dialect.is_pg(conn)
    conn.execute(_INSERT_TASKS_PG if pg else _INSERT_TASKS, (plan_id, now, prepared))
    conn.execute(_INSERT_DEPS_PG if pg else _INSERT_DEPS, (plan_id, prepared))
