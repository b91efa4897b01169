"""Worker-facing task routes: long-poll claim and the fenced lease writes."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio.to_thread
from fastapi import APIRouter, HTTPException, Query, Request, Response

from airig.brain import leases
from airig.brain.api import exchange
from airig.brain.api.deps import BrainDep, WorkerDep
from airig.brain.service import Brain
from airig.brain.store import results, states
from airig.brain.store.events import Outbox
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
)
from airig.common.protocol import TaskState as S

router = APIRouter(prefix="/v1", tags=["worker tasks"])
T = TypeVar("T")
# A fenced write: no such task, or not this worker's live lease (abort the attempt).
FENCED: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "no such task"},
    409: {"model": ErrorBody, "description": "the lease is not this attempt's (lost, stale)"},
}


@router.post("/claims", response_model=Assignment, responses={204: {"description": "no work"}})
async def claim(body: ClaimRequest, brain: BrainDep, worker: WorkerDep) -> Response:
    """Long-poll for one task (``max_tasks`` is for ``/v1/exchange``): its waits on the
    event loop, its transactions in worker threads (``exchange.poll_async``)."""
    body = body.model_copy(update={"max_tasks": 1})
    view = await anyio.to_thread.run_sync(exchange.worker_view, brain, worker.name, body)
    with brain.inflight.hold() as hold:  # given back once its JSON is built
        found = await exchange.poll_async(brain, worker.name, view, body, hold)
        if not found:
            return Response(status_code=204)
        return Response(found[0].model_dump_json(), media_type="application/json")


@router.post("/exchange", response_model=ExchangeResponse)
def exchange_reports(body: ExchangeRequest, brain: BrainDep, worker: WorkerDep) -> Response:
    """Apply a worker's reports in order, then claim (long-poll) in the same transaction.

    Served by ``airig.brain.api.fastpath`` in the running brain; this route documents it
    in the OpenAPI schema and serves apps built without the fast path (tests)."""
    with brain.inflight.hold() as hold:  # given back once its JSON is built
        answer = exchange.run_exchange(brain, worker.name, body, hold)
        return Response(answer.model_dump_json(), media_type="application/json")


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
        # shared: a fenced write locks its task's row (pg.py), beside other brains' writes
        return brain.write(guarded, durable, shared=True)
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
        lambda c, o, now, t: leases.fail(
            c, o, t, w.name, body, now, brain.retry, brain.settings, brain.scheduling
        ),
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
