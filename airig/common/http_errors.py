"""The one error body every HTTP server of the kit answers with.

The brain, the escalation gateway, the file service (01-infra) and the models-ready gate
(02-compute) refuse a request the same way (``airig/brain/PLANS.md``, "Error bodies")::

    {"detail": ..., "retryable": false, "retry_after_s": null}

- ``detail``: what is wrong and how to fix it. A sentence; for a request that does not
  fit the schema FastAPI's list of ``{"type", "loc", "msg"}`` (where and what only, never
  the input back); for a refused plan ``{"message", "errors", "fixes"}``. ``detail`` is
  the field FastAPI clients, the CLI, the worker and the dashboard already read.
- ``retryable``: whether the same request, sent again unchanged, may succeed (a 5xx, a
  408 / 429, a provider the gateway found down, a name held by a live worker); a 4xx that
  names something to fix is not.
- ``retry_after_s``: how long to wait first when the server knows (a ``Retry-After``),
  else null.

The pydantic models that publish it in the OpenAPI documents are
``airig.common.protocol.ErrorBody`` and its kin; this module builds the body and the
bytes, with the standard library alone, so the gate (a ``http.server`` process) needs
nothing more, and installs the handlers of a FastAPI app.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

# Every error body has exactly these keys.
FIELDS = ("detail", "retryable", "retry_after_s")
# Worth sending again as it was: timeouts, rate limits, a server that failed or is busy.
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


def retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header's delay in seconds (the delta form); None otherwise."""
    text = (value or "").strip()
    if not (text.isascii() and text.isdigit()):
        return None
    return float(text)


def error_body(
    status: int,
    detail: Any,
    *,
    retryable: bool | None = None,
    retry_after_s: float | None = None,
) -> dict[str, Any]:
    """The body of a refusal. ``retryable`` defaults to the status's own rule, or true
    when the server says how long to wait."""
    if retryable is None:
        retryable = retryable_status(status) or retry_after_s is not None
    return {"detail": detail, "retryable": retryable, "retry_after_s": retry_after_s}


def error_bytes(
    status: int,
    detail: Any,
    *,
    retryable: bool | None = None,
    retry_after_s: float | None = None,
) -> bytes:
    """``error_body`` as the JSON bytes of a response (stdlib and raw ASGI servers)."""
    body = error_body(status, detail, retryable=retryable, retry_after_s=retry_after_s)
    return json.dumps(body).encode()


def headers_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The ``Retry-After`` an exception's headers carry, in seconds."""
    for name, value in (headers or {}).items():
        if name.lower() == "retry-after":
            return retry_after_seconds(value)
    return None


def validation_detail(errors: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pydantic's or FastAPI's errors, where and what only: the input is never echoed (it
    may be undecodable bytes or NaN, which JSON cannot carry back)."""
    return [
        {"type": e.get("type"), "loc": list(e.get("loc", ())), "msg": str(e.get("msg"))}
        for e in errors
    ]


def install_error_handlers(app: FastAPI) -> None:
    """Make a FastAPI app answer every refusal with the one body: HTTP errors (its
    routes', the router's 404 / 405, a bearer scheme's), requests that do not fit the
    schema, and anything unexpected (a 500 naming the exception type, no traceback)."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.requests import Request
    from starlette.responses import Response

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        body = error_body(exc.status_code, exc.detail, retry_after_s=headers_retry_after(headers))
        return JSONResponse(body, exc.status_code, headers=headers)

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse(error_body(422, validation_detail(exc.errors())), 422)

    async def unexpected(request: Request, exc: Exception) -> Response:
        detail = f"internal error: {type(exc).__name__}"
        return JSONResponse(error_body(500, detail), 500)

    app.add_exception_handler(StarletteHTTPException, refused)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(Exception, unexpected)
