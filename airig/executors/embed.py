"""The embed executor: Ollama ``/api/embed``."""

from __future__ import annotations

import time

from airig.common.task_schemas import EmbedPayload
from airig.executors.context import ExecContext, ExecResult, elapsed_ms
from airig.executors.ollama_common import call_ollama, duration_metrics, pinned_options


def execute_embed(payload: EmbedPayload, ctx: ExecContext) -> ExecResult:
    options, _ = pinned_options(ctx, payload.model, payload.options)
    start = time.monotonic()
    response = call_ollama(
        ctx,
        payload.model,
        lambda client: client.embed(
            model=payload.model,
            input=payload.input,
            truncate=payload.truncate,
            dimensions=payload.dimensions,
            options=options,
        ),
    )
    embeddings = [list(vector) for vector in response.embeddings]
    metrics = {**duration_metrics(response), "wall_ms": elapsed_ms(start)}
    metrics["vectors"] = len(embeddings)
    return ExecResult(
        output={"embeddings": embeddings, "model": response.model or payload.model},
        metrics=metrics,
    )
