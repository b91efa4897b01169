"""READY candidates for a claim, without reading the whole queue.

Within one (task_class, model, priority) group the residency policy always ranks the
oldest task first (same class, model and priority; more aging; earlier FIFO), so a claim
needs only each group's head and the group's size. A loose index scan over
``tasks_ready_heads`` walks the groups with one indexed probe each, so a claim costs
O(groups x log n) instead of reading every READY row (the first version read all of
them: 0.9 s per claim with 100k tasks queued). Group sizes are counted up to
``COUNT_CAP``: beyond that, a backlog is "large" for every decision the policy makes
(64 tasks of a model is over half an hour of work at the default 30 s estimate, more than
any reload), and counting further would make claims grow with the queue again.

While a compute service is down (``Placement.held``), its tasks are left out of the
heads and the counts: each probed row is then read for its type, as for an untrusted
worker, only for as long as the outage lasts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable, Iterator

from airig.brain.scheduling.residency import ReadyTask
from airig.brain.store.queue import not_needing

INDEX = """CREATE INDEX IF NOT EXISTS tasks_ready_heads
           ON tasks(state, task_class, model, priority, ready_at, id)"""
COUNT_CAP = 64

_NEXT_MODEL = """SELECT model FROM tasks WHERE state = 'READY' AND task_class = ?
                 AND model > ? ORDER BY model LIMIT 1"""
_NEXT_HEAD = """SELECT id, priority, ready_at FROM tasks WHERE state = 'READY'
                AND task_class = ? AND model IS ? AND priority > ? {only}
                ORDER BY priority, ready_at, id LIMIT 1"""
_GROUP_SIZE = """SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE state = 'READY'
                 AND task_class = ? AND model IS ? AND priority = ? {only} LIMIT ?)"""
# (next head, group size) for a trusted worker (covered by the index: no row is read)
# and for a worker of an untrusted rig (each probed row is read for its flags): no
# sensitive task, and no `plan` task: a plan task's answer becomes tasks of this rig (a
# goal's draft is approved into a plan, a grown plan runs its tasks), so only the brain's
# own rig and `--trust full` rigs draft or grow plans.
_UNTRUSTED = "AND NOT sensitive AND type <> 'plan'"
_QUERIES = {
    True: (_NEXT_HEAD.format(only=""), _GROUP_SIZE.format(only="")),
    False: (_NEXT_HEAD.format(only=_UNTRUSTED), _GROUP_SIZE.format(only=_UNTRUSTED)),
}


def ensure_index(conn: sqlite3.Connection) -> None:
    conn.execute(INDEX)


def _models(conn: sqlite3.Connection, task_class: str) -> Iterator[str | None]:
    yield None
    last = ""
    while (row := conn.execute(_NEXT_MODEL, (task_class, last)).fetchone()) is not None:
        last = row[0]
        yield last


def group_heads(
    conn: sqlite3.Connection, classes: Iterable[str], sensitive: bool = True,
    held: Collection[str] = (),
) -> list[ReadyTask]:  # fmt: skip
    """The oldest READY task of every (class, model, priority) group, with its group size.

    ``sensitive=False`` (a worker of an untrusted rig) leaves sensitive tasks out; the
    index has no ``sensitive`` column, so a probe then steps over the sensitive rows ahead
    of a group's first other one. ``held``: compute services whose tasks are left out
    (down: ``Placement.held``)."""
    heads = []
    next_head, group_size = _QUERIES[sensitive]
    extra: list[str] = []
    if held:
        condition, extra = not_needing(sorted(held))
        next_head = next_head.replace("ORDER BY", f"AND {condition} ORDER BY")
        group_size = group_size.replace(" LIMIT ?", f" AND {condition} LIMIT ?")
    for task_class in sorted(classes):
        for model in _models(conn, task_class):
            priority = 0
            while row := conn.execute(next_head, (task_class, model, priority, *extra)).fetchone():
                task_id, priority, ready_at = row
                size = conn.execute(
                    group_size, (task_class, model, priority, *extra, COUNT_CAP)
                ).fetchone()[0]
                heads.append(
                    ReadyTask(task_id, task_class, priority, ready_at or 0.0, model, count=size)
                )
    return heads
