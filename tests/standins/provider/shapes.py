"""The bodies the two upstream APIs answer with, success and refusal.

Sources (fields and types; the stand-in's answers are parsed by these very types in
tests/integration/test_gateway.py, with the clients' strict response validation):
- OpenAI chat completion: openai-python ``src/openai/types/chat/chat_completion.py``
  (``ChatCompletion``: id, object "chat.completion", created, model, choices[index,
  message{role, content, refusal, annotations}, logprobs, finish_reason], usage,
  service_tier, system_fingerprint) and ``src/openai/types/completion_usage.py``
  (prompt_tokens, completion_tokens, total_tokens, *_details); openai/openai-python
  @e8205fd, and the released client 3.54.0.
- OpenAI errors: ``{"error": {"message", "type", "param", "code"}}`` (the client reads
  ``body["error"]``: ``src/openai/_client.py`` ``_make_status_error``); the statuses and
  messages of https://platform.openai.com/docs/guides/error-codes (401 "Incorrect API key
  provided", 404 model_not_found, 429 "Rate limit reached", 503 "The engine is currently
  overloaded").
- Anthropic message: anthropic-sdk-python ``src/anthropic/types/message.py`` (id, type
  "message", role, model, content[{type "text", text, citations}], stop_reason,
  stop_sequence, usage) and ``usage.py`` (input_tokens, output_tokens,
  cache_creation_input_tokens, cache_read_input_tokens, service_tier);
  anthropics/anthropic-sdk-python @b686303, and the released client 2.12.0.
- Anthropic errors: https://docs.anthropic.com/claude/reference/errors-and-rate-limits
  (``{"type": "error", "error": {"type", "message"}}``, 400 invalid_request_error, 401
  authentication_error, 404 not_found_error, 429 rate_limit_error, 529 overloaded_error)
  plus the top-level ``request_id`` and ``request-id`` header current answers carry;
  "max_tokens: Field required" and "model: <name>" are the API's own messages.
"""

from __future__ import annotations

import secrets
import time
from typing import Any


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


def words(text: str) -> int:
    """The stand-in's token count: words (deterministic, and 0 only for no text)."""
    return len(text.split())


# ---------------------------------------------------------------- OpenAI
def openai_completion(model: str, text: str, prompt_tokens: int, finish: str) -> dict[str, Any]:
    completion_tokens = words(text)
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": None,
    }


def openai_error(
    message: str, kind: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


OPENAI_NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization "
    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY). You can obtain an API "
    "key from https://platform.openai.com/account/api-keys."
)


def openai_wrong_key(given: str) -> str:
    # upstream quotes the wrong key masked: its start and its last four characters
    shown = f"{given[:3]}{'*' * max(0, len(given) - 7)}{given[-4:]}" if len(given) > 7 else "***"
    return (
        f"Incorrect API key provided: {shown}. You can find your API key at "
        "https://platform.openai.com/account/api-keys."
    )


# ---------------------------------------------------------------- Anthropic
def anthropic_message(model: str, text: str, input_tokens: int, stop_reason: str) -> dict[str, Any]:
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text, "citations": None}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": words(text),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "service_tier": "standard",
        },
    }


def anthropic_error(kind: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}
