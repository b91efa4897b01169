"""Worker-facing task routes: long-poll claim and the fenced lease writes."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, HTTPException, Query, Request, Response

from airig.brain import exchange, leases, results, states, trust
from airig.brain.deps import BrainDep, WorkerDep
from airig.brain.events import Outbox
from airig.brain.exchange import Leased
from airig.brain.inflight import Hold
from airig.brain.residency import Decision, swap_fields
from airig.brain.scheduling import WorkerView
from airig.brain.service import Brain
from airig.common.protocol import (
    Assignment,
    ClaimRequest,
    CompleteRequest,
    ErrorBody,
    ExchangeRequest,
    ExchangeResponse,
    FailRequest,
    LeaseRef,
    LeaseStatus,
    ReleaseRequest,
    ReportResult,
)
from airig.common.protocol import TaskState as S

router = APIRouter(prefix="/v1", tags=["worker tasks"])
T = TypeVar("T")
# A fenced write: no such task, or not this worker's live lease (abort the attempt).
FENCED: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "no such task"},
    409: {"model": ErrorBody, "description": "the lease is not this attempt's (lost, stale)"},
}


def _view(brain: Brain, worker_id: str, body: ClaimRequest) -> WorkerView:
    with brain.db.read() as conn:
        row = conn.execute("SELECT classes_json FROM workers WHERE id = ?", (worker_id,))
        found = row.fetchone()
        trusted = trust.worker_trusted(conn, worker_id)
    if found is None:
        raise HTTPException(401, "worker is not registered")
    classes = tuple(json.loads(found["classes_json"]))
    models = frozenset(body.resident_models)
    return WorkerView(classes=classes, resident_models=models, trusted=trusted)


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


def _poll(
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
        return exchange.claim(conn, outbox, now, brain, worker_id, view, body, hold)

    deadline = time.monotonic() + min(body.wait_s, brain.settings.max_claim_wait_s)
    while True:
        found = first if first is not None else brain.write(lease)
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
            if not hold.wait(left):
                return []
            continue
        # Woken at once by new READY work; the cap catches due retries.
        brain.wait_for_work(min(left, 1.0))


@router.post("/claims", response_model=Assignment, responses={204: {"description": "no work"}})
def claim(body: ClaimRequest, brain: BrainDep, worker: WorkerDep) -> Response:
    """Long-poll for one task (``max_tasks`` is for ``/v1/exchange``)."""
    body = body.model_copy(update={"max_tasks": 1})
    view = _view(brain, worker.name, body)
    with brain.inflight.hold() as hold:  # given back once its JSON is built
        found = _poll(brain, worker.name, view, body, hold)
        if not found:
            return Response(status_code=204)
        return Response(found[0].model_dump_json(), media_type="application/json")


@router.post("/exchange", response_model=ExchangeResponse)
def exchange_reports(body: ExchangeRequest, brain: BrainDep, worker: WorkerDep) -> Response:
    """Apply a worker's reports in order, then claim (long-poll) in the same transaction.

    Served by ``airig.brain.fastpath`` in the running brain; this route documents it
    in the OpenAPI schema and serves apps built without the fast path (tests)."""
    with brain.inflight.hold() as hold:  # given back once its JSON is built
        answer = run_exchange(brain, worker.name, body, hold)
        return Response(answer.model_dump_json(), media_type="application/json")


def run_exchange(
    brain: Brain, worker_id: str, body: ExchangeRequest, hold: Hold
) -> ExchangeResponse:
    """One exchange: the reports, then the claim, in one transaction; long-poll if empty.
    The payloads it renders are charged to ``hold``, which the caller gives back once
    the answer's JSON is built."""
    wanted = body.claim
    view = _view(brain, worker_id, wanted) if wanted else None

    def change(
        conn: sqlite3.Connection, outbox: Outbox, now: float
    ) -> tuple[list[ReportResult], list[Leased]]:
        done = [exchange.apply(conn, outbox, now, brain, worker_id, r) for r in body.reports]
        if wanted is None or view is None:
            return done, []
        return done, exchange.claim(conn, outbox, now, brain, worker_id, view, wanted, hold)

    reported, leased = brain.write(change)
    stale = sum(result.status == 409 for result in reported)
    if stale:
        brain.metrics.stale_reports.inc(stale)
    found = _poll(brain, worker_id, view, wanted, hold, leased) if wanted and view else []
    return ExchangeResponse(results=reported, assignments=found)


def _fenced(
    brain: Brain,
    task_id: int,
    change: Callable[[sqlite3.Connection, Outbox, float, sqlite3.Row], T],
    durable: bool = True,
) -> T:
    """Run a fenced write on one task: 404 when unknown, 409 when the lease is stale."""

    def guarded(conn: sqlite3.Connection, outbox: Outbox, now: float) -> T:
        task = states.get_task(conn, task_id)
        if task is None:
            raise HTTPException(404, f"no task {task_id}")
        return change(conn, outbox, now, task)

    try:
        return brain.write(guarded, durable)
    except leases.StaleLease as exc:
        brain.metrics.stale_reports.inc()
        raise HTTPException(409, str(exc)) from None


@router.post("/tasks/{task_id}/start", response_model=LeaseStatus, responses=FENCED)
def start(task_id: int, body: LeaseRef, brain: BrainDep, w: WorkerDep) -> LeaseStatus:
    settings = brain.settings
    task = _fenced(
        brain, task_id, lambda c, o, now, t: leases.start(c, o, t, w.name, body, now, settings)
    )
    return LeaseStatus(lease_expires_at=task["lease_expires_at"], state=task["state"])


@router.post("/tasks/{task_id}/heartbeat", response_model=LeaseStatus, responses=FENCED)
def renew(task_id: int, body: LeaseRef, brain: BrainDep, w: WorkerDep) -> LeaseStatus:
    """Renew this attempt's lease; 409 tells the worker to abort (lost, cancelled, timed out)."""
    lease_s = brain.settings.lease_s

    def change(
        conn: sqlite3.Connection, outbox: Outbox, now: float, task: sqlite3.Row
    ) -> LeaseStatus:
        expires = leases.renew(conn, task, w.name, body, now, lease_s)
        return LeaseStatus(lease_expires_at=expires, state=task["state"])

    # A renewal lost to a power cut costs nothing: a restarted brain extends live leases.
    return _fenced(brain, task_id, change, durable=False)


@router.put(
    "/tasks/{task_id}/files/{name}",
    openapi_extra={"requestBody": {"required": True, "content": {"application/octet-stream": {
        "schema": {"type": "string", "format": "binary"}}}}},
    responses=FENCED,
)  # fmt: skip
async def upload_file(
    task_id: int,
    name: str,
    request: Request,
    brain: BrainDep,
    w: WorkerDep,
    attempt: Annotated[int, Query(ge=1)],
    lease_id: Annotated[str, Query(min_length=1, max_length=64)],
) -> dict[str, Any]:
    """Store one output file of the live attempt under the results volume.

    The fence is checked before the body is read, and the body is streamed to a file
    aside (counted against BRAIN_MAX_FILE_BYTES), then renamed: never held in memory."""
    if not results.SAFE_NAME.match(name):
        raise HTTPException(422, "file name must be a plain name ([A-Za-z0-9._-])")
    ref = LeaseRef(attempt=attempt, lease_id=lease_id)
    with brain.db.read() as conn:
        task = states.get_task(conn, task_id)
    if task is None:
        raise HTTPException(404, f"no task {task_id}")
    try:
        leases.check_fence(task, w.name, ref)
    except leases.StaleLease as exc:
        brain.metrics.stale_reports.inc()
        raise HTTPException(409, str(exc)) from None
    folder = results.task_dir(brain.settings.results_dir, task["plan_id"], task["key"])
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{name}.{uuid.uuid4().hex}.part"
    limit, size = brain.settings.max_file_bytes, 0
    try:
        with partial.open("xb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise HTTPException(413, f"file is larger than {limit} bytes "
                                        "(BRAIN_MAX_FILE_BYTES)")  # fmt: skip
                out.write(chunk)
        partial.replace(folder / name)
    finally:
        partial.unlink(missing_ok=True)
    return {"stored": str((folder / name).relative_to(brain.settings.results_dir))}


@router.post("/tasks/{task_id}/complete", responses=FENCED)
def complete(task_id: int, body: CompleteRequest, brain: BrainDep, w: WorkerDep) -> dict[str, Any]:
    def change(
        conn: sqlite3.Connection, outbox: Outbox, now: float, task: sqlite3.Row
    ) -> sqlite3.Row:
        fresh = task["state"] in S.LIVE_LEASE  # not a replay of an accepted report
        done = leases.complete(conn, outbox, task, w.name, body, now, brain.settings)
        if fresh:
            brain.scheduling.observe_completion(conn, outbox, done, body.metrics, w.name, now)
        return done

    task = _fenced(brain, task_id, change)
    return {"state": task["state"]}


@router.post("/tasks/{task_id}/fail", responses=FENCED)
def fail(task_id: int, body: FailRequest, brain: BrainDep, w: WorkerDep) -> dict[str, Any]:
    task = _fenced(
        brain,
        task_id,
        lambda c, o, now, t: leases.fail(c, o, t, w.name, body, now, brain.retry, brain.settings),
    )
    return {"state": task["state"]}


@router.post("/tasks/{task_id}/release", responses=FENCED)
def release(task_id: int, body: ReleaseRequest, brain: BrainDep, w: WorkerDep) -> dict[str, Any]:
    task = _fenced(
        brain,
        task_id,
        lambda c, o, now, t: leases.release(c, o, t, w.name, body, body.reason, now),
    )
    return {"state": task["state"]}
