"""The embed executor: Ollama ``/api/embed``.

With ``index`` the texts are the payload's ``documents``; the output carries them back
(text, source, locator) beside their vectors, in the same order, and the brain adds the
pairs to that search index when the task succeeds (``airig/brain/store/vectors.py``).
"""

from __future__ import annotations

import time
from typing import Any

import ollama

from airig.common.task_schemas import EmbedPayload
from airig.executors.context import ExecContext, ExecResult, TaskError, elapsed_ms
from airig.executors.ollama_common import call_ollama, duration_metrics, pinned_options

# Texts per /api/embed call: one call for a usual batch, several for a long document list.
BATCH = 256


def execute_embed(payload: EmbedPayload, ctx: ExecContext) -> ExecResult:
    options, _ = pinned_options(ctx, payload.model, payload.options)
    try:
        texts = payload.texts()
    except ValueError as exc:
        raise TaskError(str(exc), error_type="bad_input", retryable=False) from None
    start = time.monotonic()
    embeddings: list[list[float]] = []
    metrics: dict[str, Any] = {}
    model = payload.model
    batches: list[str | list[str]] = []
    if payload.index is None and payload.input is not None:
        batches.append(payload.input)  # as given: one string or the list
    else:
        batches += _batches(texts)  # none for no documents: nothing to embed
    for batch in batches:
        response = _embed(ctx, payload, batch, options)
        embeddings += [list(vector) for vector in response.embeddings]
        model = response.model or model
        for key, value in duration_metrics(response).items():
            summed = key != "tokens_per_s"  # a rate: the last batch's
            metrics[key] = metrics.get(key, 0) + value if summed else value
    metrics = {**metrics, "wall_ms": elapsed_ms(start), "vectors": len(embeddings)}
    output: dict[str, Any] = {"embeddings": embeddings, "model": model}
    if payload.index is not None:
        if len(embeddings) != len(texts):
            raise TaskError(
                f"Ollama returned {len(embeddings)} vectors for {len(texts)} texts",
                error_type="bad_output",
            )
        output["index"] = payload.index
        output["documents"] = [
            document.model_dump(exclude_none=True)
            for document in payload.documents or []
            if not isinstance(document, str)
        ]
    return ExecResult(output=output, metrics=metrics)


def _embed(
    ctx: ExecContext, payload: EmbedPayload, batch: str | list[str], options: dict | None
) -> ollama.EmbedResponse:
    return call_ollama(
        ctx,
        payload.model,
        lambda client: client.embed(
            model=payload.model,
            input=batch,
            truncate=payload.truncate,
            dimensions=payload.dimensions,
            options=options,
        ),
    )


def _batches(texts: list[str]) -> list[list[str]]:
    return [texts[i : i + BATCH] for i in range(0, len(texts), BATCH)]
