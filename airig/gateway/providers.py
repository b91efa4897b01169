"""One provider behind one method: ``complete(prompt) -> Completion``, through the
official client of each API (AGENTS.md, "HTTP clients").

- ``openai``: ``AsyncOpenAI().chat.completions.create`` (also any OpenAI-compatible
  server through ``base_url``); usage ``prompt_tokens`` / ``completion_tokens``.
- ``anthropic``: ``AsyncAnthropic().messages.create``, the system prompt in ``system=``
  (the Messages API refuses a "system" role message), usage ``input_tokens`` /
  ``output_tokens``, the answer in ``text`` content blocks.

Both clients run with ``max_retries=0`` and a timeout: the brain retries with backoff
and jitter and keeps the task visibly waiting, so a retry inside the gateway would only
hide the outage and double the waiting. The key is passed explicitly, never through the
clients' environment variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anthropic
import openai

from airig.gateway.failures import ProviderFailure

# json=true: both APIs are asked in words (OpenAI's json_object mode also refuses a
# request whose messages never say "JSON").
JSON_INSTRUCTION = "Answer with one JSON object and nothing else."


@dataclass(frozen=True)
class Image:
    media_type: str  # image/png, image/jpeg, image/gif or image/webp (app.py checked it)
    data: str  # base64


@dataclass(frozen=True)
class Message:
    role: Literal["user", "assistant"]
    content: str
    images: tuple[Image, ...] = ()


@dataclass(frozen=True)
class Prompt:
    system: str
    messages: tuple[Message, ...]
    max_tokens: int
    json: bool = False

    def system_text(self) -> str:
        if not self.json:
            return self.system
        return f"{self.system}\n\n{JSON_INSTRUCTION}" if self.system else JSON_INSTRUCTION


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int
    output_tokens: int
    stop_reason: str


class Provider(Protocol):
    name: str
    model: str

    async def complete(self, prompt: Prompt) -> Completion: ...


class OpenAIProvider:
    name = "openai"

    def __init__(self, model: str, key: str, base_url: str, timeout_s: float) -> None:
        self.model = model
        # The official API wants max_completion_tokens (its reasoning models refuse
        # max_tokens); OpenAI-compatible servers (vLLM, Ollama, llama.cpp) know max_tokens.
        self.tokens_field = "max_tokens" if base_url else "max_completion_tokens"
        self.client = openai.AsyncOpenAI(
            api_key=key, base_url=base_url or None, timeout=timeout_s, max_retries=0
        )

    def request(self, prompt: Prompt) -> dict[str, Any]:
        system = prompt.system_text()
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        messages += [{"role": m.role, "content": self.content(m)} for m in prompt.messages]
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            self.tokens_field: prompt.max_tokens,
        }
        if prompt.json:
            body["response_format"] = {"type": "json_object"}
        return body

    @staticmethod
    def content(message: Message) -> str | list[dict[str, Any]]:
        """Text alone as a string; with images, content parts: the text, then each image
        as a data URL (the vision guide's "Analyze images", base64-encoded images:
        ``{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,..."}}``)."""
        if not message.images:
            return message.content
        parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}]
        parts += [
            {"type": "image_url", "image_url": {"url": f"data:{i.media_type};base64,{i.data}"}}
            for i in message.images
        ]
        return parts

    async def complete(self, prompt: Prompt) -> Completion:
        answer = await self.client.chat.completions.create(**self.request(prompt))
        return self.parse(answer)

    @staticmethod
    def parse(answer: Any) -> Completion:
        if not answer.choices:
            raise ProviderFailure("the provider answered with no choices", False)
        choice = answer.choices[0]
        text = choice.message.content
        if text is None:
            why = getattr(choice.message, "refusal", None) or choice.finish_reason
            raise ProviderFailure(f"the provider answered without text ({why})", False)
        usage = answer.usage
        return Completion(
            text=text,
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            stop_reason=str(choice.finish_reason or ""),
        )


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, model: str, key: str, base_url: str, timeout_s: float) -> None:
        self.model = model
        # An explicit timeout also keeps the client from refusing a large max_tokens
        # without streaming (it only estimates the time when the timeout is its default).
        self.client = anthropic.AsyncAnthropic(
            api_key=key, base_url=base_url or None, timeout=timeout_s, max_retries=0
        )

    def request(self, prompt: Prompt) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": prompt.max_tokens,
            "messages": [{"role": m.role, "content": self.content(m)} for m in prompt.messages],
        }
        system = prompt.system_text()
        if system:  # the API refuses an empty system text block
            body["system"] = system
        return body

    @staticmethod
    def content(message: Message) -> str | list[dict[str, Any]]:
        """Text alone as a string; with images, content blocks: each image first (the
        vision guide: "Claude works best when images come before text"), as a base64
        source, then the text."""
        if not message.images:
            return message.content
        blocks: list[dict[str, Any]] = [
            {"type": "image",
             "source": {"type": "base64", "media_type": i.media_type, "data": i.data}}
            for i in message.images
        ]  # fmt: skip
        return [*blocks, {"type": "text", "text": message.content}]

    async def complete(self, prompt: Prompt) -> Completion:
        answer = await self.client.messages.create(**self.request(prompt))
        return self.parse(answer)

    @staticmethod
    def parse(answer: Any) -> Completion:
        text = "".join(block.text for block in answer.content if block.type == "text")
        usage = answer.usage
        # Prompt caching is never asked for, so these are 0; counted anyway so the cost
        # the brain records can never be below what the provider bills.
        cached = (getattr(usage, "cache_creation_input_tokens", 0) or 0) + (
            getattr(usage, "cache_read_input_tokens", 0) or 0
        )
        return Completion(
            text=text,
            input_tokens=usage.input_tokens + cached,
            output_tokens=usage.output_tokens,
            stop_reason=str(answer.stop_reason or ""),
        )


class NoKey:
    """Stands in for a provider when no key was loaded: every call fails, not retryable
    (a retry cannot make a key appear; the operator must mount one)."""

    def __init__(self, name: str, model: str) -> None:
        self.name, self.model = name, model

    async def complete(self, prompt: Prompt) -> Completion:
        raise ProviderFailure(
            "the gateway has no provider key (mount it at AIRIG_GATEWAY_KEY_FILE)", False
        )


def make_provider(name: str, model: str, key: str, base_url: str, timeout_s: float) -> Provider:
    if not key:
        return NoKey(name, model)
    kind = OpenAIProvider if name == "openai" else AnthropicProvider
    return kind(model, key, base_url, timeout_s)
