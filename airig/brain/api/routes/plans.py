"""Submitter routes: plans, their tasks and results, cancellation."""

from __future__ import annotations

import itertools
import json
import sqlite3
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Header, HTTPException, Request, Response
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from pydantic import Field

from airig.brain.api.auth import Principal, may_act_on, owner_of
from airig.brain.api.deps import AdminDep, BrainDep, SubmitterDep, rendered
from airig.brain.plans import reuse, submit
from airig.brain.plans.load import load_plan
from airig.brain.plans.parse import PlanSyntaxError
from airig.brain.plans.validate import Limits, PlanInvalid
from airig.brain.store import fanout, results, states
from airig.brain.store import plans as plan_store
from airig.brain.store.events import Outbox
from airig.common.protocol import ErrorBody, Inbound, PlanErrorBody
from airig.common.protocol import TaskState as S

router = APIRouter(prefix="/v1", tags=["plans"])
# What a route may answer besides its success, for the OpenAPI schema.
Responses = dict[int | str, dict[str, Any]]


PLAN_STATUSES = ("running", "succeeded", "partial", "failed", "cancelled")


def plan_status(counts: dict[str, int], cancelled: bool, only_items_failed: bool = False) -> str:
    """``partial``: finished, not cancelled, and what did not succeed are fan-out items
    only (each group went on and succeeded with the items that did)."""
    if any(state not in S.TERMINAL for state in counts):
        return "running"
    if cancelled:
        return "cancelled"
    if set(counts) <= {S.SUCCEEDED}:
        return "succeeded"
    return "partial" if only_items_failed else "failed"


def _task_view(row: sqlite3.Row, deps: list[str]) -> dict[str, Any]:
    return {
        "id": row["key"], "uid": row["id"], "name": row["name"], "type": row["type"],
        "task_class": row["task_class"], "state": row["state"], "priority": row["priority"],
        "attempt": row["attempt"], "worker_id": row["worker_id"], "model": row["model"],
        "trusted": bool(row["trusted"]), "tainted_output": bool(row["tainted_output"]),
        "depends_on": deps, "error": row["error"],
        "origin": row["origin"], "depth": row["depth"],
        "group": row["fanout_group"], "item": row["fanout_index"],
        "reused_from": row["reused_from"],
        "error_type": row["error_type"], "reason": row["reason"],
        "started_at": row["started_at"], "finished_at": row["finished_at"],
        "files": json.loads(row["files_json"]), "metrics": json.loads(row["metrics_json"]),
    }  # fmt: skip


def plan_view(conn: sqlite3.Connection, plan: sqlite3.Row, with_tasks: bool) -> dict[str, Any]:
    if with_tasks:
        rows = plan_store.tasks(conn, plan["id"])
        counts: dict[str, int] = {}
        for row in rows:
            counts[row["state"]] = counts.get(row["state"], 0) + 1
    else:
        # The plans list (and every dashboard poll of it) needs counts only: one grouped
        # read instead of every task row (100k rows for one big plan).
        counts = plan_store.state_counts(conn, plan["id"])
    finished = all(state in S.TERMINAL for state in counts) and not plan["cancelled"]
    partial = (
        finished and set(counts) - {S.SUCCEEDED} and fanout.only_items_failed(conn, plan["id"])
    )
    view = {
        "id": plan["id"], "name": plan["name"], "created_at": plan["created_at"],
        "status": plan_status(counts, bool(plan["cancelled"]), bool(partial)), "counts": counts,
        "fixes": json.loads(plan["fixes_json"]), "task_total": sum(counts.values()),
    }  # fmt: skip
    if with_tasks:
        deps = plan_store.dependencies(conn, plan["id"])
        by_task: dict[int, list[str]] = {}
        for dep in deps:
            by_task.setdefault(dep["task_id"], []).append(dep["key"])
        view["tasks"] = [_task_view(row, by_task.get(row["id"], [])) for row in rows]
        view["fanouts"] = fanout.plan_fanouts(conn, plan["id"])
    return view


def _load_plan(conn: sqlite3.Connection, plan_id: str, who: Principal) -> sqlite3.Row:
    """The plan, when ``who`` may act on it; another submitter's plan is a 404 like a
    missing one, so plan ids are not confirmed to those who do not own them."""
    plan = plan_store.by_id(conn, plan_id)
    if plan is None or not may_act_on(who, plan["owner"]):
        raise HTTPException(404, f"no plan {plan_id}")
    return plan


_PLAN_BODY = {
    "required": True,
    "description": "A plan: JSON, YAML or Markdown (by Content-Type, else sniffed). "
    "See 03-agents/AGENTS.md for the fields.",
    "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/PlanRequest"}},
        "application/yaml": {"schema": {"type": "string"}},
        "text/markdown": {"schema": {"type": "string"}},
    },
}
_ERROR_OR_PLAN_ERROR = {"application/json": {"schema": {"anyOf": [
    {"$ref": "#/components/schemas/ErrorBody"}, {"$ref": "#/components/schemas/PlanErrorBody"},
]}}}  # fmt: skip
NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "no such plan or task"}}
_PLAN_RESPONSES: Responses = {
    200: {"description": "the plan already submitted with this Idempotency-Key"},
    201: {"description": "the stored plan, with its tasks"},
    409: {"model": ErrorBody, "description": "Idempotency-Key used for another plan"},
    413: {"description": "the body, the task count or a payload is too large",
          "content": _ERROR_OR_PLAN_ERROR},
    422: {"model": PlanErrorBody, "description": "the plan is not readable or not valid"},
}  # fmt: skip


def _same_submitter(who: Principal, known: sqlite3.Row) -> None:
    """An Idempotency-Key another submitter used answers as a key used for another plan:
    their plan is never shown."""
    if not may_act_on(who, known["owner"]):
        raise HTTPException(409, "Idempotency-Key was used for a different plan")


def _plan_error(status: int, message: str, errors: list[dict[str, Any]] | None = None,
                fixes: list[dict[str, str]] | None = None) -> HTTPException:  # fmt: skip
    return HTTPException(status, {"message": message, "errors": errors or [],
                                  "fixes": fixes or []})  # fmt: skip


# Read by hand, not by FastAPI: its refusal of a bad value would not be the plan's error
# body this route documents for 422.
_RERUN = {
    "name": "rerun", "in": "query", "required": False,
    "description": "run every glob item, even one unchanged since an earlier plan "
    "(PLANS.md, 'Unchanged items'); the plan's `rerun: true` says the same",
    "schema": {"type": "boolean", "default": False},
}  # fmt: skip


def _rerun(values: list[str]) -> bool:
    words = [value.strip().lower() for value in values]
    if any(word not in ("true", "false", "1", "0") for word in words):
        raise _plan_error(422, "rerun is true or false", [
            {"task": None, "field": "rerun", "message": "give ?rerun=true or ?rerun=false"}
        ])  # fmt: skip
    return any(word in ("true", "1") for word in words)


async def _read_body(request: Request, limit: int) -> bytearray:
    """The body in one buffer (``request.body()`` joins a list of its chunks: the body
    twice at once), made its declared length at once where it has one: grown chunk by
    chunk, each step may copy it. The request guard bounds what comes to ``limit``."""
    declared = request.headers.get("content-length", "")
    known = declared.isascii() and declared.isdigit() and int(declared[:20]) <= limit
    raw = bytearray(int(declared) if known else 0)
    filled = 0
    async for chunk in request.stream():
        end = filled + len(chunk)
        if end <= len(raw):
            raw[filled:end] = chunk  # the same length: written in place
        else:
            del raw[filled:]
            raw += chunk
        filled = end
    del raw[filled:]  # fewer bytes than declared (the client went away)
    return raw


@router.post(
    "/plans", status_code=201, responses=_PLAN_RESPONSES,
    openapi_extra={"requestBody": _PLAN_BODY, "parameters": [_RERUN]},
)  # fmt: skip
async def submit_plan(
    request: Request,
    brain: BrainDep,
    who: SubmitterDep,
    # Its bounds in the schema; checked below, refused with the plan's error body.
    idempotency_key: Annotated[
        str | None, Header(json_schema_extra={"minLength": 1, "maxLength": 200})
    ] = None,
) -> Any:
    """Submit a plan; the same Idempotency-Key and body answer the stored plan again. Glob
    items unchanged since an earlier plan are not run again (PLANS.md, "Unchanged items"),
    unless ``rerun`` (or the plan's ``rerun: true``)."""
    if idempotency_key is not None and not 0 < len(idempotency_key) <= 200:
        raise _plan_error(422, "Idempotency-Key must be 1 to 200 characters")
    rerun = _rerun(request.query_params.getlist("rerun"))
    raw = await _read_body(request, brain.settings.max_plan_bytes)
    limits = Limits(
        brain.settings.max_tasks, brain.settings.max_payload_bytes, brain.settings.plan_max_tasks
    )
    try:
        # Parsing and validation are CPU work: off the event loop, so one big or
        # hostile plan never stalls every other request.
        plan, tainted, digest = await anyio.to_thread.run_sync(
            load_plan, raw, request.headers.get("content-type"), limits, brain.settings.data_dir
        )
    except PlanSyntaxError as exc:
        raise _plan_error(422, str(exc)) from None
    except PlanInvalid as exc:
        status = 413 if exc.too_large else 422
        raise _plan_error(status, "plan refused", exc.errors, exc.fixes) from None
    if idempotency_key:
        with brain.db.read() as conn:
            known = submit.find_by_idempotency_key(conn, idempotency_key)
            if known is not None:
                _same_submitter(who, known)
                if known["body_hash"] != digest:
                    raise HTTPException(409, "Idempotency-Key was used for a different plan")
                return JSONResponse(plan_view(conn, known, with_tasks=True), status_code=200)

    prepared: str | None = None
    new_id = submit.new_plan_id()
    decided = reuse.Reuse()

    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> str:
        if idempotency_key and (known := submit.find_by_idempotency_key(conn, idempotency_key)):
            _same_submitter(who, known)
            return str(known["id"])  # a concurrent twin won the race
        plan_id = submit.insert_plan(
            conn, outbox, plan, tainted, now, submitted_by=who.name, digest=digest,
            idempotency_key=idempotency_key, default_timeout_s=brain.settings.default_timeout_s,
            owner=owner_of(who), prepared=prepared, plan_id=new_id,
        )  # fmt: skip
        reuse.settle(conn, outbox, plan_id, decided, now)
        return plan_id

    def stored() -> Response:
        nonlocal prepared, decided
        settings = brain.settings
        # Reads the inputs and the store, and links the reused items' results files under
        # new_id: before the transaction, which every claim and heartbeat waits behind.
        decided = reuse.plan_reuse(
            brain.db, plan, data_dir=settings.data_dir, results_dir=settings.results_dir,
            owner=owner_of(who), plan_id=new_id, rerun=rerun or plan.rerun,
        )  # fmt: skip
        prepared = submit.prepare(plan, tainted, settings.default_timeout_s, decided)
        try:
            plan_id = brain.write(change)
        except BaseException:
            reuse.discard(settings.results_dir, new_id)
            raise
        if plan_id != new_id:  # a twin's plan answered: nothing points at what was linked
            reuse.discard(settings.results_dir, new_id)
        # The answer is rendered after the commit, on a read connection, into bytes in
        # this thread: inside the transaction a 500-task plan's view held every claim
        # behind it, and on the event loop every request.
        with brain.db.read() as conn:
            view = plan_view(conn, _load_plan(conn, plan_id, who), with_tasks=True)
        return rendered(view, 201)

    return await anyio.to_thread.run_sync(stored)


@router.get("/plans")
def list_plans(brain: BrainDep, who: SubmitterDep, limit: int = 50) -> dict[str, Any]:
    """The newest plans: all of them for admin, a submit token's own for it."""
    limit = max(1, min(limit, 500))
    with brain.db.read() as conn:
        owner = None if who.scope == "admin" else owner_of(who)
        rows = plan_store.newest(conn, owner, limit)
        return {"plans": [plan_view(conn, row, with_tasks=False) for row in rows]}


@router.get("/plans/{plan_id}", responses=NOT_FOUND)
def get_plan(plan_id: str, brain: BrainDep, who: SubmitterDep) -> dict[str, Any]:
    with brain.db.read() as conn:
        return plan_view(conn, _load_plan(conn, plan_id, who), with_tasks=True)


@router.post("/plans/{plan_id}/cancel", responses=NOT_FOUND)
def cancel_plan(plan_id: str, brain: BrainDep, who: SubmitterDep) -> dict[str, Any]:
    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> dict[str, int]:
        _load_plan(conn, plan_id, who)
        return {"cancelled": states.cancel_plan(conn, outbox, plan_id, now)}

    return brain.write(change)


def _task_row(conn: sqlite3.Connection, plan_id: str, key: str, who: Principal) -> sqlite3.Row:
    _load_plan(conn, plan_id, who)
    row = plan_store.task(conn, plan_id, key)
    if row is None:
        raise HTTPException(404, f"no task {key} in plan {plan_id}")
    return row


@router.post("/plans/{plan_id}/tasks/{key}/cancel", responses=NOT_FOUND)
def cancel_task(plan_id: str, key: str, brain: BrainDep, who: SubmitterDep) -> dict[str, Any]:
    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> dict[str, bool]:
        task = _task_row(conn, plan_id, key, who)
        return {"cancelled": states.cancel_task(conn, outbox, task, now, "cancelled by user")}

    return brain.write(change)


@router.get(
    "/plans/{plan_id}/tasks/{key}/result",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/json": {"schema": {"type": "object", "properties": {
            "output": {"type": "object"}, "files": {"type": "array", "items": {"type": "string"}},
        }}}}},
        **NOT_FOUND, 409: {"model": ErrorBody, "description": "not SUCCEEDED"},
    },
)  # fmt: skip
def task_result(plan_id: str, key: str, brain: BrainDep, who: SubmitterDep) -> StreamingResponse:
    """``{"output": …, "files": […]}``, written from the stored texts as it is sent (a
    group's item by item): a group of 120 items of 1 MB was built whole, 430 MB."""
    with brain.db.read() as conn:
        row = _task_row(conn, plan_id, key, who)
    if row["state"] != S.SUCCEEDED:
        raise HTTPException(409, f"task {key} is {row['state']}, not SUCCEEDED")
    chunks = fanout.result_chunks(brain.db.read, brain.settings.results_dir, row)
    first = next(chunks)  # what can fail fails here, before the answer begins
    return StreamingResponse(itertools.chain([first], chunks), media_type="application/json")


@router.get(
    "/plans/{plan_id}/tasks/{key}/files/{name}",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, **NOT_FOUND},
)
def task_file(
    plan_id: str, key: str, name: str, brain: BrainDep, who: SubmitterDep
) -> FileResponse:
    """A file the task stored. Only a known task of a known plan, by its recorded
    plan id and key: the request's own text never becomes a path."""
    with brain.db.read() as conn:
        row = _task_row(conn, plan_id, key, who)
    path = results.task_file(brain.settings.results_dir, row["plan_id"], row["key"], name)
    if path is None:
        raise HTTPException(404, "no such file")
    return FileResponse(path)


@router.get("/plans/{plan_id}/events", responses=NOT_FOUND)
def plan_events(plan_id: str, brain: BrainDep, who: SubmitterDep) -> dict[str, Any]:
    with brain.db.read() as conn:
        _load_plan(conn, plan_id, who)
        bodies = plan_store.event_bodies(conn, plan_id)
    return {"events": [json.loads(body) for body in bodies]}


class PruneRequest(Inbound):
    """``older_than_s`` absent: the brain's own AIRIG_RETENTION_DAYS."""

    older_than_s: float | None = Field(None, ge=0, le=100 * 365 * 86_400)
    dry_run: bool = False


@router.post(
    "/plans/prune",
    responses={409: {"model": ErrorBody, "description": "no age given and retention is off"}},
)
def prune_plans(body: PruneRequest, brain: BrainDep, _: AdminDep) -> dict[str, Any]:
    """Delete (or with ``dry_run`` count) finished plans whose last task ended more than
    ``older_than_s`` ago: their tasks, events and result files (airig/brain/store/retention.py).
    Running plans are never touched."""
    if body.older_than_s is None and brain.settings.retention_days == 0:
        raise HTTPException(409, "AIRIG_RETENTION_DAYS is 0 (keep forever): give older_than_s")
    return brain.retention.run(body.older_than_s, body.dry_run).as_dict()
