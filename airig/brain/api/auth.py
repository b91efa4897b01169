"""Scoped bearer tokens.

- admin: the ``BRAIN_ADMIN_TOKEN`` from the environment, or a stored admin token.
- submit: stored tokens created by an admin (``POST /v1/tokens``); submit and read plans.
- worker: traded for the bootstrap token at registration; acts only on its own leases.
- join: stored, created by an admin for another rig (`token create --join`); registers
  workers like the bootstrap token and does nothing else. Its trust level (``untrusted``
  unless created with ``full``) says what its workers may receive (``trust.py``).
  Revoking it (``revoked_at``) also retires the worker tokens of every worker that
  registered with it.
Stored tokens are kept as SHA-256 hashes (they are 256-bit random, so no slow hash is
needed); comparisons with the environment secrets are constant-time.

The FastAPI dependencies that admit a route by scope (``AdminDep``, ``WorkerDep``, ...) live
in ``deps.py``. This module holds only the token model, which the exchange fast path and
the request guard use below FastAPI, where no dependency runs.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from fastapi import Request
from starlette.types import Scope

from airig.brain.settings import BrainSettings
from airig.brain.store import tokens, workers
from airig.brain.store.db import Database
from airig.brain.store.schema import new_token_id


@dataclass(frozen=True)
class Principal:
    scope: str  # admin | submit | metrics | join | worker | bootstrap
    name: str
    token_id: str | None = None  # a stored token's id (admin, submit, metrics, join)


def owner_of(who: Principal) -> str:
    """What a plan or goal records as its owner: the stored token's id, so two tokens
    with the same name own apart; the settings' admin token has no id."""
    return f"token:{who.token_id}" if who.token_id else f"{who.scope}:{who.name}"


def may_act_on(who: Principal, owner: str | None) -> bool:
    """Admin acts on everything; a submit token only on what it submitted (a plan from
    before owners were recorded, ``owner`` NULL, is admin's alone)."""
    return who.scope == "admin" or (owner is not None and owner == owner_of(who))


def new_token() -> str:
    return secrets.token_urlsafe(32)


def _raw(token: str) -> bytes:
    # Header values arrive latin-1 decoded; a token may hold any byte (or, from a
    # settings file, any character), so compare and hash bytes, never str.
    return token.encode("utf-8", "surrogateescape")


def hash_token(token: str) -> str:
    return hashlib.sha256(_raw(token)).hexdigest()


def bearer_from_scope(scope: Scope) -> str:
    """The bearer token of a raw ASGI request, or ''."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            kind, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if kind.lower() == "bearer" else ""
    return ""


def store_token(db: Database, scope: str, name: str, trust: str | None = None) -> tuple[str, str]:
    """A new stored token: (its id, the token). Only the hash is kept. ``trust``: a join
    token's rig's trust level (``trust.JOIN_TRUST``)."""
    token, token_id = new_token(), new_token_id()
    with db.tx() as conn:
        tokens.insert(conn, hash_token(token), token_id, scope, name, time.time(), trust)
    return token_id, token


def identify(request: Request, token: str) -> Principal | None:
    """Who holds this token, or None."""
    return identify_token(request.app.state.settings, request.app.state.db, token)


def identify_token(settings: BrainSettings, db: Database, token: str) -> Principal | None:
    """Who holds this token, or None (for callers without a FastAPI request)."""
    given = _raw(token)
    if hmac.compare_digest(given, _raw(settings.admin_token)):
        return Principal("admin", "admin")
    if hmac.compare_digest(given, _raw(settings.bootstrap_token)):
        return Principal("bootstrap", "bootstrap")
    digest = hash_token(token)
    with db.lookup() as conn:
        found = tokens.by_hash(conn, digest)
        if found:
            if found["revoked_at"] is not None:
                return None
            return Principal(found["scope"], found["name"], found["id"])
        worker = workers.by_token_hash(conn, digest)
    return Principal("worker", worker) if worker is not None else None
