"""The resource executor: load or unload a model on Ollama, ComfyUI or the Whisper server.

The brain schedules these around model swaps; durations go into ``load_ms`` /
``unload_ms`` so swap costs can be measured.
"""

from __future__ import annotations

import time

import requests

from airig.common.task_schemas import ResourcePayload
from airig.executors.context import ExecContext, ExecResult, TaskError, elapsed_ms, run_abortable
from airig.executors.ollama_common import (
    call_ollama,
    duration_metrics,
    normalise_model,
    pinned_options,
)

_PS_POLL_S = 0.25


def execute_resource(payload: ResourcePayload, ctx: ExecContext) -> ExecResult:
    handler = _HANDLERS[(payload.service, payload.action)]
    return handler(payload, ctx)


def _ollama_load(payload: ResourcePayload, ctx: ExecContext) -> ExecResult:
    """An empty generate loads the model; ``keep_alive`` -1 keeps it until unloaded.

    The pinned options go along so the first real request finds the model loaded with
    the same runner options and does not reload it.
    """
    model = payload.model or ""
    options, _ = pinned_options(ctx, model, payload.options)
    keep_alive = payload.keep_alive if payload.keep_alive is not None else -1
    start = time.monotonic()
    response = call_ollama(
        ctx,
        model,
        lambda client: client.generate(model=model, keep_alive=keep_alive, options=options),
    )
    metrics = duration_metrics(response)
    metrics.setdefault("load_ms", elapsed_ms(start))
    metrics["wall_ms"] = elapsed_ms(start)
    facts = _ollama_loaded(ctx, model).get(normalise_model(model))
    output = {"service": "ollama", "action": "load", "model": model, "loaded": facts is not None}
    output.update(facts or {})
    return ExecResult(output=output, metrics=metrics)


def _ollama_unload(payload: ResourcePayload, ctx: ExecContext) -> ExecResult:
    """``keep_alive: 0`` asks Ollama to unload; poll ``/api/ps`` until it really is gone."""
    model = payload.model or ""
    start = time.monotonic()
    note = ""
    try:
        call_ollama(ctx, model, lambda client: client.generate(model=model, keep_alive=0))
    except TaskError as exc:
        if exc.error_type != "model_not_found":
            raise
        note = "model is not installed, so it was not loaded"
    deadline = time.monotonic() + min(payload.wait_s, ctx.remaining())
    while normalise_model(model) in _ollama_loaded(ctx, model):
        if time.monotonic() >= deadline:
            raise TaskError(
                f"Ollama still lists {model!r} as loaded after {payload.wait_s:g} s",
                error_type="unload_timeout",
                hint="a request may still be using it; see `ollama ps`",
            )
        ctx.cancel.wait(_PS_POLL_S)
        ctx.check()
    output = {"service": "ollama", "action": "unload", "model": model, "unloaded": True}
    if note:
        output["note"] = note
    return ExecResult(output=output, metrics={"unload_ms": elapsed_ms(start)})


def _ollama_loaded(ctx: ExecContext, model: str) -> dict[str, dict]:
    """Loaded models by normalised name, with their size and VRAM share."""
    response = call_ollama(ctx, model, lambda client: client.ps())
    loaded = {}
    for entry in response.models:
        facts = {"size": entry.size, "size_vram": entry.size_vram}
        loaded[normalise_model(entry.model or entry.name or "")] = facts
    return loaded


def _comfyui_unload(payload: ResourcePayload, ctx: ExecContext) -> ExecResult:
    """``POST /free``: ComfyUI unloads its models and frees cached memory between prompts."""
    start = time.monotonic()
    _http(
        ctx,
        "POST",
        f"{ctx.comfyui_url.rstrip('/')}/free",
        "ComfyUI",
        json={"unload_models": True, "free_memory": True},
    )
    output = {"service": "comfyui", "action": "unload", "unloaded": True}
    return ExecResult(output=output, metrics={"unload_ms": elapsed_ms(start)})


def _whisper_route(payload: ResourcePayload) -> str:
    return f"/api/ps/{payload.model}"


def _whisper_load(payload: ResourcePayload, ctx: ExecContext) -> ExecResult:
    """speaches: ``POST /api/ps/{model}`` loads (201); 409 means it already is loaded.

    The model must be installed (``GET /v1/models/{id}``: 404 when not, speaches
    routers/models.py): speaches 0.8.3 would otherwise download it inside the load, past
    the kit's verification, and a model it cannot load answers 500 yet stays registered,
    so a retry would get 409 and report a model loaded that never was. Both are final."""
    start = time.monotonic()
    base = ctx.whisper_url.rstrip("/")
    _http(ctx, "GET", f"{base}/v1/models/{payload.model}", "the Whisper server")
    response = _http(ctx, "POST", base + _whisper_route(payload), "the Whisper server",
                     ok=(200, 201, 409), final_5xx=True)  # fmt: skip
    output = {"service": "whisper", "action": "load", "model": payload.model, "loaded": True}
    if response.status_code == 409:
        output["note"] = "already loaded"
    return ExecResult(output=output, metrics={"load_ms": elapsed_ms(start)})


def _whisper_unload(payload: ResourcePayload, ctx: ExecContext) -> ExecResult:
    """speaches: ``DELETE /api/ps/{model}`` unloads (204); 404 = not loaded (nothing to do).

    409 means the model is in use: retry later rather than pull it from under a request.
    A 409 saying "is not loaded" (a model whose load failed: speaches keeps it registered
    with no reference, model_manager.py) can never succeed on retry: nothing to unload."""
    start = time.monotonic()
    url = ctx.whisper_url.rstrip("/") + _whisper_route(payload)
    response = _http(ctx, "DELETE", url, "the Whisper server", ok=(200, 204, 404, 409))
    if response.status_code == 409 and "is not loaded" not in response.text:
        detail = response.text[:300]
        raise TaskError(f"the Whisper server is busy with that model: {detail}",
                        error_type="service_busy")  # fmt: skip
    output = {"service": "whisper", "action": "unload", "model": payload.model, "unloaded": True}
    if response.status_code in (404, 409):
        output["note"] = "was not loaded"
    return ExecResult(output=output, metrics={"unload_ms": elapsed_ms(start)})


def _http(
    ctx: ExecContext,
    method: str,
    url: str,
    service: str,
    *,
    ok=(200,),
    json=None,
    final_5xx: bool = False,
) -> requests.Response:
    """``final_5xx``: a server error is the model's fault, not the server's (no retry)."""
    session = requests.Session()
    try:
        response = run_abortable(
            ctx,
            lambda: session.request(method, url, json=json, timeout=(5.0, ctx.remaining() + 5.0)),
            session.close,
        )
    except requests.RequestException as exc:
        ctx.check()
        raise TaskError(
            f"{service} at {url} is unreachable: {type(exc).__name__}",
            error_type="service_unreachable",
        ) from None
    finally:
        session.close()
    if response.status_code in ok:
        return response
    detail = response.text[:300]
    if response.status_code == 409:
        raise TaskError(f"{service} is busy with that model: {detail}", error_type="service_busy")
    if response.status_code == 404:
        raise TaskError(
            f"{service} does not know that model: {detail}",
            error_type="model_not_found",
            retryable=False,
        )
    if final_5xx and response.status_code >= 500:
        raise TaskError(
            f"{service} could not load that model (HTTP {response.status_code}): {detail}",
            error_type="model_load_failed",
            retryable=False,
        )
    raise TaskError(
        f"{service} failed (HTTP {response.status_code}): {detail}",
        error_type="service_unavailable",
    )


_HANDLERS = {
    ("ollama", "load"): _ollama_load,
    ("ollama", "unload"): _ollama_unload,
    ("comfyui", "unload"): _comfyui_unload,
    ("whisper", "load"): _whisper_load,
    ("whisper", "unload"): _whisper_unload,
}
