"""``POST /v1/exchange`` served below FastAPI's routing and dependency layers.

Every task a worker runs passes through this one route, and in the dispatch benchmark
FastAPI's per-request machinery (middleware stack, dependency solving, a second
serialisation pass) cost the brain more CPU than the transaction itself. This ASGI
wrapper answers that route directly: same authentication (worker tokens only), same
request model, same handler (``exchange.run_exchange_async``: its transactions in worker
threads, its long-poll's waits on the event loop, so idle workers hold no thread), the
same error body (``airig/common/http_errors.py``).
Every other path goes to the FastAPI app untouched; the FastAPI route stays for the
OpenAPI schema.

The payloads an answer carries are charged to the brain's in-flight bytes
(``inflight.py``) from their render until the answer's JSON bytes are built (the rendered
objects then go), and given back on every path. Not after the send: uvicorn waits for a
connection's earlier answer to drain before it writes the next, so a worker pipelining
claims it never reads would keep every other claim waiting. The answer then costs its
bytes alone, one copy, written as fast as the worker reads.
"""

from __future__ import annotations

from fastapi import FastAPI, HTTPException
from pydantic import TypeAdapter, ValidationError
from pydantic_core import from_json
from starlette.types import Receive, Scope, Send

from airig.brain.api.auth import bearer_from_scope, identify_token
from airig.brain.api.exchange import run_exchange_async
from airig.brain.api.guard import EXCHANGE_BODY
from airig.brain.inflight import Hold
from airig.brain.service import Brain
from airig.brain.store.unwritable import StoreUnwritable
from airig.common.http_errors import error_bytes, headers_retry_after, validation_detail
from airig.common.jsonsafe_text import Deferred, OutputText, defer_large, outputs_of
from airig.common.protocol import CompleteReport, ExchangeRequest, ExchangeResponse

PATH = "/v1/exchange"
MAX_BODY = EXCHANGE_BODY
# JSON bytes straight from the model: model_dump_json's str, then its encoding, would be
# two copies of every answer.
ANSWER = TypeAdapter(ExchangeResponse)


class ExchangeFastPath:
    def __init__(self, app: FastAPI) -> None:
        self.app = app  # its state holds the brain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Only the exchange: the app's own RequestGuard covers every other route.
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        scope["airig_route"] = PATH  # no router names it: the timing layer's label
        brain: Brain = self.app.state.brain
        with brain.inflight.hold() as hold:  # given back on every path, before the send
            status, body = await self._handle(scope, receive, hold)
        await send({
            "type": "http.response.start", "status": status,
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())],
        })  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    async def _handle(self, scope: Scope, receive: Receive, hold: Hold) -> tuple[int, bytes]:
        state = self.app.state
        token = bearer_from_scope(scope)
        principal = identify_token(state.settings, state.db, token) if token else None
        if principal is None:
            return _error(401, "missing bearer token" if not token else "unknown token")
        if principal.scope != "worker":
            return _error(403, f"this token's scope ({principal.scope}) cannot do that")
        raw = await _read_body(receive)
        if raw is None:
            return _error(413, f"request body over {MAX_BODY} bytes")
        try:
            request = read_request(raw)
        except ValidationError as exc:
            # Where and what only: the input may be undecodable bytes or NaN.
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            return 422, error_bytes(422, validation_detail(errors))
        except ValueError as exc:  # not JSON: the parser's line, worded as pydantic's
            failed = [{"type": "json_invalid", "loc": (), "msg": f"Invalid JSON: {exc}"}]
            return 422, error_bytes(422, validation_detail(failed))
        del raw  # the request's objects stay while the exchange runs, not the bytes too
        brain: Brain = state.brain
        try:
            answer = await run_exchange_async(brain, principal.name, request, hold)
        except HTTPException as exc:
            return _error(exc.status_code, str(exc.detail), headers_retry_after(exc.headers))
        except StoreUnwritable as exc:  # 507 / 503 with the fix (api/unwritable.py)
            return _error(exc.status, exc.detail, exc.retry_after_s, retryable=True)
        except Exception as exc:  # noqa: BLE001 - one JSON error shape, never a traceback
            return _error(500, f"internal error: {type(exc).__name__}")
        return 200, ANSWER.dump_json(answer)  # the rendered payloads go with ``answer``


def read_request(raw: bytes | bytearray) -> ExchangeRequest:
    """The body as a request: ``ValueError`` when it is not JSON, ``ValidationError`` when
    it does not fit. Parsed straight into Python objects, then validated:
    ``model_validate_json`` first builds a tree of its own of the whole document beside
    them (a 7.8 MB list of small numbers: 150 MB where the objects take 60; issue 36), and
    its validation went through the objects anyway (``Inbound`` checks a body whole, as
    Python). NaN is parsed, to be refused with its path by that check. A large flat part
    of an output (a long list of numbers, a long plain text) is not parsed into objects
    at all: checked by pieces and kept as the body's bytes (``jsonsafe_text``)."""
    deferred = defer_large(raw)
    if deferred is not None:
        request = _with_output_texts(deferred)
        if request is not None:
            return request
    return ExchangeRequest.model_validate(from_json(raw, allow_inf_nan=True))


def _with_output_texts(deferred: Deferred) -> ExchangeRequest | None:
    """The request from the body whose large flat parts are markers (``jsonsafe_text``):
    each completion's output that holds some becomes an ``OutputText``, its parts the
    body's own bytes. None when anything is not as expected, the body's refusal
    included: parsed whole then, so every answer and error stays what it was."""
    try:
        # its markers are new texts each time: none goes into the parser's string cache
        body = from_json(deferred.text, allow_inf_nan=True, cache_strings="keys")
        holding = outputs_of(body, deferred)
        if holding is None:
            return None
        request = ExchangeRequest.model_validate(body)
    except ValueError:  # ValidationError too: the whole body's check says it, as before
        return None
    del body
    for index, _ in holding:
        report = request.reports[index]
        if isinstance(report, CompleteReport):
            # Not a field's value a validator sees: set once, read by the completion
            # (``results.result_hash``, ``store_output``, ``value_of``).
            report.__dict__["output"] = OutputText(report.output, deferred)
    return request


async def _read_body(receive: Receive) -> bytearray | None:
    # One buffer the chunks are appended to: a list of them joined at the end held the
    # body twice at once.
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return body
        chunk = message.get("body", b"")
        if len(body) + len(chunk) > MAX_BODY:
            return None
        body += chunk
        if not message.get("more_body"):
            return body


def _error(
    status: int, detail: str, retry_after_s: float | None = None, retryable: bool | None = None
) -> tuple[int, bytes]:
    return status, error_bytes(status, detail, retryable=retryable, retry_after_s=retry_after_s)
