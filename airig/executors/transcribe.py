"""The transcribe executor: a Whisper server's OpenAI-compatible transcription route."""

from __future__ import annotations

import time

import requests

from airig.common.task_schemas import TranscribePayload
from airig.executors.containers import plain_container
from airig.executors.context import (
    ExecContext,
    ExecResult,
    TaskError,
    elapsed_ms,
    resolve_data_path,
    run_abortable,
)

ROUTE = "/v1/audio/transcriptions"
_SUFFIX = {"json": "json", "verbose_json": "json", "text": "txt", "srt": "srt", "vtt": "vtt"}


def execute_transcribe(payload: TranscribePayload, ctx: ExecContext) -> ExecResult:
    audio = resolve_data_path(ctx.data_dir, payload.audio)
    if not audio.is_file():
        raise TaskError(
            f"audio file {payload.audio!r} is not on the data volume",
            error_type="bad_input",
            retryable=False,
            hint=f"put it under {ctx.data_dir}",
        )
    # The Whisper server decodes the upload with ffmpeg's libraries, probing its content:
    # a playlist there would read what it names (files of that container, URLs).
    plain_container(audio, payload.audio, "audio file")
    start = time.monotonic()
    session = requests.Session()
    try:
        response = run_abortable(ctx, lambda: _post(session, payload, audio, ctx), session.close)
    except requests.Timeout:
        raise TaskError("the Whisper server did not answer in time", error_type="timeout") from None
    except requests.RequestException as exc:
        ctx.check()
        raise _unavailable(ctx.whisper_url, exc) from None
    finally:
        session.close()
    _raise_for_status(response, payload.model)
    transcript = f"transcript.{_SUFFIX[payload.response_format]}"
    (ctx.output_dir / transcript).write_bytes(response.content)
    output = _parse(response, payload.response_format)
    output["model"] = payload.model
    metrics = {"wall_ms": elapsed_ms(start), "audio_bytes": audio.stat().st_size}
    return ExecResult(output=output, files=[transcript], metrics=metrics)


def _post(session: requests.Session, payload: TranscribePayload, audio, ctx: ExecContext):
    fields = {
        "model": payload.model,
        "response_format": payload.response_format,
        "language": payload.language,
        "prompt": payload.prompt,
        "temperature": payload.temperature,
    }
    data = {key: str(value) for key, value in fields.items() if value is not None}
    with audio.open("rb") as handle:
        return session.post(
            ctx.whisper_url.rstrip("/") + ROUTE,
            files={"file": (audio.name, handle)},
            data=data,
            timeout=(10.0, ctx.remaining() + 5.0),
        )


def _parse(response: requests.Response, response_format: str) -> dict:
    if response_format not in ("json", "verbose_json"):
        return {"text": response.text}
    try:
        body = response.json()
    except ValueError:
        raise TaskError(
            "the Whisper server sent a reply that is not JSON", error_type="service_unavailable"
        ) from None
    output = {"text": body.get("text", "")}
    for key in ("language", "duration", "segments"):
        if key in body:
            output[key] = body[key]
    return output


def _raise_for_status(response: requests.Response, model: str) -> None:
    if response.ok:
        return
    detail = response.text[:500]
    if response.status_code == 404:
        raise TaskError(
            f"Whisper model {model!r} is not available: {detail}",
            error_type="model_not_found",
            retryable=False,
            hint="add it to AIRIG_WHISPER_MODELS (speaches downloads nothing on first use)",
        )
    if response.status_code in (400, 413, 415, 422):
        raise TaskError(
            f"the Whisper server refused the request (HTTP {response.status_code}): {detail}",
            error_type="bad_input",
            retryable=False,
        )
    raise TaskError(
        f"the Whisper server failed (HTTP {response.status_code}): {detail}",
        error_type="service_unavailable",
    )


def _unavailable(url: str, exc: Exception) -> TaskError:
    return TaskError(
        f"the Whisper server at {url} is unreachable: {type(exc).__name__}",
        error_type="service_unreachable",
        hint="check the whisper service (docker compose ps / logs)",
    )
