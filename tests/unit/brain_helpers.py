"""Shared helpers for the brain's unit tests: a Brain on a temp dir, plans, claims."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from airig.brain import leases
from airig.brain.plans.submit import insert_plan
from airig.brain.plans.validate import Limits, validate_plan
from airig.brain.scheduling.workers import WorkerView
from airig.brain.service import Brain
from airig.brain.settings import BrainSettings
from airig.common.protocol import CompleteRequest, FailRequest, LeaseRef


def settings_keys() -> set[str]:
    """Every key BrainSettings reads: each field's name, its alias and its other aliases."""
    keys: set[str] = set()
    for name, field in BrainSettings.model_fields.items():
        keys |= {name, *([field.alias] if field.alias else [])}
        choices = getattr(field.validation_alias, "choices", [field.validation_alias])
        keys |= {choice for choice in choices if isinstance(choice, str)}
    return keys


def make_settings(tmp: Path, **overrides: Any) -> BrainSettings:
    # BrainSettings ignores a key it does not know (extra="ignore"), and newer
    # pydantic-settings also match a field's name in any case (DATA_DIR for data_dir) where
    # older ones ignore it: a test would pass at one end of the tested range and fail at the
    # other (.ci/lower-bounds). So a key here is one BrainSettings reads at every release.
    unknown = sorted(set(overrides) - settings_keys())
    if unknown:
        raise TypeError(f"BrainSettings reads no key {unknown}; give the alias (BRAIN_...)")
    values = {
        "BRAIN_DB": str(tmp / "state" / "brain.db"),
        "BRAIN_RESULTS_DIR": str(tmp / "results"),
        # not the container's /data: retention sweeps <data>/index/search.sqlite, and a test
        # must never reach the machine's own
        "BRAIN_DATA_DIR": str(tmp / "data"),
        "BRAIN_ADMIN_TOKEN": "admin-secret-token",
        "WORKER_BOOTSTRAP_TOKEN": "bootstrap-secret-token",
        "BRAIN_LEASE_S": 10,
        "BRAIN_RETRY_INITIAL_S": 1,
        "BRAIN_RETRY_CAP_S": 4,
        "BRAIN_INFRA_RETRIES": 2,
    }
    # Under pytest (tests/conftest.py imported it): a test that opens its store here must
    # be marked for the PostgreSQL pass. A subprocess has tests/unit only, and no pg_stores.
    stores = sys.modules.get("pg_stores")
    if stores is not None and "BRAIN_DATABASE_URL" not in overrides:
        stores.check_marked()
    if os.environ.get("AIRIG_TEST_STORE") and "BRAIN_DATABASE_URL" not in overrides:
        import pg_stores  # tests/: only with it set (a subprocess has tests/unit only)

        if pg_stores.wanted():
            # AIRIG_TEST_STORE=postgresql: the same test on PostgreSQL (tests/pg_stores.py)
            values["BRAIN_DATABASE_URL"] = pg_stores.url_for(tmp)
    if "data_dir" in overrides:  # the field's name: it and the alias must not both be given
        del values["BRAIN_DATA_DIR"]
    values.update(overrides)
    return BrainSettings(**values)


def make_brain(tmp: Path, **overrides: Any) -> Brain:
    return Brain(make_settings(tmp, **overrides))


def noop(task_id: str, deps: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "type": "noop", "depends_on": deps or [], **fields}


def submit(brain: Brain, tasks: list[dict[str, Any]], now: float = 1000.0) -> str:
    plan, tainted = validate_plan({"name": "t", "tasks": tasks}, Limits())
    return brain.write(
        lambda conn, outbox, _: insert_plan(
            conn, outbox, plan, tainted, now, submitted_by="test", digest="d",
            idempotency_key=None, default_timeout_s=60.0,
        )
    )  # fmt: skip


def state_of(brain: Brain, plan_id: str) -> dict[str, str]:
    with brain.db.read() as conn:
        rows = conn.execute("SELECT key, state FROM tasks WHERE plan_id = ?", (plan_id,))
        return {row["key"]: row["state"] for row in rows}


def row(brain: Brain, plan_id: str, key: str):
    with brain.db.read() as conn:
        return conn.execute(
            "SELECT * FROM tasks WHERE plan_id = ? AND key = ?", (plan_id, key)
        ).fetchone()


def claim(brain: Brain, now: float, worker: str = "w1", classes=("cpu",), models=()):
    view = WorkerView(tuple(classes), frozenset(models))
    found = brain.write(
        lambda conn, outbox, _: leases.claim(
            conn, outbox, worker, view, now, brain.settings, brain.scheduling
        )
    )
    return found[:2] if found else None  # (row, payload); the decision is in its event


def ref(task) -> LeaseRef:
    return LeaseRef(attempt=task["attempt"], lease_id=task["lease_id"])


def do(brain: Brain, plan_id: str, key: str, action: str, now: float, worker="w1", **kw):
    """Apply a fenced worker write to the task's current lease (or the one given)."""
    task = row(brain, plan_id, key)
    lease = kw.pop("lease", None) or ref(task)

    def change(conn, outbox, _):
        current = leases.states.get_task(conn, task["id"])
        if action == "start":
            return leases.start(conn, outbox, current, worker, lease, now, brain.settings)
        if action == "complete":
            body = CompleteRequest(**lease.model_dump(), output=kw.get("output", {"text": "ok"}))
            return leases.complete(conn, outbox, current, worker, body, now, brain.settings)
        if action == "fail":
            body = FailRequest(**lease.model_dump(), **kw)
            return leases.fail(
                conn, outbox, current, worker, body, now, brain.retry, brain.settings
            )
        if action == "release":
            return leases.release(conn, outbox, current, worker, lease, "stop", now)
        raise ValueError(action)

    return brain.write(change)


def events(brain: Brain, plan_id: str) -> list[str]:
    with brain.db.read() as conn:
        rows = conn.execute(
            "SELECT event_type FROM events WHERE plan_id = ? ORDER BY id", (plan_id,)
        )
        return [r["event_type"] for r in rows]
