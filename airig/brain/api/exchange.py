"""Batched worker traffic: several fenced reports and the next claim in one transaction.

A no-op task used to cost three round trips (claim, start, complete), each its own
transaction; an exchange carries the reports a worker has gathered (start / renew /
complete / fail / release, applied in order) plus its next claim, so a busy worker needs
one round trip per batch. Each report is fenced on its own: a stale one is answered 409
in its result and changes nothing, the others still apply.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import anyio.to_thread
from fastapi import HTTPException

from airig.brain import leases, timing
from airig.brain.inflight import Hold
from airig.brain.scheduling.residency import Decision, swap_fields
from airig.brain.scheduling.workers import WorkerView
from airig.brain.service import Brain
from airig.brain.settings import BrainSettings
from airig.brain.store import payloads, states, trust, workers
from airig.brain.store import queue as task_queue
from airig.brain.store.events import Outbox
from airig.common.protocol import (
    Assignment,
    ClaimRequest,
    CompleteReport,
    ExchangeRequest,
    ExchangeResponse,
    FailReport,
    LeaseRef,
    ReleaseReport,
    RenewReport,
    Report,
    ReportResult,
    StartReport,
)
from airig.common.protocol import TaskState as S

# Classes a worker may hold leased before it runs them. GPU work is never prefetched: it
# would bind a model to a worker before the residency policy sees the GPU free.
PREFETCHABLE = ("cpu", "script")

Leased = tuple[sqlite3.Row, dict[str, Any], Decision | None]


def apply(conn: sqlite3.Connection, outbox: Outbox, now: float, brain: Brain, worker_id: str,
          report: Report) -> ReportResult:  # fmt: skip
    """One report inside the caller's transaction; its result, never an exception."""
    answer = {"task_id": report.task_id, "action": report.action}
    task = states.get_task(conn, report.task_id)
    if task is None:
        return ReportResult(**answer, status=404, detail=f"no task {report.task_id}")
    try:
        row = _ACTIONS[report.action](conn, outbox, now, brain, worker_id, task, report)
    except leases.StaleLease as exc:
        return ReportResult(**answer, status=409, detail=str(exc))
    return ReportResult(
        **answer, status=200, state=row["state"], lease_expires_at=row["lease_expires_at"]
    )


def _start(conn: sqlite3.Connection, outbox: Outbox, now: float, brain: Brain, worker_id: str,
           task: sqlite3.Row, report: StartReport) -> sqlite3.Row:  # fmt: skip
    return leases.start(conn, outbox, task, worker_id, report, now, brain.settings)


def _renew(conn: sqlite3.Connection, outbox: Outbox, now: float, brain: Brain, worker_id: str,
           task: sqlite3.Row, report: RenewReport) -> sqlite3.Row:  # fmt: skip
    leases.renew(conn, task, worker_id, report, now, brain.settings.lease_s)
    # The row as renewed; the caller found it in this transaction.
    return states.require_task(conn, task["id"])


def _complete(conn: sqlite3.Connection, outbox: Outbox, now: float, brain: Brain, worker_id: str,
              task: sqlite3.Row, report: CompleteReport) -> sqlite3.Row:  # fmt: skip
    fresh = task["state"] in S.LIVE_LEASE  # not a replay of an accepted report
    done = leases.complete(conn, outbox, task, worker_id, report, now, brain.settings)
    if fresh:
        brain.scheduling.observe_completion(conn, outbox, done, report.metrics, worker_id, now)
    return done


def _fail(conn: sqlite3.Connection, outbox: Outbox, now: float, brain: Brain, worker_id: str,
          task: sqlite3.Row, report: FailReport) -> sqlite3.Row:  # fmt: skip
    return leases.fail(
        conn, outbox, task, worker_id, report, now, brain.retry, brain.settings, brain.scheduling
    )


def _release(conn: sqlite3.Connection, outbox: Outbox, now: float, brain: Brain, worker_id: str,
             task: sqlite3.Row, report: ReleaseReport) -> sqlite3.Row:  # fmt: skip
    return leases.release(conn, outbox, task, worker_id, report, report.reason, now)


# By the report's ``action``, which also picks its class (the union's discriminator).
_ACTIONS: dict[str, Callable[..., sqlite3.Row]] = {
    "start": _start, "renew": _renew, "complete": _complete, "fail": _fail,
    "release": _release,
}  # fmt: skip


def claim(conn: sqlite3.Connection, outbox: Outbox, now: float, brain: Brain, worker_id: str,
          view: WorkerView, body: ClaimRequest,
          hold: Hold | None = None) -> list[Leased]:  # fmt: skip
    """Lease up to ``body.max_tasks`` tasks (the first one started if asked), or none.

    With a ``claim_id`` the lease ids are ``<claim_id>-<n>``, so a retried claim whose
    first answer was lost finds its live leases and gets them again instead of new ones.
    ``hold``: the answer's share of the brain's in-flight bytes (``inflight.py``), given
    back by the caller once the answer's JSON is built.
    """
    again = replayed(conn, worker_id, body.claim_id, brain.settings, hold) if body.claim_id else []
    if again:
        return again
    got: list[Leased] = []
    # What one answer carries is bounded: prefetched tasks stop at BRAIN_MAX_CLAIM_BYTES,
    # and all answers being built together at BRAIN_MAX_INFLIGHT_BYTES.
    budget = payloads.ClaimBudget(brain.settings.max_claim_bytes, hold=hold)
    for n in range(body.max_tasks):
        if n:  # prefetch: only classes that never need a GPU model
            classes = tuple(c for c in view.classes if c in PREFETCHABLE)
            if not classes:
                break
            view = dataclasses.replace(view, classes=classes)  # keeps its trust
        lease_id = f"{body.claim_id}-{n}" if body.claim_id else None
        found = leases.claim(
            conn, outbox, worker_id, view, now, brain.settings, brain.scheduling, lease_id,
            budget,
        )  # fmt: skip
        if found is None:
            break
        task, payload, decision = found
        if n == 0 and body.start:
            ref = LeaseRef(attempt=task["attempt"], lease_id=task["lease_id"])
            task = leases.start(conn, outbox, task, worker_id, ref, now, brain.settings)
        got.append((task, payload, decision))
    return got


def replayed(conn: sqlite3.Connection, worker_id: str, claim_id: str,
             settings: BrainSettings, hold: Hold | None = None) -> list[Leased]:  # fmt: skip
    """The live leases an earlier claim with this id granted this worker, in their order."""
    rows = task_queue.claim_leases(conn, worker_id, claim_id)
    rows.sort(key=lambda row: int(row["lease_id"].rsplit("-", 1)[1]))
    counted = payloads.ClaimBudget(settings.max_claim_bytes, hold=hold, replay=True)
    return [(row, payloads.rendered_payload(conn, row, settings, counted), None) for row in rows]


# The exchange as the HTTP edge serves it: the fast path and the /v1/exchange and
# /v1/claims routes all come here.
def worker_view(brain: Brain, worker_id: str, body: ClaimRequest) -> WorkerView:
    with brain.db.read() as conn:
        found = workers.classes_json(conn, worker_id)
        trusted = trust.worker_trusted(conn, worker_id)
        local = workers.is_local(conn, worker_id)
    if found is None:
        raise HTTPException(401, "worker is not registered")
    classes = tuple(json.loads(found))
    models = frozenset(body.resident_models)
    return WorkerView(classes=classes, resident_models=models, trusted=trusted, local=local)


def _assignment(
    task: sqlite3.Row, payload: dict[str, Any], decision: Decision | None = None
) -> Assignment:
    return Assignment(
        task_id=task["id"], plan_id=task["plan_id"], key=task["key"], name=task["name"],
        type=task["type"], task_class=task["task_class"], payload=payload,
        model=task["model"], trusted=bool(task["trusted"]), sensitive=bool(task["sensitive"]),
        timeout_s=task["timeout_s"], attempt=task["attempt"], lease_id=task["lease_id"],
        lease_expires_at=task["lease_expires_at"], **swap_fields(decision),
    )  # fmt: skip


def poll(
    brain: Brain,
    worker_id: str,
    view: WorkerView,
    body: ClaimRequest,
    hold: Hold,
    first: list[Leased] | None = None,
) -> list[Assignment]:
    """Long-poll: lease for this worker, waiting up to ``wait_s`` for work to appear.

    ``first``: what an exchange's own transaction already leased (its first try).
    ``hold``: what the answer holds of the in-flight bytes; the caller releases it."""

    def lease(conn: sqlite3.Connection, outbox: Outbox, now: float) -> list[Leased]:
        return claim(conn, outbox, now, brain, worker_id, view, body, hold)

    deadline = time.monotonic() + min(body.wait_s, brain.settings.max_claim_wait_s)
    while True:
        found = first if first is not None else brain.write(lease, shared=True)
        first = None
        hold.unreserve()  # room waited for and not used goes back at once
        if found:
            return [_assignment(*leased) for leased in found]
        left = deadline - time.monotonic()
        if left <= 0 or brain.closing.is_set():
            return []
        if hold.refused:
            # Work is there, but the brain holds its in-flight maximum: claim again once
            # answers built made room for it (``wait`` reserves it, in arrival order).
            with timing.spend("long_poll"):
                if not hold.wait(left):
                    return []
            continue
        # Woken at once by new READY work; the cap catches due retries.
        with timing.spend("long_poll"):
            brain.wait_for_work(min(left, 1.0))


def _first(
    brain: Brain, worker_id: str, body: ExchangeRequest, hold: Hold
) -> tuple[list[ReportResult], list[Leased], WorkerView | None]:
    """The exchange's transaction: the reports, then the claim's first try."""
    wanted = body.claim
    view = worker_view(brain, worker_id, wanted) if wanted else None

    def change(
        conn: sqlite3.Connection, outbox: Outbox, now: float
    ) -> tuple[list[ReportResult], list[Leased]]:
        done = [apply(conn, outbox, now, brain, worker_id, r) for r in body.reports]
        if wanted is None or view is None:
            return done, []
        return done, claim(conn, outbox, now, brain, worker_id, view, wanted, hold)

    # shared: the reports and the claim are row-locked writes (pg.py), beside other brains'
    reported, leased = brain.write(change, shared=True)
    stale = sum(result.status == 409 for result in reported)
    if stale:
        brain.metrics.stale_reports.inc(stale)
    return reported, leased, view


def run_exchange(
    brain: Brain, worker_id: str, body: ExchangeRequest, hold: Hold
) -> ExchangeResponse:
    """One exchange: the reports, then the claim, in one transaction; long-poll if empty.
    The payloads it renders are charged to ``hold``, which the caller gives back once
    the answer's JSON is built. In a thread of its own, long-poll included (the app
    built without the fast path, tests); the brain serves ``run_exchange_async``."""
    reported, leased, view = _first(brain, worker_id, body, hold)
    wanted = body.claim
    found = poll(brain, worker_id, view, wanted, hold, leased) if wanted and view else []
    return ExchangeResponse(results=reported, assignments=found)


async def run_exchange_async(
    brain: Brain, worker_id: str, body: ExchangeRequest, hold: Hold
) -> ExchangeResponse:
    """``run_exchange`` as the event loop serves it: each transaction in a worker thread,
    the long-poll's waits on the loop (``poll_async``)."""
    reported, leased, view = await anyio.to_thread.run_sync(_first, brain, worker_id, body, hold)
    wanted = body.claim
    found = (
        await poll_async(brain, worker_id, view, wanted, hold, leased) if wanted and view else []
    )
    return ExchangeResponse(results=reported, assignments=found)


async def poll_async(
    brain: Brain,
    worker_id: str,
    view: WorkerView,
    body: ClaimRequest,
    hold: Hold,
    first: list[Leased] | None = None,
) -> list[Assignment]:
    """``poll`` without a thread held while it waits: a worker thread for each claim's
    transaction only, the wait for work a future on the event loop
    (``Brain.claim_waiters``). Idle workers long-polling held every one of AnyIO's 40
    threads, and renewals and completion reports queued behind them past their leases."""

    def lease(conn: sqlite3.Connection, outbox: Outbox, now: float) -> list[Leased]:
        return claim(conn, outbox, now, brain, worker_id, view, body, hold)

    def claim_write(change: Callable[[sqlite3.Connection, Outbox, float], list[Leased]]) -> Any:
        return brain.write(change, shared=True)

    deadline = time.monotonic() + min(body.wait_s, brain.settings.max_claim_wait_s)
    while True:
        found = first if first is not None else await anyio.to_thread.run_sync(claim_write, lease)
        first = None
        hold.unreserve()  # room waited for and not used goes back at once
        if found:
            return [_assignment(*leased) for leased in found]
        left = deadline - time.monotonic()
        if left <= 0 or brain.closing.is_set():
            return []
        if hold.refused:
            # The in-flight bytes are full (rare): this wait holds a thread, as before.
            with timing.spend("long_poll"):
                if not await anyio.to_thread.run_sync(hold.wait, left):
                    return []
            continue
        with timing.spend("long_poll"):
            await brain.claim_waiters.wait(min(left, 1.0))
