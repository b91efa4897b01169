"""Stored tokens: create, list, revoke (admin), and ``whoami`` for any token.

A join token lets another rig register its workers (``python start_services.py join``).
Revoking it is the way to cut that rig off: the token stops working at once, and so do
the worker tokens of every worker that registered with it (``workers.registered_by``);
their running attempts go back to the queue, so another worker finishes them.
"""

from __future__ import annotations

import sqlite3
from typing import Annotated

from fastapi import APIRouter, Body, HTTPException

from airig.brain.api.auth import hash_token, new_token, store_token
from airig.brain.api.deps import AdminDep, AnyTokenDep, BrainDep
from airig.brain.leases import drop_leases
from airig.brain.store import tokens as token_store
from airig.brain.store import workers as worker_store
from airig.brain.store.events import Outbox
from airig.brain.store.retry import RetryPolicy
from airig.brain.store.trust import DEFAULT_JOIN_TRUST
from airig.common.protocol import (
    ErrorBody,
    JoinTokenRequest,
    TokenCreated,
    TokenInfo,
    TokenList,
    TokenRequest,
    TokenRevoked,
    WhoAmI,
)

router = APIRouter(prefix="/v1", tags=["tokens"])


@router.post("/tokens", status_code=201, response_model=TokenCreated)
def create_token(
    body: Annotated[TokenRequest, Body()], brain: BrainDep, _: AdminDep
) -> TokenCreated:
    """A new scoped token, shown once; only its hash is stored. A join token gets a trust
    level: ``untrusted`` unless the request says ``full``; other scopes take none."""
    name = body.name or body.scope
    trust = (body.trust or DEFAULT_JOIN_TRUST) if isinstance(body, JoinTokenRequest) else None
    token_id, token = store_token(brain.db, body.scope, name, trust)
    return TokenCreated(id=token_id, token=token, scope=body.scope, name=name, trust=trust)


@router.get("/tokens", response_model=TokenList)
def list_tokens(brain: BrainDep, _: AdminDep) -> TokenList:
    """Every stored token, newest first: id, scope, name, dates, a join token's trust.
    Never a token or a hash."""
    with brain.db.read() as conn:
        rows = token_store.every(conn)
    return TokenList(tokens=[_info(row) for row in rows])


def _info(row: sqlite3.Row) -> TokenInfo:
    return TokenInfo(
        id=row["id"], scope=row["scope"], name=row["name"], created_at=row["created_at"],
        revoked=row["revoked_at"] is not None, revoked_at=row["revoked_at"], trust=row["trust"],
    )  # fmt: skip


@router.delete(
    "/tokens/{token_id}",
    response_model=TokenRevoked,
    responses={404: {"model": ErrorBody, "description": "no stored token has this id"}},
)
def revoke_token(token_id: str, brain: BrainDep, _: AdminDep) -> TokenRevoked:
    """Revoke a stored token (idempotent). For a join token, the workers that registered
    with it lose their tokens too (401 from then on) and their attempts are retried."""

    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> TokenRevoked:
        row = token_store.by_id(conn, token_id)
        if row is None:
            raise HTTPException(404, f"no token {token_id}; list them with `token list`")
        revoked_now = row["revoked_at"] is None
        if revoked_now:
            token_store.revoke(conn, token_id, now)
        workers = worker_store.registered_with(conn, token_id)
        for worker in workers:
            _retire(conn, outbox, brain.retry, worker, now)
        return TokenRevoked(
            id=token_id, scope=row["scope"], revoked_now=revoked_now, workers_revoked=workers
        )

    return brain.write(change)


def _retire(
    conn: sqlite3.Connection, outbox: Outbox, policy: RetryPolicy, worker: str, now: float
) -> None:
    """A cut-off worker: its attempts are retried elsewhere, its token and name are gone
    (a random token nobody holds; no heartbeat, so the name is free at once)."""
    drop_leases(conn, outbox, policy, worker, now, "was cut off (its join token was revoked)")
    worker_store.retire(conn, worker, hash_token(new_token()))


@router.get("/whoami", response_model=WhoAmI)
def whoami(who: AnyTokenDep) -> WhoAmI:
    """The scope and name of the bearer token: `join` checks its token with it before it
    starts anything on the joining machine."""
    return WhoAmI(scope=who.scope, name=who.name)
