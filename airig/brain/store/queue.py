"""Reads of the ``tasks`` table for the views of what waits and what runs: the dashboard's
queue, the worker list's counts, and a retried claim's live leases; and the READY tasks
that wait for a compute service that is down (``SERVICE_OF_TASK``, held by
``scheduling/placement.py``).

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import sqlite3

from airig.brain.store import dialect
from airig.common import task_types
from airig.common.protocol import TaskState as S

LIVE_STATES = (S.PENDING, S.READY, S.LEASED, S.RUNNING, S.RETRY_WAIT)

_LIVE_IN = ", ".join(f"'{state}'" for state in LIVE_STATES)
# Read on every dashboard poll: the tasks_queue index covers it (test_dashboard_api.py).
LIVE_GROUPS = f"""SELECT task_class, model, state, COUNT(*) AS n, MIN(ready_at) AS oldest
              FROM tasks WHERE state IN ({_LIVE_IN}) GROUP BY task_class, model, state"""
_TASK_COLUMNS = """plan_id, key, name, type, task_class, model, state, worker_id, attempt,
                   ready_at, started_at"""


def live_groups(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Reads the live task counts per class, model and state, with each group's oldest
    ``ready_at`` (``oldest``)."""
    return conn.execute(LIVE_GROUPS).fetchall()


def oldest_ready(conn: sqlite3.Connection) -> sqlite3.Row | None:
    """Reads the READY task that has waited longest (the dashboard's columns), or None."""
    row: sqlite3.Row | None = conn.execute(
        f"SELECT {_TASK_COLUMNS} FROM tasks WHERE state = 'READY' ORDER BY ready_at, id LIMIT 1"
    ).fetchone()
    return row


def leased(conn: sqlite3.Connection, limit: int) -> list[sqlite3.Row]:
    """Reads up to ``limit`` LEASED or RUNNING tasks (the dashboard's columns), oldest
    started first."""
    return conn.execute(
        f"SELECT {_TASK_COLUMNS} FROM tasks WHERE state IN ('LEASED', 'RUNNING') "
        "ORDER BY started_at, id LIMIT ?",
        (limit,),
    ).fetchall()


def running_per_worker(conn: sqlite3.Connection) -> dict[str, int]:
    """Reads how many LEASED or RUNNING tasks each worker holds."""
    rows = conn.execute(
        """SELECT worker_id, COUNT(*) AS n FROM tasks
           WHERE state IN ('LEASED', 'RUNNING') GROUP BY worker_id"""
    ).fetchall()
    return {row["worker_id"]: row["n"] for row in rows}


def ready_per_class(conn: sqlite3.Connection) -> dict[str, int]:
    """Reads how many READY tasks wait in each task class."""
    rows = conn.execute(
        "SELECT task_class, COUNT(*) AS n FROM tasks WHERE state = 'READY' GROUP BY task_class"
    ).fetchall()
    return {row["task_class"]: row["n"] for row in rows}


def claim_leases(conn: sqlite3.Connection, worker_id: str, claim_id: str) -> list[sqlite3.Row]:
    """Reads the live leases (LEASED, RUNNING) an earlier claim with this id granted this
    worker, whole rows, in no order."""
    # "<claim_id>-" <= lease_id < "<claim_id>." is the prefix (LIKE's, as a range the
    # tasks_lease index serves; '.' follows '-'; `+state`: not the queue index). A claim
    # id has letters and digits only.
    state = "state" if dialect.is_pg(conn) else "+state"  # SQLite's "not this index"
    return conn.execute(
        f"""SELECT * FROM tasks WHERE lease_id >= ? AND lease_id < ?
           AND {state} IN ('LEASED', 'RUNNING') AND worker_id = ?""",
        (f"{claim_id}-", f"{claim_id}.", worker_id),
    ).fetchall()


def escalated(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Reads the first 1000 tasks waiting ESCALATED (id, plan, key, reason, errors), each
    with its newest external call's state (``call_state``) and ``next_try_at``."""
    return conn.execute(
        """SELECT t.id, t.plan_id, t.key, t.reason, t.task_errors, e.state AS call_state,
                  e.next_try_at FROM tasks t
           LEFT JOIN escalations e ON e.id = (SELECT id FROM escalations
               WHERE task_id = t.id ORDER BY created_at DESC, id LIMIT 1)
           WHERE t.state = 'ESCALATED' ORDER BY t.id LIMIT 1000"""
    ).fetchall()


def _service_case(engine: str = dialect.SQLITE) -> str:
    """``task_types.service_of`` in SQL, written from the table: each type's
    ``model_service`` (Ollama for llm, embed, ocr and plan, ComfyUI for image, Whisper
    for transcribe), the one its payload names for resource; NULL for the rest."""
    whens = [
        f"WHEN type = '{name}' THEN "
        + (dialect.json_text(engine, "payload_json", "service") if spec.service_from_payload
           else f"'{spec.model_service}'")
        for name, spec in task_types.TASK_TYPES.items()
        if spec.service_from_payload or spec.model_service is not None
    ]  # fmt: skip
    return f"(CASE {' '.join(whens)} END)"


# The compute service a task's executor calls; ``service_of`` is the same rule in Python.
SERVICE_OF_TASK = _service_case()
_SERVICE_OF = {
    dialect.SQLITE: SERVICE_OF_TASK,
    dialect.POSTGRESQL: _service_case(dialect.POSTGRESQL),
}


def service_of(task_type: str, payload_json: str) -> str | None:
    """The compute service a task of this type and payload needs, or None."""
    return task_types.service_of(task_type, payload_json)


def not_needing(services: list[str], engine: str = dialect.SQLITE) -> tuple[str, list[str]]:
    """A WHERE condition (and its parameters) true for a task that needs none of
    ``services``, in ``engine``'s SQL."""
    marks = ", ".join("?" for _ in services)
    return f"COALESCE({_SERVICE_OF[engine]}, '') NOT IN ({marks})", list(services)


def waited_too_long(
    conn: sqlite3.Connection, service: str, ready_before: float
) -> list[sqlite3.Row]:
    """Reads the READY tasks needing ``service`` that became READY before ``ready_before``,
    whole rows."""
    return conn.execute(
        f"SELECT * FROM tasks WHERE state = 'READY' AND {_SERVICE_OF[dialect.of(conn)]} = ?"
        " AND ready_at < ?",
        (service, ready_before),
    ).fetchall()


def mark_waiting(conn: sqlite3.Connection, service: str, reason: str) -> int:
    """Sets ``reason`` on every READY task needing ``service``; how many changed."""
    return conn.execute(
        f"""UPDATE tasks SET reason = ? WHERE state = 'READY'
            AND {_SERVICE_OF[dialect.of(conn)]} = ? AND reason IS DISTINCT FROM ?""",
        (reason, service, reason),
    ).rowcount


def clear_waiting(conn: sqlite3.Connection, service: str, prefix: str) -> int:
    """Clears the ``reason`` starting with ``prefix`` of the READY tasks needing
    ``service`` (they no longer wait for it); how many changed."""
    return conn.execute(
        f"""UPDATE tasks SET reason = NULL WHERE state = 'READY'
            AND {_SERVICE_OF[dialect.of(conn)]} = ?
            AND substr(reason, 1, ?) = ?""",
        (service, len(prefix), prefix),
    ).rowcount
