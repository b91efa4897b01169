"""The gateway's error mapping: what each provider failure tells the brain (retry or not),
read from the official clients' own exception types."""

from __future__ import annotations

import email.utils
import time

import anthropic
import httpx2
import openai
import pytest

from airig.gateway.failures import Scrubber, classify, error_fields, retry_after

KEY = "sk-secret-0123456789abcdef"
REQUEST = httpx2.Request("POST", "http://provider.test/v1/x")
SDKS = [openai, anthropic]


def status_error(sdk, status: int, body: object = None, headers: dict[str, str] | None = None):
    response = httpx2.Response(status, request=REQUEST, headers=headers or {})
    return sdk.APIStatusError(f"Error code: {status}", response=response, body=body)


@pytest.mark.parametrize("sdk", SDKS, ids=["openai", "anthropic"])
@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False), (401, False), (403, False), (404, False), (413, False), (422, False),
        (408, True), (409, True), (429, True),
        (500, True), (502, True), (503, True), (529, True),
    ],
)  # fmt: skip
def test_statuses_retry_as_the_clients_own_retry_rule(sdk, status, retryable):
    failure = classify(status_error(sdk, status))
    assert (failure.retryable, failure.status) == (retryable, status)
    assert failure.message.startswith(f"provider answered {status}")


@pytest.mark.parametrize("sdk", SDKS, ids=["openai", "anthropic"])
def test_timeouts_and_connection_errors_are_retryable(sdk):
    timeout = classify(sdk.APITimeoutError(request=REQUEST))
    assert timeout.retryable and "in time" in timeout.message
    try:
        try:
            raise httpx2.ConnectError("[Errno 111] Connection refused")
        except httpx2.ConnectError as cause:
            raise sdk.APIConnectionError(request=REQUEST) from cause
    except sdk.APIConnectionError as exc:
        refused = classify(exc)
    assert refused.retryable and "Connection refused" in refused.message


def test_each_providers_error_body_gives_its_type_and_message():
    # openai's client hands over the inner object; anthropic's the whole body
    assert error_fields({"message": "The model `x` does not exist", "type": "invalid_request_error",
                         "param": None, "code": "model_not_found"}) == (
        "invalid_request_error", "The model `x` does not exist")  # fmt: skip
    body = {"type": "error", "error": {"type": "not_found_error", "message": "model: x"}}
    assert error_fields(body) == ("not_found_error", "model: x")
    assert error_fields(None) == ("", "")
    assert error_fields("<html>bad gateway</html>") == ("", "<html>bad gateway</html>")
    failure = classify(status_error(anthropic, 404, body))
    assert failure.message == "provider answered 404 not_found_error: model: x"


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_is_reported_without_the_providers_words(status):
    """The OpenAI API quotes part of a wrong key in its 401: that text is not relayed."""
    said = f"Incorrect API key provided: {KEY[:3]}***{KEY[-4:]}."
    failure = classify(status_error(openai, status, {"message": said, "type": "x"}))
    assert not failure.retryable
    assert KEY[-4:] not in failure.message and "AIRIG_GATEWAY_KEY_FILE" in failure.message


def test_retry_after_in_seconds_milliseconds_or_a_date():
    assert retry_after(httpx2.Headers({"retry-after": "3"})) == 3.0
    assert retry_after(httpx2.Headers({"retry-after-ms": "1500", "retry-after": "9"})) == 1.5
    later = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 0 < retry_after(httpx2.Headers({"retry-after": later})) <= 60
    assert retry_after(httpx2.Headers({"retry-after": "soon"})) is None
    assert retry_after(httpx2.Headers({})) is None
    failure = classify(status_error(anthropic, 429, None, {"retry-after": "7"}))
    assert failure.retryable and failure.retry_after_s == 7.0


def test_anything_else_is_not_retryable_and_the_key_is_scrubbed():
    failure = classify(ValueError(f"client built with api_key={KEY}"))
    assert not failure.retryable and failure.status is None
    scrub = Scrubber(KEY)
    assert KEY not in scrub(failure.message) and "[redacted]" in scrub(failure.message)
    assert len(scrub("x" * 1000)) == 300  # one line, bounded
    assert Scrubber("")("nothing to hide") == "nothing to hide"


def test_fragments_of_the_key_are_scrubbed_too():
    """A provider error that quotes most of the key (a prefix, the key minus a character,
    the key with one character changed) passes on no run of 8 of its characters."""
    scrub = Scrubber(KEY)
    for quoted in (KEY[:-1], KEY[1:], KEY[:12], KEY[:10] + "X" + KEY[11:], KEY[-9:]):
        text = f"Incorrect API key provided: {quoted}. You can find your key at ..."
        for cleaned in (scrub(text), scrub.full(text)):
            assert all(KEY[i : i + 8] not in cleaned for i in range(len(KEY) - 7)), cleaned
            assert cleaned.startswith("Incorrect API key provided: [redacted]"), cleaned
    assert scrub("a normal error: model not found") == "a normal error: model not found"
    assert Scrubber("short")("the key: short!") == "the key: [redacted]!"
