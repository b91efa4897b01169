"""The brain's outermost ASGI layer: who is asking, and how much they may send.

FastAPI reads a request's whole body before it resolves the route's dependencies, so
without this layer an anonymous client could make the brain buffer any amount of data
before the 401 (a 500 MB body to ``/v1/tokens`` took the brain to 1.5 GB). Here, for every
request that carries a body:

- the bearer token is looked up before a byte of the body is read: no token or an
  unknown one is a 401 at once (the route still checks the token's scope);
- the body is bounded per route: a declared ``Content-Length`` over the bound is a 413
  at once, and the stream is counted as it arrives (``BodyTooLarge`` is an
  ``HTTPException``, so FastAPI and the exchange fast path both turn it into a 413).

Requests without a body (GET, HEAD) pass through untouched.
"""

from __future__ import annotations

import re

from fastapi import FastAPI, HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from airig.brain.api.auth import bearer_from_scope, identify_token
from airig.brain.settings import BrainSettings
from airig.common.http_errors import error_bytes

SMALL_BODY = 1024 * 1024  # registration, heartbeats, claims, lease writes, tokens
EXCHANGE_BODY = 16 * 1024 * 1024  # reports carry results inline
_FILE_UPLOAD = re.compile(r"^/v1/tasks/[^/]+/files/[^/]+$")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes")


def body_limit(settings: BrainSettings, method: str, path: str) -> int:
    """The most bytes a request to this route may carry."""
    if path == "/v1/plans":
        return settings.max_plan_bytes
    if method == "PUT" and _FILE_UPLOAD.match(path):
        return settings.max_file_bytes
    if path == "/v1/exchange":
        return EXCHANGE_BODY
    return SMALL_BODY


class RequestGuard:
    def __init__(self, app: ASGIApp, fastapi_app: FastAPI) -> None:
        self.app = app  # the next layer of the FastAPI app's middleware stack
        self.state = fastapi_app.state  # settings and database for the token lookup
        self.routes = fastapi_app.router.routes

    def _routed(self, scope: Scope) -> bool:
        # A method or path the API does not serve gets the router's own 404 / 405
        # (neither reads the body), not a 401 that would hide what is wrong.
        return any(route.matches(scope)[0] == Match.FULL for route in self.routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in _BODY_METHODS
            or not self._routed(scope)
        ):
            await self.app(scope, receive, send)
            return
        token = bearer_from_scope(scope)
        if not token:
            await _reply(send, 401, "missing bearer token")
            return
        settings = self.state.settings
        if identify_token(settings, self.state.db, token) is None:
            await _reply(send, 401, "unknown token")
            return
        limit = body_limit(settings, scope["method"], scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _reply(send, 413, f"request body is larger than {limit} bytes")
            return
        await self.app(scope, _counted(receive, limit), send)


def _counted(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit)
        return message

    return counted


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _reply(send: Send, status: int, detail: str) -> None:
    body = error_bytes(status, detail)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    # The body is not read; the server closes the connection after this answer.
    headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
