"""What a failed provider call tells the brain: one line, and whether a retry may help.

The clients' own retries are off (the brain retries with backoff and jitter, and keeps
the task visibly waiting meanwhile), so the rule for "retryable" is the clients' own
retry rule, read from openai-python and anthropic-sdk-python ``_base_client.py``
``_should_retry``: a timeout or a connection error, 408 (request timeout), 409 (lock
timeout), 429 (rate limit) and every 5xx (anthropic's 529 overloaded included). Every
other status (400 bad request, 401 bad key, 403 no permission, 404 unknown model, 413,
422) fails the same way however often it is sent.

Every text that leaves the gateway passes ``Scrubber``: a provider may echo the key (the
OpenAI API quotes part of a wrong key in its 401), and an exception's text may hold
anything the client had.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from typing import Any

import anthropic
import openai

RETRYABLE_STATUS = frozenset({408, 409, 429})
# Statuses whose provider message is not relayed: they are about the key, and the OpenAI
# API's 401 quotes part of it ("Incorrect API key provided: sk-abc***wxyz").
KEY_STATUS = frozenset({401, 403})
MAX_MESSAGE = 300

TIMEOUTS = (openai.APITimeoutError, anthropic.APITimeoutError)
CONNECTION = (openai.APIConnectionError, anthropic.APIConnectionError)
STATUS = (openai.APIStatusError, anthropic.APIStatusError)


class ProviderFailure(Exception):
    """A call that did not produce an answer, as the gateway reports it (HTTP 502)."""

    def __init__(
        self,
        message: str,
        retryable: bool,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.status = status
        self.retry_after_s = retry_after_s


def retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUS or status >= 500


def classify(exc: BaseException) -> ProviderFailure:
    """An exception of either official client (or any other) as a ProviderFailure."""
    if isinstance(exc, ProviderFailure):
        return exc
    if isinstance(exc, TIMEOUTS):  # before CONNECTION: a timeout is one of those
        return ProviderFailure("the provider did not answer in time", True)
    if isinstance(exc, CONNECTION):
        cause = exc.__cause__ or exc.__context__
        why = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        return ProviderFailure(f"cannot reach the provider{why}", True)
    if isinstance(exc, STATUS):
        status = exc.status_code
        kind, said = error_fields(exc.body)
        label = f"provider answered {status}" + (f" {kind}" if kind else "")
        if status in KEY_STATUS:
            message = f"{label}: the provider refused the key (check AIRIG_GATEWAY_KEY_FILE)"
        else:
            message = f"{label}: {said}" if said else label
        return ProviderFailure(
            message, retryable_status(status), status, retry_after(exc.response.headers)
        )
    return ProviderFailure(f"gateway error: {type(exc).__name__}: {exc}", False)


def error_fields(body: object) -> tuple[str, str]:
    """(type, message) of an error body in either provider's shape: OpenAI's
    ``{"error": {"message", "type", "param", "code"}}`` (the openai client passes the
    inner object) and Anthropic's ``{"type": "error", "error": {"type", "message"}}``."""
    if not isinstance(body, dict):
        return "", str(body) if body else ""
    inner: Any = body.get("error", body)
    if not isinstance(inner, dict):
        return "", str(inner)
    kind, message = inner.get("type"), inner.get("message")
    return (kind if isinstance(kind, str) else ""), (message if isinstance(message, str) else "")


def retry_after(headers: Any) -> float | None:
    """Seconds the provider asks to wait: ``retry-after-ms``, ``retry-after`` in seconds
    or as an HTTP date (the headers the clients themselves honour)."""
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return max(0.0, float(millis) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, AttributeError):
        return None


# A run of this many characters of the key, anywhere in a text, is redacted: a provider
# error that quotes a prefix of the key, or the key with one character changed, must not
# pass on the rest. Keys are random, so ordinary text does not share 8 characters in a row
# with one (a key's public prefix like "sk-ant-a" may be redacted too: harmless).
FRAGMENT = 8


@dataclass(frozen=True)
class Scrubber:
    """Removes the provider's key, and any long fragment of it, from any text before it
    is logged or answered."""

    secret: str

    def __call__(self, text: str) -> str:
        text = self.full(text)
        return text[:MAX_MESSAGE] if len(text) > MAX_MESSAGE else text

    def full(self, text: str) -> str:
        """The same, without the length bound (whole log lines)."""
        if not self.secret:
            return text
        width = min(FRAGMENT, len(self.secret))
        pieces = _fragments(self.secret, width)
        hidden = [False] * len(text)
        for start in range(len(text) - width + 1):
            if text[start : start + width] in pieces:
                hidden[start : start + width] = [True] * width
        if not any(hidden):
            return text
        out: list[str] = []
        for i, ch in enumerate(text):
            if not hidden[i]:
                out.append(ch)
            elif i == 0 or not hidden[i - 1]:
                out.append("[redacted]")
        return "".join(out)


def _fragments(secret: str, width: int) -> frozenset[str]:
    return frozenset(secret[i : i + width] for i in range(len(secret) - width + 1))
