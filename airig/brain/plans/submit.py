"""Store a validated plan: all tasks in one transaction, roots READY, the rest PENDING."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from typing import Any

from airig.brain.plans.models import PlanSpec
from airig.brain.plans.reuse import Reuse
from airig.brain.store import plans as plan_store
from airig.brain.store.events import Outbox, record_submitted
from airig.brain.store.fanout import GROUP_TYPE
from airig.common.protocol import TaskState as S


def body_hash(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def find_by_idempotency_key(conn: sqlite3.Connection, key: str) -> sqlite3.Row | None:
    return plan_store.by_idempotency_key(conn, key)


def prepare(
    plan: PlanSpec, tainted: set[str], default_timeout_s: float, reuse: Reuse | None = None
) -> str:
    """A plan's task rows as one JSON array (``store/plans.py`` TASK_COLUMNS), built before
    the transaction: this per-task Python once ran inside it, and every claim and
    heartbeat of the fleet waited behind it (benchmarks/fleet.py). ``reuse``: the glob
    items' fingerprints, and the tasks of unchanged items, stored SUCCEEDED with what an
    earlier plan's run of them left (``plans/reuse.py``)."""
    reuse = reuse or Reuse()
    rows = []
    for spec in plan.tasks:
        # a fan-out group is never READY: the brain ends it when its items have ended
        state = S.PENDING if spec.depends_on or spec.type == GROUP_TYPE else S.READY
        group, index = plan.members.get(spec.id, (None, None))
        carried = reuse.carried.get(spec.id)
        kept: tuple[Any, ...] = (None, None, None, None, "[]", None, None, 0)
        if carried is not None:
            state = S.SUCCEEDED
            kept = carried.columns()
        rows.append((
            spec.id, spec.name, spec.type, spec.task_class, json.dumps(spec.payload),
            spec.model, spec.priority, int(spec.id not in tainted), int(spec.sensitive),
            spec.timeout_s or default_timeout_s, spec.retry_count, state, spec.escalate,
            int(spec.allow_external), group, index, reuse.fingerprints.get(spec.id), *kept,
        ))  # fmt: skip
    deps = [(spec.id, dep) for spec in plan.tasks for dep in spec.depends_on]
    return json.dumps({"tasks": rows, "deps": deps})


def new_plan_id() -> str:
    return uuid.uuid4().hex[:12]


def insert_plan(
    conn: sqlite3.Connection,
    outbox: Outbox,
    plan: PlanSpec,
    tainted: set[str],
    now: float,
    *,
    submitted_by: str,
    digest: str,
    idempotency_key: str | None,
    default_timeout_s: float,
    owner: str | None = None,
    prepared: str | None = None,
    plan_id: str | None = None,
) -> str:
    """``prepared``: ``prepare(plan, tainted, default_timeout_s)``, made before the
    transaction; the plan's tasks, dependencies and events are then a few statements that
    SQLite runs without Python per task. ``plan_id``: one ``new_plan_id`` gave before
    (files of reused items were linked under it)."""
    plan_id = plan_id or new_plan_id()
    plan_store.insert_plan(
        conn, plan_id, plan.name, idempotency_key, digest, submitted_by, now,
        json.dumps(plan.fixes), owner,
    )  # fmt: skip
    rows = prepared if prepared is not None else prepare(plan, tainted, default_timeout_s)
    plan_store.insert_tasks(conn, plan_id, now, rows)
    record_submitted(conn, outbox, plan_id, now)
    outbox.work_ready = True
    return plan_id
