"""What the llm, embed and resource executors share about Ollama."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

# httpx only as the ollama client's transport: its timeout type and the errors the client
# lets through. Hand-written HTTP (ComfyUI, Whisper; the worker to the brain) uses requests.
import httpx
import ollama

from airig.executors.context import ExecContext, TaskError, run_abortable

T = TypeVar("T")

# What an ollama.Client call raises besides its answer: the server's refusal
# (ResponseError), the builtin ConnectionError it makes of a refused connection, the httpx
# errors it passes on (timeouts, a dropped connection) and ValueError for an unreadable body.
CLIENT_ERRORS = (ollama.ResponseError, ConnectionError, httpx.HTTPError, ValueError)

# Options that decide how Ollama loads a model (its runner options). Requests for a
# loaded model that differ in any of these make Ollama reload it, silently (#8903).
LOAD_OPTION_KEYS = frozenset(
    {"num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread"}
)

_OOM_MARKERS = ("out of memory", "cudamalloc failed", "insufficient memory")


def make_client(ctx: ExecContext) -> ollama.Client:
    # The read timeout only bounds a silent connection; run_abortable enforces the
    # attempt's own limit and closes the client to stop Ollama mid-request.
    timeout = httpx.Timeout(ctx.remaining() + 5.0, connect=10.0)
    return ollama.Client(host=ctx.ollama_url, timeout=timeout)


def pinned_options(
    ctx: ExecContext, model: str, requested: dict | None
) -> tuple[dict | None, list]:
    """Merge the options pinned for ``model`` over the requested ones.

    Returns the options to send and the load-time keys whose requested value was
    overridden (reported as a metric so a plan author can see why).
    """
    pinned = ctx.model_options.get(model) or ctx.model_options.get(normalise_model(model)) or {}
    merged = dict(requested or {})
    overridden = sorted(
        key for key, value in pinned.items() if key in merged and merged[key] != value
    )
    merged.update(pinned)
    return (merged or None), overridden


def normalise_model(name: str) -> str:
    """Ollama names a model without a tag ``<name>:latest``."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def call_ollama(ctx: ExecContext, model: str, request: Callable[[ollama.Client], T]) -> T:
    """Run one client call, abortable, with Ollama's failures turned into TaskErrors."""
    client = make_client(ctx)
    try:
        return run_abortable(ctx, lambda: request(client), client.close)
    except ollama.ResponseError as exc:
        raise response_error(exc, model) from None
    except ConnectionError:
        # The client turns httpx.ConnectError into the builtin ConnectionError.
        raise unavailable(ctx.ollama_url) from None
    except httpx.TimeoutException:
        raise TaskError(
            "Ollama did not answer in time", error_type="timeout", hint="is the GPU overloaded?"
        ) from None
    except httpx.TransportError as exc:
        ctx.check()  # a connection we closed ourselves on cancel or timeout
        raise unavailable(ctx.ollama_url, str(exc)) from None
    finally:
        client.close()


def unavailable(url: str, detail: str = "") -> TaskError:
    suffix = f": {detail}" if detail else ""
    return TaskError(
        f"Ollama at {url} is unreachable{suffix}",
        # an infrastructure condition (down, restarting): the brain holds the task and
        # retries it without counting it against the task's retries (store/retry.py)
        error_type="service_unreachable",
        hint="check the ollama service (docker compose ps / logs)",
    )


def response_error(exc: ollama.ResponseError, model: str) -> TaskError:
    message = str(exc.error)[:500]
    lowered = message.lower()
    if exc.status_code == 404:
        return TaskError(
            f"model {model!r} is not on the Ollama server: {message}",
            error_type="model_not_found",
            retryable=False,
            hint="add it to AIRIG_OLLAMA_MODELS and restart, or `ollama pull` it",
        )
    if any(marker in lowered for marker in _OOM_MARKERS):
        return TaskError(f"Ollama ran out of memory: {message}", error_type="oom")
    if exc.status_code == 400:
        return TaskError(
            f"Ollama refused the request: {message}", error_type="bad_input", retryable=False
        )
    return TaskError(
        f"Ollama failed (HTTP {exc.status_code}): {message}", error_type="service_unavailable"
    )


def duration_metrics(response: Any) -> dict:
    """Ollama's own timings (nanoseconds) and token counts as report metrics."""
    metrics: dict = {}
    eval_count = getattr(response, "eval_count", None)
    eval_duration = getattr(response, "eval_duration", None)
    prompt_count = getattr(response, "prompt_eval_count", None)
    if prompt_count is not None:
        metrics["tokens_prompt"] = prompt_count
    if eval_count is not None:
        metrics["tokens_completion"] = eval_count
    if eval_count and eval_duration:
        metrics["tokens_per_s"] = round(eval_count / eval_duration * 1e9, 3)
    for name, key in (("load_duration", "load_ms"), ("total_duration", "run_ms")):
        value = getattr(response, name, None)
        if value is not None:
            metrics[key] = round(value / 1e6, 3)
    if getattr(response, "prompt_eval_duration", None):
        metrics["prompt_eval_ms"] = round(response.prompt_eval_duration / 1e6, 3)
    return metrics
