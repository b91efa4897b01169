"""The task state machine. Every function runs inside the caller's transaction.

    PENDING -> READY -> LEASED -> RUNNING -> SUCCEEDED
    LEASED/RUNNING -> RETRY_WAIT -> READY        (retryable error, lost lease, timeout)
    LEASED/RUNNING -> READY                      (worker released its attempt)
    READY/LEASED/RUNNING/RETRY_WAIT -> ESCALATED -> SUCCEEDED | FAILED   (external tier)
    any non-terminal -> FAILED | CANCELLED       (and all transitive dependents
                                                  -> UPSTREAM_FAILED, naming the root)

Lease columns (worker_id, attempt, lease_id) stay on the row after an attempt ends so a
replay of the report that ended it can be recognised (``result_hash``); a lease is live
only while the state is LEASED or RUNNING.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from airig.brain.store import dialect, fanout
from airig.brain.store.events import Outbox, record
from airig.brain.store.retry import INFRA, RetryPolicy
from airig.common.protocol import TaskState as S

ALLOWED = {
    S.PENDING: {S.READY, S.UPSTREAM_FAILED, S.CANCELLED},
    S.READY: {S.LEASED, S.FAILED, S.UPSTREAM_FAILED, S.CANCELLED, S.ESCALATED},
    S.LEASED: {S.RUNNING, S.READY, S.RETRY_WAIT, S.FAILED, S.SUCCEEDED, S.CANCELLED, S.ESCALATED},
    S.RUNNING: {S.SUCCEEDED, S.READY, S.RETRY_WAIT, S.FAILED, S.CANCELLED, S.ESCALATED},
    S.RETRY_WAIT: {S.READY, S.UPSTREAM_FAILED, S.CANCELLED, S.ESCALATED},
    # The external tier's answer, its refusal, or a cancel (airig/brain/escalation/).
    S.ESCALATED: {S.SUCCEEDED, S.FAILED, S.CANCELLED},
}
# A fan-out group (store/fanout.py) waits PENDING and ends when its items have: no worker
# ever holds it, so it never is READY.
GROUP_ALLOWED = {S.PENDING: {S.SUCCEEDED, S.FAILED, S.UPSTREAM_FAILED, S.CANCELLED}}


class InvalidTransition(Exception):
    """A programming error: the state machine does not allow this move."""


class RowMoved(Exception):
    """PostgreSQL: another brain's transaction changed the task between this one's read
    and its write (the write found the row in another state). Nothing of the change may
    stand: the caller runs it again from a fresh read (``groupcommit.py``)."""


def get_task(conn: sqlite3.Connection, task_id: int) -> sqlite3.Row | None:
    """The task's row; inside a PostgreSQL write transaction, locked until its commit
    (a fenced write decides on this row: another brain's write to it waits, and this
    one reads the row as that one left it)."""
    if not 0 < task_id < 2**63:  # SQLite integers are 64-bit; larger ids name no task
        return None
    return conn.execute(
        "SELECT * FROM tasks WHERE id = ?" + dialect.for_update(conn), (task_id,)
    ).fetchone()


def require_task(conn: sqlite3.Connection, task_id: int) -> sqlite3.Row:
    """The row of a task this transaction has already seen (read again after a write).

    Only retention deletes tasks, those of finished plans, in its own transactions, so
    it is there; LookupError rather than a TypeError on ``None`` if that ever stops
    being true.
    """
    task = get_task(conn, task_id)
    if task is None:
        raise LookupError(f"task {task_id} is not in the database")
    return task


def transition(
    conn: sqlite3.Connection,
    outbox: Outbox,
    task: sqlite3.Row,
    to: str,
    now: float,
    event_type: str,
    event: dict[str, Any] | None = None,
    **columns: Any,
) -> sqlite3.Row:
    """Move one task to ``to``, update ``columns``, record the event; the new row."""
    allowed = GROUP_ALLOWED if task["type"] == fanout.GROUP_TYPE else ALLOWED
    if to not in allowed.get(task["state"], set()):
        raise InvalidTransition(f"task {task['id']}: {task['state']} -> {to}")
    columns["state"] = to
    if to in S.TERMINAL:
        columns.setdefault("finished_at", now)
    _escape_nul(columns)
    assignments = ", ".join(f"{name} = ?" for name in columns)
    # RETURNING gives the new row without a second query (SQLite >= 3.35).
    if dialect.locks_rows(conn):
        # Brains write side by side on PostgreSQL: the move only from the state it was
        # read in (a claim and a retry's promotion both moving one READY row would hand
        # it out twice); another state means another brain moved it first (RowMoved).
        updated = conn.execute(
            f"UPDATE tasks SET {assignments} WHERE id = ? AND state = ? RETURNING *",
            (*columns.values(), task["id"], task["state"]),
        ).fetchone()
        if updated is None:
            raise RowMoved(f"task {task['id']} left {task['state']} before this write")
    else:
        updated = conn.execute(
            f"UPDATE tasks SET {assignments} WHERE id = ? RETURNING *",
            (*columns.values(), task["id"]),
        ).fetchone()
    details = {"from": task["state"], "to": to, "worker_id": updated["worker_id"]}
    details["reason"] = columns.get("reason")
    details.update(event or {})
    record(conn, outbox, event_type, updated, now, **details)
    if to == S.READY:
        outbox.work_ready = True
    if to in S.TERMINAL and updated["fanout_group"] is not None:
        _item_ended(conn, outbox, updated, now)
    return updated


# Columns that quote words from outside the brain (a worker's error, a model's answer, the
# external tier's failure): PostgreSQL's text refuses a NUL, and the whole write with it.
_QUOTING = ("error", "error_type", "reason")


def _escape_nul(columns: dict[str, Any]) -> None:
    for name in _QUOTING:
        value = columns.get(name)
        if isinstance(value, str) and "\x00" in value:
            columns[name] = value.replace("\x00", "\\x00")


def _item_ended(conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, now: float) -> None:
    """A fan-out item's task ended: when it was the group's last, the group ends."""
    group = fanout.group_of(conn, task)
    if group is None or group["state"] != S.PENDING:
        return
    if fanout.has_unfinished_items(conn, task["plan_id"], group["key"]):
        return
    finish_group(conn, outbox, group, now)


def finish_group(conn: sqlite3.Connection, outbox: Outbox, group: sqlite3.Row, now: float) -> None:
    """End a group whose items have all ended: SUCCEEDED when one item or more fully
    succeeded (or it had none), its dependents released; else FAILED, theirs
    UPSTREAM_FAILED. A failing item never stops the others."""
    total, ok, tainted, first = fanout.ending(
        group, fanout.item_tasks(conn, group["plan_id"], group["key"])
    )
    summary = f"{ok} of {total} items succeeded"
    if ok or not total:
        done = transition(
            conn, outbox, group, S.SUCCEEDED, now, "task_completed",
            {"items": total, "succeeded": ok}, reason=summary, tainted_output=int(tainted),
            error=None,
        )  # fmt: skip
        release_dependents(conn, outbox, done, now)
        return
    dead = fanout.dead_upstream(conn, group)
    if dead is not None:  # its items ended because the group's own upstream did
        reason = f"upstream {dead['key']} {dead['state']}"
        error = dead["error"] or reason
        ended = transition(
            conn, outbox, group, S.UPSTREAM_FAILED, now, "task_upstream_failed",
            {"error": error}, reason=reason, error=error,
        )  # fmt: skip
        cascade(conn, outbox, ended, now)
        return
    error = f"none of the {total} items of group {group['key']} succeeded; {first}"
    fail_terminal(conn, outbox, group, now, "fanout_failed", error[:2000], summary)


def release_dependents(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, now: float
) -> list[sqlite3.Row]:
    """Dependents whose every upstream has succeeded become READY; their new rows."""
    # A group is never READY: its items wait on its dependencies themselves, and a
    # ``from`` group is expanded by the caller (planner/fanout.py).
    if dialect.locks_rows(conn):
        # Two siblings completing at once in two brains: under READ COMMITTED neither
        # sees the other's success, and their child would stay PENDING. Each locks the
        # waiting children first; the second waits for the first's commit, and its next
        # statement (a new snapshot) sees both upstreams done: READY once.
        conn.execute(
            """SELECT t.id FROM tasks t JOIN deps d ON d.task_id = t.id
               WHERE d.depends_on = ? AND t.state = 'PENDING' ORDER BY t.id FOR UPDATE OF t""",
            (task["id"],),
        ).fetchall()
    rows = conn.execute(
        """SELECT t.* FROM tasks t JOIN deps d ON d.task_id = t.id
           WHERE d.depends_on = ? AND t.state = 'PENDING' AND t.type != 'group' AND NOT EXISTS (
               SELECT 1 FROM deps d2 JOIN tasks u ON u.id = d2.depends_on
               WHERE d2.task_id = t.id AND u.state != 'SUCCEEDED')""",
        (task["id"],),
    ).fetchall()
    return [transition(conn, outbox, row, S.READY, now, "task_ready", ready_at=now) for row in rows]


def cascade(conn: sqlite3.Connection, outbox: Outbox, root: sqlite3.Row, now: float) -> int:
    """Mark every transitive dependent of ``root`` UPSTREAM_FAILED; how many were marked."""
    reason = f"upstream {root['key']} {root['state']}"
    error = root["error"] or reason
    marked = 0
    frontier = [root["id"]]
    while frontier:
        current = frontier.pop()
        rows = conn.execute(
            "SELECT t.* FROM tasks t JOIN deps d ON d.task_id = t.id WHERE d.depends_on = ?",
            (current,),
        ).fetchall()
        for row in rows:
            # read again: a group that ended within this cascade may have marked it already
            row = require_task(conn, row["id"])
            if row["state"] in S.TERMINAL:
                continue
            transition(
                conn, outbox, row, S.UPSTREAM_FAILED, now, "task_upstream_failed",
                {"error": error}, reason=reason, error=error,
            )  # fmt: skip
            marked += 1
            frontier.append(row["id"])
    return marked


def fail_terminal(
    conn: sqlite3.Connection,
    outbox: Outbox,
    task: sqlite3.Row,
    now: float,
    error_type: str,
    error: str,
    reason: str,
) -> sqlite3.Row:
    failed = transition(
        conn, outbox, task, S.FAILED, now, "task_failed", {"error": error},
        error_type=error_type, error=error, reason=reason,
    )  # fmt: skip
    cascade(conn, outbox, failed, now)
    return failed


def retry_or_fail(
    conn: sqlite3.Connection,
    outbox: Outbox,
    task: sqlite3.Row,
    now: float,
    policy: RetryPolicy,
    kind: str,
    error_type: str,
    error: str,
    retryable: bool = True,
    **columns: Any,
) -> sqlite3.Row:
    """Charge one failure of ``kind`` to its budget, then RETRY_WAIT or FAILED."""
    counter = "infra_errors" if kind == INFRA else "task_errors"
    failures = task[counter] + 1
    conn.execute(f"UPDATE tasks SET {counter} = ? WHERE id = ?", (failures, task["id"]))
    task = require_task(conn, task["id"])
    if not policy.decide(kind, failures, task["retry_count"], error_type, retryable):
        if kind == INFRA:
            reason = f"infrastructure retry budget ({policy.infra_budget}) used up"
        elif failures > task["retry_count"]:
            reason = f"retry budget ({task['retry_count']}) used up"
        else:
            reason = f"{error_type} is not retryable"
        if columns:
            _set(conn, task["id"], **columns)
        return fail_terminal(conn, outbox, task, now, error_type, error, reason)
    delay = policy.backoff(failures)
    outbox.metric("retries", kind=kind)
    return transition(
        conn, outbox, task, S.RETRY_WAIT, now, "task_retry_scheduled",
        {"error": error, "retry_in_s": round(delay, 3)},
        not_before=now + delay, error_type=error_type, error=error,
        reason=f"{kind} error {failures}, retry in {delay:.1f}s", **columns,
    )  # fmt: skip


def _set(conn: sqlite3.Connection, task_id: int, **columns: Any) -> None:
    _escape_nul(columns)
    assignments = ", ".join(f"{name} = ?" for name in columns)
    conn.execute(f"UPDATE tasks SET {assignments} WHERE id = ?", (*columns.values(), task_id))


def promote_due(conn: sqlite3.Connection, outbox: Outbox, now: float) -> None:
    """RETRY_WAIT tasks whose backoff has passed become READY (once per transaction)."""
    if outbox.memo.get("promoted_at") == now:
        return
    outbox.memo["promoted_at"] = now
    # PostgreSQL: rows another brain is promoting (or cancelling) are left to it
    rows = conn.execute(
        "SELECT * FROM tasks WHERE state = 'RETRY_WAIT' AND not_before <= ?"
        + dialect.for_update(conn, skip_locked=True),
        (now,),
    ).fetchall()
    for row in rows:
        transition(conn, outbox, row, S.READY, now, "task_ready", ready_at=now)


def cancel_task(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, now: float, reason: str
) -> bool:
    """Cancel one task (its dependents become UPSTREAM_FAILED); False if already final."""
    if task["state"] in S.TERMINAL:
        return False
    cancelled = transition(
        conn, outbox, task, S.CANCELLED, now, "task_cancelled", reason=reason, error=reason
    )
    cascade(conn, outbox, cancelled, now)
    if task["type"] == fanout.GROUP_TYPE:  # its items go with it
        for item in fanout.cancel_targets(conn, task):
            cancel_task(conn, outbox, require_task(conn, item["id"]), now, reason)
    return True


def cancel_plan(conn: sqlite3.Connection, outbox: Outbox, plan_id: str, now: float) -> int:
    """Cancel every unfinished task of a plan; how many were cancelled."""
    conn.execute("UPDATE plans SET cancelled = 1 WHERE id = ?", (plan_id,))
    # groups first: an item cancelled after its group does not end the group again
    rows = conn.execute(
        """SELECT * FROM tasks WHERE plan_id = ? AND state NOT IN (?, ?, ?, ?)
           ORDER BY type = 'group' DESC, id""",
        (plan_id, *sorted(S.TERMINAL)),
    ).fetchall()
    for row in rows:
        transition(
            conn, outbox, row, S.CANCELLED, now, "task_cancelled",
            reason="plan cancelled", error="plan cancelled",
        )  # fmt: skip
    return len(rows)
