"""The llm executor: Ollama generate or chat, with untrusted text spotlighted."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import ollama

from airig.common.spotlight import contains_reserved_delimiter, with_notice, wrap_untrusted
from airig.common.task_schemas import LlmPayload
from airig.executors.context import ExecContext, ExecResult, TaskError, elapsed_ms
from airig.executors.media import ImageFile, image_paths, model_image, read_image
from airig.executors.ollama_common import call_ollama, duration_metrics, pinned_options

T = TypeVar("T")


@dataclass
class ModelRequest:
    """What goes to Ollama once untrusted spans are wrapped: a prompt or messages."""

    system: str | None
    prompt: str | None = None
    messages: list[dict] | None = None
    wrapped: bool = False


def build_request(payload: LlmPayload, trusted: bool) -> ModelRequest:
    """Wrap every untrusted span; when the task is tainted, all of its input is untrusted.

    The system text stays outside the delimiters (it carries our notice) but, like every
    other text, it may not contain a reserved delimiter once anything is wrapped.
    """
    if payload.prompt is not None:
        request = _generate_request(payload, payload.prompt, trusted)
    else:
        request = _chat_request(payload, trusted)
    if request.wrapped:
        _refuse_forged_delimiters(payload)
        if request.messages is not None:
            request.messages = _with_system_notice(request.messages)
        else:
            request.system = with_notice(request.system)
    return request


def _generate_request(payload: LlmPayload, prompt: str, trusted: bool) -> ModelRequest:
    parts = [prompt if trusted else wrap_untrusted(prompt)]
    if payload.untrusted_input is not None:
        parts.append(wrap_untrusted(payload.untrusted_input))
    wrapped = not trusted or payload.untrusted_input is not None
    return ModelRequest(system=payload.system, prompt="\n\n".join(parts), wrapped=wrapped)


def _chat_request(payload: LlmPayload, trusted: bool) -> ModelRequest:
    messages = []
    if payload.system is not None:
        messages.append({"role": "system", "content": payload.system})
    for message in payload.messages or []:
        keep = trusted or message.role == "system"
        content = message.content if keep else wrap_untrusted(message.content)
        messages.append({"role": message.role, "content": content})
    if payload.untrusted_input is not None:
        messages.append({"role": "user", "content": wrap_untrusted(payload.untrusted_input)})
    wrapped = not trusted or payload.untrusted_input is not None
    return ModelRequest(system=None, messages=messages, wrapped=wrapped)


def _with_system_notice(messages: list[dict]) -> list[dict]:
    """Put the notice into the first system message, adding one when there is none."""
    for index, message in enumerate(messages):
        if message["role"] == "system":
            updated = {"role": "system", "content": with_notice(message["content"])}
            return [*messages[:index], updated, *messages[index + 1 :]]
    return [{"role": "system", "content": with_notice(None)}, *messages]


def _refuse_forged_delimiters(payload: LlmPayload) -> None:
    texts = {"prompt": payload.prompt, "system": payload.system}
    texts["untrusted_input"] = payload.untrusted_input
    for index, message in enumerate(payload.messages or []):
        texts[f"messages[{index}].content"] = message.content
    for name, text in texts.items():
        if text is not None and contains_reserved_delimiter(text):
            raise TaskError(
                f"{name} contains a reserved <untrusted_data> delimiter",
                error_type="bad_input",
                retryable=False,
                hint="untrusted text may not contain the delimiters that mark it",
            )


VISION_MODEL_HINT = "qwen2.5vl:7b"


def execute_llm(payload: LlmPayload, ctx: ExecContext) -> ExecResult:
    request = build_request(payload, ctx.trusted)
    options, overridden = pinned_options(ctx, payload.model, payload.options)
    images: list[ImageFile] = []
    if payload.images is not None:
        # Every image is read and checked before the model is asked for or loaded; a TIFF
        # or GIF then becomes the PNG every Ollama of the kit decodes (media.model_image).
        images = [read_image(ctx, path) for path in image_paths(payload.images)]
        images = [model_image(ctx, image) for image in images]
        require_vision(ctx, payload.model)
    start = time.monotonic()
    if payload.per_image:
        answers = [(image, _call(payload, request, options, [image], ctx)) for image in images]
        finals = [final for _, (_, final) in answers]
        texts = [text for _, (text, _) in answers]
        output: dict[str, Any] = {
            "text": "\n\n".join(texts),
            "images": [{"path": image.path, "text": text} for image, (text, _) in answers],
            "model": finals[-1].model or payload.model,
        }
        metrics = _summed_metrics(finals)
        final = finals[-1]
    else:
        text, final = _call(payload, request, options, images, ctx)
        output = {"text": text, "model": final.model or payload.model}
        metrics = duration_metrics(final)
    metrics["wall_ms"] = elapsed_ms(start)
    if images:
        metrics["images"] = len(images)
        metrics["image_bytes"] = sum(len(image.data) for image in images)
        converted = sum(1 for image in images if image.converted_from)
        if converted:
            metrics["images_converted"] = converted
    if overridden:
        metrics["options_overridden"] = overridden
    if final.done_reason:
        output["done_reason"] = final.done_reason
    output["untrusted_wrapped"] = request.wrapped
    return ExecResult(output=output, metrics=metrics)


def _call(
    payload: LlmPayload,
    request: ModelRequest,
    options: dict | None,
    images: list[ImageFile],
    ctx: ExecContext,
) -> tuple[str, Any]:
    """One generate or chat call; images go as Ollama's API takes them: base64 in the
    generate request's ``images``, or on the last user message of a chat (api/types.go
    GenerateRequest.Images, Message.Images; the client base64-encodes ``Image`` bytes)."""
    model, fmt = payload.model, payload.format
    prompt, system, messages = request.prompt, request.system, request.messages
    pictures = [ollama.Image(value=image.data) for image in images] or None
    # build_request sets exactly one of prompt (generate) and messages (chat).
    if prompt is not None:

        def generate(client: ollama.Client) -> tuple[str, Any]:
            # ollama 0.6's overloads type ``system`` as ``str = ''``; the implementation
            # takes ``Optional[str] = None`` and leaves None out of the request body
            # (model_dump(exclude_none=True)), which keeps the Modelfile's system text.
            stream = client.generate(  # type: ignore[call-overload]
                model=model, prompt=prompt, system=system, options=options, format=fmt,
                images=pictures, stream=True,
            )  # fmt: skip
            return _consume(_closable(stream), ctx)

        return call_ollama(ctx, model, generate)
    chat_messages = _with_images(messages or [], pictures)

    def chat(client: ollama.Client) -> tuple[str, Any]:
        stream = client.chat(
            model=model, messages=chat_messages, options=options, format=fmt, stream=True
        )
        return _consume(_closable(stream), ctx)

    return call_ollama(ctx, model, chat)


def _with_images(messages: list[dict], pictures: list[ollama.Image] | None) -> list[dict]:
    """The images on the last user message (a chat model sees them with that turn)."""
    if not pictures:
        return messages
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == "user":
            updated = {**messages[index], "images": pictures}
            return [*messages[:index], updated, *messages[index + 1 :]]
    return [*messages, {"role": "user", "content": "", "images": pictures}]


def _summed_metrics(finals: list[Any]) -> dict:
    """Per-image calls: counts and durations added up, the rate from the totals."""
    total: dict = {}
    for final in finals:
        for key, value in duration_metrics(final).items():
            if key != "tokens_per_s":
                total[key] = round(total.get(key, 0) + value, 3)
    evals = sum(getattr(final, "eval_count", None) or 0 for final in finals)
    nanos = sum(getattr(final, "eval_duration", None) or 0 for final in finals)
    if evals and nanos:
        total["tokens_per_s"] = round(evals / nanos * 1e9, 3)
    return total


def model_capabilities(ctx: ExecContext, model: str) -> list[str] | None:
    """What Ollama's ``/api/show`` says the model can do (``vision``, ``completion``,
    ``embedding`` ...); None when this Ollama does not report capabilities."""

    def show(client: ollama.Client) -> Any:
        return client.show(model)

    answer = call_ollama(ctx, model, show)
    capabilities = getattr(answer, "capabilities", None)
    return None if capabilities is None else [str(c) for c in capabilities]


def require_vision(ctx: ExecContext, model: str) -> None:
    """Refuse a model without Ollama's "vision" capability before any image is sent:
    Ollama itself does not refuse one, it drops the images and answers from the text alone
    (runner/ollamarunner/runner.go and runner/llamarunner/runner.go ``inputs``: without a
    multimodal model the prompt is not split at its image tags)."""
    capabilities = model_capabilities(ctx, model)
    if capabilities is not None and "vision" not in capabilities:
        raise not_vision_error(model, capabilities)


def not_vision_error(model: str, capabilities: list[str]) -> TaskError:
    return TaskError(
        f"model {model!r} cannot see images (Ollama lists its capabilities as "
        f"{', '.join(capabilities) or 'none'}; 'vision' is not among them)",
        error_type="model_not_vision",
        retryable=False,
        hint=(
            f"name a vision model, e.g. {VISION_MODEL_HINT}, and add it to AIRIG_OLLAMA_MODELS "
            "in .env so it is pulled"
        ),
        details={"model": model, "capabilities": capabilities},
    )


def _closable(stream: Iterator[T]) -> Generator[T, None, None]:
    """ollama.Client annotates a streamed reply as an Iterator; it is the generator
    ``Client._request``'s ``inner()``, and closing it closes the HTTP response."""
    return cast(Generator[T, None, None], stream)


def _consume(stream: Generator[Any, None, None], ctx: ExecContext) -> tuple[str, Any]:
    """Collect a streamed reply; the last chunk carries Ollama's counters.

    Streaming is what makes a cancel stop the GPU: between chunks we notice it, close
    the stream, and Ollama aborts the generation when the client goes away.
    """
    parts, last = [], None
    try:
        for chunk in stream:
            message = getattr(chunk, "message", None)
            parts.append((message.content if message else chunk.response) or "")
            last = chunk
            if ctx.cancel.is_set() or ctx.remaining() <= 0:
                break
    finally:
        stream.close()
    if last is None or not last.done:
        ctx.check()
        raise TaskError("Ollama ended the reply early", error_type="service_unavailable")
    return "".join(parts), last
