"""The statements of a growing plan (``planner/grow.py``, ``add_subtasks``): the tasks a
proposal names, the tasks it adds with their dependencies, in a savepoint of their own.

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from airig.brain.store import dialect


def downstream(conn: sqlite3.Connection, task_id: int) -> dict[int, str]:
    """Every task that waits, directly or not, for ``task_id``: {uid: key}."""
    rows = conn.execute(
        """WITH RECURSIVE down(id) AS (
               SELECT task_id FROM deps WHERE depends_on = ?
               UNION SELECT d.task_id FROM deps d JOIN down ON d.depends_on = down.id)
           SELECT t.id, t.key FROM tasks t JOIN down ON down.id = t.id""",
        (task_id,),
    ).fetchall()
    return {row["id"]: row["key"] for row in rows}


def task_count(conn: sqlite3.Connection, plan_id: str) -> int:
    (existing,) = conn.execute(
        "SELECT COUNT(*) FROM tasks WHERE plan_id = ?", (plan_id,)
    ).fetchone()
    return int(existing)


def tasks_named(conn: sqlite3.Connection, plan_id: str, keys: list[str]) -> list[sqlite3.Row]:
    """The plan's tasks of these keys, whole rows."""
    return conn.execute(
        f"SELECT * FROM tasks WHERE plan_id = ? AND key IN ({dialect.json_values(conn)})",
        (plan_id, dialect.json_list(keys)),
    ).fetchall()


def keys_taken(conn: sqlite3.Connection, plan_id: str, keys: list[str]) -> list[sqlite3.Row]:
    """Which of these keys the plan already has (rows of ``key``)."""
    return conn.execute(
        f"SELECT key FROM tasks WHERE plan_id = ? AND key IN ({dialect.json_values(conn)})",
        (plan_id, dialect.json_list(keys)),
    ).fetchall()


def states_by_key(conn: sqlite3.Connection, plan_id: str) -> dict[str, str]:
    return dict(
        conn.execute("SELECT key, state FROM tasks WHERE plan_id = ?", (plan_id,)).fetchall()
    )


def ids_by_key(conn: sqlite3.Connection, plan_id: str) -> dict[str, int]:
    return dict(conn.execute("SELECT key, id FROM tasks WHERE plan_id = ?", (plan_id,)).fetchall())


def insert_task(
    conn: sqlite3.Connection, plan_id: str, spec: Any, trusted: bool, timeout_s: float,
    state: str, now: float, ready_at: float | None, origin: str, depth: int,
) -> int:  # fmt: skip
    """A task ``spec`` (``plans/models.py`` ``TaskSpec``) added to a running plan; its uid."""
    row = conn.execute(
        """INSERT INTO tasks (plan_id, key, name, type, task_class, payload_json, model,
               priority, trusted, sensitive, timeout_s, retry_count, state, created_at,
               ready_at, origin, depth, escalate, allow_external)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           RETURNING id""",
        (
            plan_id, spec.id, spec.name, spec.type, spec.task_class,
            json.dumps(spec.payload), spec.model, spec.priority,
            int(trusted), int(spec.sensitive), timeout_s, spec.retry_count, state, now,
            ready_at, origin, depth, spec.escalate, int(spec.allow_external),
        ),
    ).fetchone()  # fmt: skip
    return int(row["id"])  # RETURNING: PostgreSQL has no lastrowid


def add_deps(conn: sqlite3.Connection, pairs: Iterable[tuple[int, int]]) -> None:
    """(task uid, uid it depends on) pairs."""
    conn.executemany("INSERT INTO deps (task_id, depends_on) VALUES (?, ?)", pairs)


def add_deps_if_missing(conn: sqlite3.Connection, pairs: Iterable[tuple[int, int]]) -> None:
    conn.executemany(
        "INSERT INTO deps (task_id, depends_on) VALUES (?, ?) ON CONFLICT DO NOTHING", pairs
    )


def dependents(conn: sqlite3.Connection, task_id: int) -> list[sqlite3.Row]:
    """The tasks that depend on ``task_id`` directly (id, state)."""
    return conn.execute(
        "SELECT t.id, t.state FROM tasks t JOIN deps d ON d.task_id = t.id WHERE d.depends_on = ?",
        (task_id,),
    ).fetchall()


@contextmanager
def savepoint(conn: sqlite3.Connection) -> Iterator[None]:
    """The writes inside it are undone whole when it raises; the caller's transaction goes on."""
    conn.execute("SAVEPOINT grow")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK TO grow")
        conn.execute("RELEASE grow")
        raise
    conn.execute("RELEASE grow")


def tasks_by_id(conn: sqlite3.Connection, ids: list[int]) -> list[sqlite3.Row]:
    """These tasks, whole rows, in id order."""
    return conn.execute(
        f"SELECT * FROM tasks WHERE id IN ({dialect.json_values(conn, cast='bigint')}) ORDER BY id",
        (json.dumps(ids),),
    ).fetchall()


def set_payload(conn: sqlite3.Connection, task_id: int, payload_json: str) -> None:
    """A `plan` task's payload as its next attempt gets it (its ``previous_errors``)."""
    conn.execute("UPDATE tasks SET payload_json = ? WHERE id = ?", (payload_json, task_id))
