"""The gateway's HTTP API: ``GET /health`` and ``POST /v1/complete`` (03-agents/AGENTS.md,
"The escalation gateway")."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from typing import Literal

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from airig.common.external_images import (
    KIT,
    PROVIDERS,
    ImageRefused,
    check_count,
    check_encoded,
)
from airig.common.http_errors import error_body, error_bytes, install_error_handlers
from airig.common.protocol import ErrorBody, ValidationErrorBody
from airig.gateway.failures import ProviderFailure, Scrubber, classify
from airig.gateway.idempotency import Answers, Reused
from airig.gateway.providers import Completion, Prompt, Provider
from airig.gateway.providers import Image as PromptImage
from airig.gateway.providers import Message as PromptMessage

log = logging.getLogger("airig.gateway")
# What the body's model takes before the provider's own limits are checked: the largest
# image any provider takes (OpenAI's 20 MB as base64), a few more images than the brain sends
MAX_IMAGE_BASE64 = max(limits.max_base64_bytes for limits in PROVIDERS.values())
MAX_IMAGES_A_MESSAGE = 100


class ImageIn(BaseModel):
    """One image as the brain sends it (escalation/images.py): checked against the
    provider's limits before the provider is called (``external_images``)."""

    model_config = ConfigDict(extra="forbid")
    media_type: Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
    data: str = Field(min_length=1, max_length=MAX_IMAGE_BASE64)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["user", "assistant"]
    content: str
    images: list[ImageIn] = Field(default_factory=list, max_length=MAX_IMAGES_A_MESSAGE)


class CompleteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    # The brain's ledger id for this call: repeating it repeats the answer (idempotency.py).
    request_id: str = Field(min_length=1, max_length=64)
    system: str = ""
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int = Field(ge=1, le=32000)
    # "json" itself would shadow BaseModel.json
    want_json: bool = Field(False, alias="json")


class CompleteAnswer(BaseModel):
    request_id: str
    provider: str
    model: str
    text: str
    input_tokens: int
    output_tokens: int
    stop_reason: str


class Health(BaseModel):
    ok: bool
    provider: str
    model: str
    key_loaded: bool


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes")


class TokenGuard:
    """Outermost layer: ``/v1/`` needs the brain's bearer token, checked before a byte of
    the body is read (FastAPI reads the body before a route's dependencies run), and a
    body is bounded as it arrives."""

    def __init__(self, app: ASGIApp, token: str, max_body: int) -> None:
        self.app, self.expected, self.max_body = app, f"Bearer {token}".encode(), max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
            await _json(send, 401, error_bytes(401, "missing or wrong bearer token"))
            return
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body:
            await _json(send, 413, error_bytes(413, f"body over {self.max_body} bytes"))
            return
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body:
                raise BodyTooLarge(self.max_body)
            return message

        await self.app(scope, bounded, send)


async def _json(send: Send, status: int, data: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def fingerprint(body: CompleteRequest) -> str:
    """What makes two requests the same request (all but the request_id)."""
    data = body.model_dump(mode="json", by_alias=True, exclude={"request_id"})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def create_app(
    provider: Provider,
    token: str,
    scrub: Scrubber,
    key_loaded: bool,
    concurrency: int = 4,
    cache_size: int = 1024,
    max_body: int = 24 * 1024 * 1024,
) -> FastAPI:
    app = FastAPI(title="airig gateway", docs_url=None, redoc_url=None)
    install_error_handlers(app)  # the kit's one error body (airig/common/http_errors.py)
    app.add_middleware(TokenGuard, token=token, max_body=max_body)
    answers: Answers[Completion] = Answers(cache_size)
    # Calls beyond it wait here, in arrival order: the provider's rate limit and the
    # owner's bill, not the brain, decide how much runs at once.
    slots = asyncio.Semaphore(concurrency)

    async def call(request_id: str, prompt: Prompt) -> Completion:
        async with slots:
            started = time.monotonic()
            try:
                done = await provider.complete(prompt)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a 502 line
                failure = classify(exc)
                log.warning(
                    "provider call failed",
                    extra={
                        "request_id": request_id,
                        "status": failure.status,
                        "retryable": failure.retryable,
                        "reason": scrub(failure.message),
                        "seconds": round(time.monotonic() - started, 3),
                    },
                )
                raise failure from None
        log.info(
            "provider call",
            extra={
                "request_id": request_id,
                "provider": provider.name,
                "model": provider.model,
                "input_tokens": done.input_tokens,
                "output_tokens": done.output_tokens,
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        return done

    @app.get("/health", response_model=Health)
    async def health() -> Health:
        return Health(ok=True, provider=provider.name, model=provider.model, key_loaded=key_loaded)

    @app.post(
        "/v1/complete",
        response_model=CompleteAnswer,
        responses={
            401: {"model": ErrorBody, "description": "missing or wrong bearer token"},
            409: {"model": ErrorBody, "description": "request_id reused for another request"},
            413: {"model": ErrorBody, "description": "body too large"},
            422: {"model": ValidationErrorBody, "description": "the body does not fit"},
            502: {
                "model": ErrorBody,
                "description": "the provider failed; retryable says if a retry may help, "
                "retry_after_s what the provider asked to wait (its Retry-After)",
            },
        },
    )
    async def complete(body: CompleteRequest) -> CompleteAnswer | JSONResponse:
        try:
            checked_images(body, provider.name)
        except ImageRefused as exc:
            return _failure(422, str(exc), False)
        prompt = Prompt(
            system=body.system,
            messages=tuple(
                PromptMessage(
                    m.role, m.content, tuple(PromptImage(i.media_type, i.data) for i in m.images)
                )
                for m in body.messages
            ),
            max_tokens=body.max_tokens,
            json=body.want_json,
        )
        try:
            done, repeated = await answers.once(
                body.request_id, fingerprint(body), lambda: call(body.request_id, prompt)
            )
        except Reused:
            return _failure(409, "request_id was used for a different request", False)
        except ProviderFailure as failure:
            return _failure(502, scrub(failure.message), failure.retryable, failure.retry_after_s)
        if repeated:
            log.info("answer repeated", extra={"request_id": body.request_id})
        return CompleteAnswer(
            request_id=body.request_id,
            provider=provider.name,
            model=provider.model,
            text=done.text,
            input_tokens=done.input_tokens,
            output_tokens=done.output_tokens,
            stop_reason=done.stop_reason,
        )

    return app


def checked_images(body: CompleteRequest, provider: str) -> None:
    """Every image of the request within ``provider``'s limits, its bytes what its media
    type says (ImageRefused, one line): refused here, never billed by the provider. Only a
    user turn may carry images (both APIs')."""
    limits = PROVIDERS.get(provider, KIT)
    count = sum(len(m.images) for m in body.messages)
    if not count:
        return
    check_count(count, limits)
    total, n = 0, 0
    for index, message in enumerate(body.messages):
        if message.images and message.role != "user":
            raise ImageRefused(
                f"messages[{index}] is an assistant turn: only a user turn has images"
            )
        for image in message.images:
            n += 1
            check_encoded(image.media_type, image.data, f"image {n}", limits, count)
            total += len(image.data)
    if total > limits.max_total_base64:
        raise ImageRefused(
            f"the images are {total} bytes of base64; {provider} takes {limits.max_total_base64}"
        )


def _failure(
    status: int, detail: str, retryable: bool, retry_after_s: float | None = None
) -> JSONResponse:
    body = error_body(status, detail, retryable=retryable, retry_after_s=retry_after_s)
    return JSONResponse(status_code=status, content=body)
