"""The READY queue's group heads for a claim (``scheduling/candidates.py`` says why): a
loose index scan over ``tasks_ready_heads`` (``schema.READY_HEADS``), one indexed probe per
(class, model, priority) group and its size counted up to a cap.

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Collection, Iterable, Iterator

from airig.brain.store import dialect
from airig.brain.store.queue import not_needing

_NEXT_MODEL = """SELECT model FROM tasks WHERE state = 'READY' AND task_class = ?
                 AND model > ? ORDER BY model LIMIT 1"""
_NEXT_HEAD = """SELECT id, priority, ready_at FROM tasks WHERE state = 'READY'
                AND task_class = ? AND model IS NOT DISTINCT FROM ? AND priority > ? {only}
                ORDER BY priority, ready_at, id LIMIT 1"""
_GROUP_SIZE = """SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE state = 'READY'
                 AND task_class = ? AND model IS NOT DISTINCT FROM ? AND priority = ? {only}
                 LIMIT ?) AS g"""
# (next head, group size) for a trusted worker (covered by the index: no row is read)
# and for a worker of an untrusted rig (each probed row is read for its flags): no
# sensitive task, and no `plan` task: a plan task's answer becomes tasks of this rig (a
# goal's draft is approved into a plan, a grown plan runs its tasks), so only the brain's
# own rig and `--trust full` rigs draft or grow plans.
_UNTRUSTED = "AND sensitive = 0 AND type <> 'plan'"
_QUERIES = {
    True: (_NEXT_HEAD.format(only=""), _GROUP_SIZE.format(only="")),
    False: (_NEXT_HEAD.format(only=_UNTRUSTED), _GROUP_SIZE.format(only=_UNTRUSTED)),
}


def _models(conn: sqlite3.Connection, task_class: str) -> Iterator[str | None]:
    yield None
    last = ""
    while (row := conn.execute(_NEXT_MODEL, (task_class, last)).fetchone()) is not None:
        last = row[0]
        yield last


def _pg_form(query: str, model: str | None) -> str:
    return _pg_text(query, model is None)


@functools.lru_cache(maxsize=32)  # a claim asks for it per group: rewritten once each
def _pg_text(query: str, null_model: bool) -> str:
    """The statement as PostgreSQL's planner serves it from ``tasks_ready_heads``: "model
    IS NULL" or "model = $2" (never IS NOT DISTINCT FROM, which it only filters with), and
    the index's whole order (IS NULL is no equality to its planner, which otherwise sorts
    every READY row of the class: 2 ms at 5,000, against 0.07)."""
    query = query.replace(
        "model IS NOT DISTINCT FROM ?",
        "model IS NULL AND (?)::text IS NULL" if null_model else "model = ?",
    )
    return query.replace(
        "ORDER BY priority, ready_at, id",
        "ORDER BY state, task_class, model, priority, ready_at, id",
    )


def group_heads(
    conn: sqlite3.Connection, classes: Iterable[str], sensitive: bool, held: Collection[str],
    cap: int,
) -> list[tuple[int, str, int, float | None, str | None, int]]:  # fmt: skip
    """(task id, class, priority, ready_at, model, group size up to ``cap``) of the oldest
    READY task of every (class, model, priority) group; ``sensitive=False`` leaves sensitive
    and ``plan`` tasks out, ``held`` the tasks of those compute services."""
    heads = []
    next_head, group_size = _QUERIES[sensitive]
    extra: list[str] = []
    if held:
        condition, extra = not_needing(sorted(held), dialect.of(conn))
        next_head = next_head.replace("ORDER BY", f"AND {condition} ORDER BY")
        group_size = group_size.replace(" LIMIT ?", f" AND {condition} LIMIT ?")
    pg = dialect.is_pg(conn)
    # PostgreSQL, brains side by side: each head is locked as it is read and a head
    # another brain's claim holds is passed over for the next task of its group (SKIP
    # LOCKED, below LIMIT 1: the next unlocked one), so two claims never pick one task
    # and neither waits for the other. The heads not leased stay locked until this
    # transaction ends; another claim meanwhile takes the next task of their group.
    lock = dialect.for_update(conn, skip_locked=True)
    if lock:
        next_head += lock
    for task_class in sorted(classes):
        for model in _models(conn, task_class):
            head, size_of = next_head, group_size
            if pg:
                head, size_of = (_pg_form(q, model) for q in (next_head, group_size))
            priority = 0
            while row := conn.execute(head, (task_class, model, priority, *extra)).fetchone():
                task_id, priority, ready_at = row
                size = conn.execute(size_of, (task_class, model, priority, *extra, cap)).fetchone()[
                    0
                ]
                heads.append((task_id, task_class, priority, ready_at, model, size))
    return heads
