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
from collections.abc import Collection, Iterable

from airig.brain.scheduling.residency import ReadyTask
from airig.brain.store import candidates

COUNT_CAP = 64


def group_heads(
    conn: sqlite3.Connection, classes: Iterable[str], sensitive: bool = True,
    held: Collection[str] = (),
) -> list[ReadyTask]:  # fmt: skip
    """The oldest READY task of every (class, model, priority) group, with its group size.

    ``sensitive=False`` (a worker of an untrusted rig) leaves sensitive tasks out; the
    index has no ``sensitive`` column, so a probe then steps over the sensitive rows ahead
    of a group's first other one. ``held``: compute services whose tasks are left out
    (down: ``Placement.held``). The statements: ``store/candidates.py``."""
    return [
        ReadyTask(task_id, task_class, priority, ready_at or 0.0, model, count=size)
        for task_id, task_class, priority, ready_at, model, size in candidates.group_heads(
            conn, classes, sensitive, held, COUNT_CAP
        )
    ]
