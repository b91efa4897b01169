"""Store a validated plan: all tasks in one transaction, roots READY, the rest PENDING."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from typing import cast

from airig.brain.plans.models import PlanSpec
from airig.brain.store.events import Outbox, record
from airig.brain.store.fanout import GROUP_TYPE
from airig.common.protocol import TaskState as S


def body_hash(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def find_by_idempotency_key(conn: sqlite3.Connection, key: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM plans WHERE idempotency_key = ?", (key,)).fetchone()


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
) -> str:
    plan_id = uuid.uuid4().hex[:12]
    conn.execute(
        """INSERT INTO plans (id, name, idempotency_key, body_hash, submitted_by, created_at,
               fixes_json, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
        (plan_id, plan.name, idempotency_key, digest, submitted_by, now,
         json.dumps(plan.fixes), owner),
    )  # fmt: skip
    ids: dict[str, int] = {}
    for spec in plan.tasks:
        # a fan-out group is never READY: the brain ends it when its items have ended
        state = S.PENDING if spec.depends_on or spec.type == GROUP_TYPE else S.READY
        group, index = plan.members.get(spec.id, (None, None))
        cursor = conn.execute(
            """INSERT INTO tasks (plan_id, key, name, type, task_class, payload_json, model,
                   priority, trusted, sensitive, timeout_s, retry_count, state, created_at,
                   ready_at, escalate, allow_external, fanout_group, fanout_index)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                plan_id, spec.id, spec.name, spec.type, spec.task_class,
                json.dumps(spec.payload), spec.model, spec.priority,
                int(spec.id not in tainted), int(spec.sensitive),
                spec.timeout_s or default_timeout_s, spec.retry_count, state, now,
                now if state == S.READY else None, spec.escalate, int(spec.allow_external),
                group, index,
            ),
        )  # fmt: skip
        # The INSERT just succeeded, which sets lastrowid (typeshed: ``int | None``, for
        # a cursor that has run none).
        ids[spec.id] = cast(int, cursor.lastrowid)
    for spec in plan.tasks:
        conn.executemany(
            "INSERT INTO deps (task_id, depends_on) VALUES (?, ?)",
            [(ids[spec.id], ids[dep]) for dep in spec.depends_on],
        )
    rows = conn.execute("SELECT * FROM tasks WHERE plan_id = ?", (plan_id,)).fetchall()
    for row in rows:
        record(conn, outbox, "task_submitted", row, now, to=row["state"])
    outbox.work_ready = True
    return plan_id
