"""The FastAPI dependencies the brain's routes share, declared once and typed (as
``api/deps.py`` in the FastAPI full-stack template): the Brain behind the app, and the
holder of the request's bearer token, admitted by scope. A route asks with an annotation
(``brain: BrainDep``, ``_: AdminDep``), never with a call in its argument defaults.

Who holds a token (hashing, stored tokens, the lookup) is ``auth.py``'s: the exchange fast
path and the request guard need it below FastAPI, where no dependency runs.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from airig.brain.api.auth import Principal, identify
from airig.brain.service import Brain

_bearer = HTTPBearer(auto_error=False)


# The dependencies are async on purpose: a sync one costs a thread-pool hop per request,
# and the lookup is one indexed read on its own connection, never blocked by a commit.
async def get_brain(request: Request) -> Brain:
    """The one Brain ``create_app`` binds to the app."""
    brain: Brain = request.app.state.brain
    return brain


async def get_principal(
    request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """Who holds the bearer token: 401 without one or for an unknown one."""
    if creds is None or not creds.credentials:
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    found = identify(request, creds.credentials)
    if found is None:
        raise HTTPException(401, "unknown token", headers={"WWW-Authenticate": "Bearer"})
    return found


def require(*scopes: str) -> Callable[[Principal], Awaitable[Principal]]:
    """A dependency that admits only the given scopes (403 for any other)."""

    async def check(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        if principal.scope not in scopes:
            raise HTTPException(403, f"this token's scope ({principal.scope}) cannot do that")
        return principal

    return check


BrainDep = Annotated[Brain, Depends(get_brain)]
AdminDep = Annotated[Principal, Depends(require("admin"))]
SubmitterDep = Annotated[Principal, Depends(require("admin", "submit"))]
WorkerDep = Annotated[Principal, Depends(require("worker"))]
# Registration: the local bootstrap token, or another rig's join token.
RegistrarDep = Annotated[Principal, Depends(require("bootstrap", "join"))]
# Any valid token (GET /v1/whoami).
AnyTokenDep = Annotated[Principal, Depends(get_principal)]


def rendered(content: Any, status_code: int = 200) -> Response:
    """A route's JSON answer built where the route runs. FastAPI encodes a returned dict on
    the event loop (``jsonable_encoder``, then ``json.dumps``): 8-70 ms for 500 workers,
    every other request waiting (benchmarks/fleet.py, the phase table's "after"). Called
    from a sync route's thread, the loop only sends the bytes."""
    body = json.dumps(content, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return Response(body.encode(), status_code, media_type="application/json")
