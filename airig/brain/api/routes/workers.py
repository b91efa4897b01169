"""Worker registration, heartbeats and the worker list."""

from __future__ import annotations

import hmac
import json
import sqlite3
import time
from typing import Any

from fastapi import APIRouter, HTTPException, Response

from airig.brain.api.auth import hash_token, new_token
from airig.brain.api.deps import AdminDep, BrainDep, RegistrarDep, WorkerDep, rendered
from airig.brain.leases import drop_leases
from airig.brain.store import queue as task_queue
from airig.brain.store import workers
from airig.brain.store.events import Outbox
from airig.common.protocol import ErrorBody, HeartbeatRequest, RegisterRequest, RegisterResponse

router = APIRouter(prefix="/v1/workers", tags=["workers"])


def _refuse_takeover(
    conn: sqlite3.Connection, body: RegisterRequest, rig: str | None, lease_s: float, now: float
) -> None:
    """Every worker of a rig registers with one token (the bootstrap token here, a join
    token on another rig), so a name is not proof of identity. A registrant that shows
    the holder's worker token is that worker. Otherwise a name belongs to the rig that
    registered it (``rig``: the join token's id, None for the bootstrap token): another
    rig never gets it, and a name whose holder is alive (heartbeat within a lease) waits.
    A crashed worker's rig gets the name back once its heartbeat is a lease old, when the
    reaper has given up on it anyway; a rig cut off (join token revoked) owns no name."""
    row = workers.holder(conn, body.name)
    if row is None:
        return
    if body.previous_token and hmac.compare_digest(
        hash_token(body.previous_token), row["token_hash"]
    ):
        return
    live_rig = row["token_id"] is not None and row["revoked_at"] is None
    owned = row["registered_by"] is None or live_rig
    if owned and row["registered_by"] != rig:
        raise HTTPException(409, _another_rigs(body.name, row))
    if now - row["last_heartbeat"] > lease_s:
        return
    wait = max(1, int(lease_s - (now - row["last_heartbeat"])) + 1)
    raise HTTPException(
        409,
        f"worker name {body.name!r} is held by a live worker; give this worker another "
        f"name (WORKER_NAME) or retry in {wait} s",
        headers={"Retry-After": str(wait)},
    )


def _another_rigs(name: str, holder: sqlite3.Row) -> str:
    """The refusal of a name another rig registered: whose it is and what to do."""
    taken = f"worker name {name!r} belongs to another rig"
    rename = "give this worker another name (WORKER_NAME; AIRIG_RIG_NAME on a joined rig)"
    if holder["registered_by"] is None:
        return f"{taken} (the brain's own); {rename}"
    host = f" ({holder['host']})" if holder["host"] else ""
    return (
        f"{taken}{host}; {rename}, or if that rig is gone for good, revoke its join token "
        "on the brain's machine (`token list`, `token revoke ID`)"
    )


@router.post(
    "/register",
    response_model=RegisterResponse,
    responses={
        409: {
            "model": ErrorBody,
            "description": "the name is held by a live worker, or belongs to another rig",
        }
    },
)
def register(
    body: RegisterRequest,
    brain: BrainDep,
    registrar: RegistrarDep,
) -> RegisterResponse:
    """Trade the bootstrap token, or a join token of another rig, for a worker token (a
    restart registers again). A join token is recorded with the worker: revoking it
    retires the worker's token too."""
    token = new_token()
    joined_with = registrar.token_id if registrar.scope == "join" else None

    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> None:
        _refuse_takeover(conn, body, joined_with, brain.settings.lease_s, now)
        drop_leases(conn, outbox, brain.retry, body.name, now)
        workers.register(
            conn, body.name, hash_token(token), json.dumps(body.classes), body.gpu_index,
            json.dumps([g.model_dump() for g in body.gpus]), json.dumps(body.resident_models),
            now, body.host, joined_with,
        )  # fmt: skip

    brain.write(change)
    settings = brain.settings
    return RegisterResponse(
        worker_id=body.name,
        token=token,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        lease_s=settings.lease_s,
        claim_wait_s=settings.claim_wait_s,
    )


@router.post("/heartbeat")
def heartbeat(body: HeartbeatRequest, brain: BrainDep, worker: WorkerDep) -> dict[str, Any]:
    """Liveness, GPU telemetry and resident models; task leases renew separately."""

    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> None:
        workers.heartbeat(
            conn, worker.name, now, json.dumps([g.model_dump() for g in body.gpus]),
            json.dumps(body.resident_models),
        )  # fmt: skip
        # GPU temperature feeds the thermal guard: a hot GPU claims nothing new.
        brain.scheduling.observe_heartbeat(conn, outbox, worker.name, body.gpus, now)

    # Liveness and telemetry, renewed every interval: not worth an fsync each (a power cut
    # loses at most the last beats; the next durable commit makes them durable anyway).
    # shared: its own worker's row and its thermal facts, beside other brains' writes
    brain.write(change, durable=False, shared=True)
    return {"ok": True, "heartbeat_interval_s": brain.settings.heartbeat_interval_s}


@router.post("/deregister")
def deregister(brain: BrainDep, worker: WorkerDep) -> dict[str, Any]:
    """A worker stopping cleanly: its name is free at once, its token stops working."""

    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> None:
        drop_leases(conn, outbox, brain.retry, worker.name, now, "stopped")
        workers.retire(conn, worker.name, hash_token(new_token()))

    brain.write(change)
    return {"ok": True}


@router.delete(
    "/{name}",
    responses={
        404: {"model": ErrorBody, "description": "no worker has this name"},
        409: {"model": ErrorBody, "description": "the worker is alive"},
    },
)
def forget_worker(name: str, brain: BrainDep, _: AdminDep) -> dict[str, Any]:
    """Forget a worker that is gone for good (a container removed, a slot scaled away):
    its row, its token and the alerts about it (cleared and delivered now, as the
    reaper's pass would). A live worker is refused: it would only register again. Its
    name is free afterwards, for any rig."""
    lease_s = brain.settings.lease_s

    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> None:
        last_beat = workers.last_heartbeat(conn, name)
        if last_beat is None:
            raise HTTPException(404, f"no worker {name!r}; list them with `status`")
        silent_s = now - last_beat
        if silent_s <= lease_s:
            wait = int(lease_s - silent_s) + 1
            raise HTTPException(
                409,
                f"worker {name!r} is alive (heartbeat {silent_s:.0f} s ago); stop its "
                f"container first, or retry in {wait} s if it is already stopped",
            )
        drop_leases(conn, outbox, brain.retry, name, now, "was forgotten")
        workers.forget(conn, name)

    brain.write(change)
    brain.check_alerts()
    return {"ok": True, "forgotten": name}


@router.get("", response_model=dict[str, Any])
def list_workers(brain: BrainDep, _: AdminDep) -> Response:
    settings = brain.settings
    with brain.db.read() as conn:
        rows = workers.every(conn)
        busy = task_queue.running_per_worker(conn)
        waiting = task_queue.ready_per_class(conn)
    now = time.time()
    # A worker may rightly wait this long for a task whose model another GPU holds
    # (residency policy) before it counts as idle while work waits (triage).
    idle_limit_s = settings.max_wait_s + settings.lease_s
    listed = [
        {
            "id": row["id"],
            "name": row["id"],
            # the rig the worker runs on ("" from a worker that predates rigs), and the
            # join token it registered with (None: this machine's bootstrap token)
            "host": row["host"],
            "join_token": row["registered_by"],
            "classes": json.loads(row["classes_json"]),
            "gpu_index": row["gpu_index"],
            "gpus": json.loads(row["gpus_json"]),
            "resident_models": json.loads(row["models_json"]),
            "registered_at": row["registered_at"],
            "last_heartbeat": row["last_heartbeat"],
            "alive": now - row["last_heartbeat"] <= settings.lease_s,
            # deregistered on a clean stop: not alive, and not silent either
            "stopped": row["last_heartbeat"] == workers.RETIRED,
            "running": busy.get(row["id"], 0),
            "last_claim_at": row["last_claim_at"],
            # seconds since its last claim (or registration), by the brain's clock
            "idle_s": round(now - (row["last_claim_at"] or row["registered_at"]), 1),
            # READY tasks of the classes this worker serves
            "ready_for_it": sum(waiting.get(c, 0) for c in json.loads(row["classes_json"])),
            "idle_limit_s": idle_limit_s,
            "thermal_blocked": brain.scheduling.thermal.blocked(row["id"]),
            "warnings": brain.scheduling.warnings(row["id"]),
        }
        for row in rows
    ]  # fmt: skip
    return rendered({"workers": listed, "counts": worker_counts(listed)})


def worker_counts(listed: list[dict[str, Any]]) -> dict[str, int]:
    """The dashboard's "alive / expected": a worker that stopped cleanly (deregistered: a
    slot scaled away, a container stopped) is no longer expected; one gone silent still
    is, since nobody said it left."""
    stopped = sum(1 for w in listed if w["stopped"])
    alive = sum(1 for w in listed if w["alive"])
    expected = len(listed) - stopped
    return {"alive": alive, "expected": expected, "silent": expected - alive, "stopped": stopped}
