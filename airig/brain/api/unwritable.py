"""A store that cannot be written, at the HTTP edge (``store/unwritable.py``).

A write it could not take is answered 507 (full) or 503 (read-only) with the one error
body (``airig/common/http_errors.py``): the fix in ``detail``, ``retryable: true`` (the
write was not stored: sending it again is safe, keyed or not) and ``Retry-After``.
``Brain.write`` raises ``StoreUnwritable`` itself; a storage error from elsewhere (a
transaction of its own, a file beside the store) is read here the same way, and any other
goes on to the one 500. ``/health`` answers 503 ``degraded`` while the store cannot be
written, with the alert it holds.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.responses import Response

from airig import __version__
from airig.brain.service import Brain
from airig.brain.store.unwritable import RETRY_AFTER_S, STATUS, StoreUnwritable, size_text
from airig.common.http_errors import error_body

# Documented once for every /v1 route (``app.COMMON_RESPONSES``).
DESCRIPTIONS = {
    507: "the brain's store is full: nothing was stored; send it again once there is room",
    503: "the brain's store is read-only: nothing was stored; send it again once it is not",
}


def refusal_body(exc: StoreUnwritable) -> dict[str, Any]:
    return error_body(exc.status, exc.detail, retryable=True, retry_after_s=exc.retry_after_s)


def refused(exc: StoreUnwritable) -> JSONResponse:
    headers = {"Retry-After": str(int(exc.retry_after_s))}
    return JSONResponse(refusal_body(exc), exc.status, headers=headers)


def install_unwritable(app: FastAPI, brain: Brain) -> None:
    """The handlers: ``StoreUnwritable``, and storage errors no brain write raised."""

    async def unwritable(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StoreUnwritable)
        return refused(exc)

    async def storage(request: Request, exc: Exception) -> Response:
        # A plain SQLITE_READONLY counts only on a read-only volume here: a read
        # connection refuses writes with it too, and that is a bug, not the disk.
        refusal = brain.refuse(exc, sqlite_readonly=False)
        if refusal is None:
            raise exc  # the one 500 (app.py), with its traceback in the log
        return refused(refusal)

    app.add_exception_handler(StoreUnwritable, unwritable)
    app.add_exception_handler(sqlite3.Error, storage)
    app.add_exception_handler(OSError, storage)


def degraded(brain: Brain) -> JSONResponse | None:
    """``/health``'s answer while the store cannot be written (None: it can)."""
    episode = brain.store_health.episode
    if episode is None:
        return None
    refusal = StoreUnwritable(episode.kind, brain.store_health.where, episode.free)
    body = {
        "status": "degraded",
        "version": __version__,
        "store": episode.kind,
        "free_bytes": episode.free,
        "free": size_text(episode.free),
        **refusal_body(refusal),
        "alerts": [dataclasses.asdict(alert) for alert in brain.held_alerts()],
    }
    return JSONResponse(body, STATUS["read_only"], headers={"Retry-After": str(RETRY_AFTER_S)})
