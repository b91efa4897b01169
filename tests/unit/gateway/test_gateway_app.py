"""The gateway's HTTP API in process, with a fake provider: the bearer token before the
body, one provider call per request_id, the concurrency bound, what a failure answers,
and the requests each official client is given."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from fastapi.testclient import TestClient

from airig.gateway import __main__ as gateway_main
from airig.gateway.app import TokenGuard, create_app
from airig.gateway.failures import ProviderFailure, Scrubber
from airig.gateway.idempotency import Answers
from airig.gateway.providers import (
    JSON_INSTRUCTION,
    AnthropicProvider,
    Completion,
    Message,
    OpenAIProvider,
    Prompt,
    make_provider,
)
from airig.gateway.settings import KEY_ENV, GatewaySettings, load_key

KEY = "sk-secret-0123456789abcdef"
TOKEN = "brain-to-gateway-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class FakeProvider:
    name, model = "openai", "fake-model"

    def __init__(self, fail: BaseException | None = None, hold: float = 0.0) -> None:
        self.prompts: list[Prompt] = []
        self.fail, self.hold = fail, hold
        self.active = self.most = 0

    async def complete(self, prompt: Prompt) -> Completion:
        self.prompts.append(prompt)
        self.active += 1
        self.most = max(self.most, self.active)
        try:
            await asyncio.sleep(self.hold)
            if self.fail is not None:
                raise self.fail
            return Completion(f"answer {len(self.prompts)}", 11, 3, "stop")
        finally:
            self.active -= 1


def body(request_id: str = "call-1", text: str = "hello", **extra: object) -> dict:
    return {
        "request_id": request_id,
        "system": "you advise the brain",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 100,
        **extra,
    }


def client(provider: FakeProvider, **options: object) -> TestClient:
    return TestClient(create_app(provider, TOKEN, Scrubber(KEY), key_loaded=True, **options))


def test_an_answer_with_usage_and_a_repeated_request_id_costs_one_call():
    provider = FakeProvider()
    api = client(provider)
    first = api.post("/v1/complete", headers=AUTH, json=body())
    assert first.status_code == 200
    assert first.json() == {
        "request_id": "call-1", "provider": "openai", "model": "fake-model",
        "text": "answer 1", "input_tokens": 11, "output_tokens": 3, "stop_reason": "stop",
    }  # fmt: skip
    again = api.post("/v1/complete", headers=AUTH, json=body())
    assert again.json() == first.json() and len(provider.prompts) == 1
    other = api.post("/v1/complete", headers=AUTH, json=body("call-2"))
    assert other.json()["text"] == "answer 2"
    reused = api.post("/v1/complete", headers=AUTH, json=body("call-1", text="another question"))
    assert reused.status_code == 409 and reused.json()["retryable"] is False
    assert len(provider.prompts) == 2
    assert provider.prompts[0] == Prompt(
        "you advise the brain", (Message("user", "hello"),), 100, False
    )


def test_the_bearer_token_and_the_body():
    api = client(FakeProvider())
    assert api.post("/v1/complete", json=body()).status_code == 401
    wrong = api.post("/v1/complete", headers={"Authorization": f"Bearer {KEY}"}, json=body())
    assert wrong.status_code == 401 and wrong.json() == {
        "detail": "missing or wrong bearer token",
        "retryable": False,
        "retry_after_s": None,
    }
    assert api.get("/health").json() == {
        "ok": True, "provider": "openai", "model": "fake-model", "key_loaded": True,
    }  # fmt: skip
    for bad in (
        {**body(), "max_tokens": 0},
        {**body(), "max_tokens": 32001},
        {**body(), "request_id": "x" * 65},
        {**body(), "request_id": ""},
        {**body(), "messages": []},
        {**body(), "messages": [{"role": "system", "content": "x"}]},
        {**body(), "temperature": 2},
    ):
        assert api.post("/v1/complete", headers=AUTH, json=bad).status_code == 422, bad
    small = client(FakeProvider(), max_body=2000)
    big = body(text="x" * 5000)
    assert small.post("/v1/complete", headers=AUTH, json=big).status_code == 413

    def chunks():
        yield json.dumps(big).encode()

    streamed = small.post("/v1/complete", headers=AUTH, content=chunks())
    assert streamed.status_code == 413


def test_the_token_is_checked_before_a_byte_of_the_body_is_read():
    async def never_read():
        raise AssertionError("the body was read before the token was checked")

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def app(scope, receive, send):  # pragma: no cover - must not be reached
        raise AssertionError("the request passed the guard")

    guard = TokenGuard(app, TOKEN, 1000)
    scope = {"type": "http", "path": "/v1/complete", "headers": [(b"authorization", b"Bearer no")]}
    asyncio.run(guard(scope, never_read, send))
    assert sent[0]["status"] == 401


@pytest.mark.parametrize(
    ("failure", "retryable"),
    [
        (ProviderFailure("provider answered 503 overloaded", True, 503, 2.0), True),
        (ProviderFailure("provider answered 404 not_found_error: model: x", False, 404), False),
        (RuntimeError(f"surprise holding {KEY}"), False),
    ],
)
def test_a_failed_call_is_a_502_that_says_if_a_retry_helps_and_never_holds_the_key(
    failure, retryable, caplog
):
    provider = FakeProvider(fail=failure)
    api = client(provider)
    with caplog.at_level(logging.INFO, logger="airig.gateway"):
        first = api.post("/v1/complete", headers=AUTH, json=body())
        second = api.post("/v1/complete", headers=AUTH, json=body())
    assert first.status_code == second.status_code == 502
    assert first.json()["retryable"] is retryable
    assert KEY not in first.text and KEY not in caplog.text
    assert len(provider.prompts) == 2  # failures are not remembered: a retry calls again
    if isinstance(failure, ProviderFailure) and failure.retry_after_s:
        assert first.json()["retry_after_s"] == 2.0


def asgi(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")


def test_calls_run_at_most_concurrency_at_once_and_one_per_request_id_in_flight():
    provider = FakeProvider(hold=0.05)
    app = create_app(provider, TOKEN, Scrubber(KEY), key_loaded=True, concurrency=2)

    async def run() -> list[httpx.Response]:
        async with asgi(app) as api:
            calls = [api.post("/v1/complete", headers=AUTH, json=body(f"c{i}")) for i in range(5)]
            calls += [api.post("/v1/complete", headers=AUTH, json=body("c0")) for _ in range(2)]
            return await asyncio.gather(*calls)

    answers = asyncio.run(run())
    assert [a.status_code for a in answers] == [200] * 7
    assert provider.most == 2 and len(provider.prompts) == 5
    assert answers[5].json() == answers[6].json() == answers[0].json()


def test_an_answer_that_arrives_after_its_caller_left_is_kept_for_the_resend():
    """The brain restarting mid-call: its request is gone, the provider still answers."""
    calls = 0

    async def slow() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return "late answer"

    async def run() -> tuple[str, bool]:
        answers: Answers[str] = Answers(size=2)
        first = asyncio.ensure_future(answers.once("r1", "fp", slow))
        await asyncio.sleep(0)
        first.cancel()  # the caller went away
        while "r1" in answers.running:
            await asyncio.sleep(0.01)
        return await answers.once("r1", "fp", slow)

    assert asyncio.run(run()) == ("late answer", True) and calls == 1


def test_the_cache_is_bounded_least_recently_used_first():
    async def run() -> list[str]:
        answers: Answers[str] = Answers(size=2)
        for key in ("a", "b", "a", "c"):  # "a" used again, so "b" is the one to go

            async def value(key: str = key) -> str:
                return key

            await answers.once(key, "fp", value)
        return list(answers.done)

    assert asyncio.run(run()) == ["a", "c"]


def prompt(json_: bool = False, system: str = "sys") -> Prompt:
    return Prompt(system, (Message("user", "q"), Message("assistant", "a"), Message("user", "q2")),
                  50, json_)  # fmt: skip


def test_openai_gets_the_system_as_its_first_message_and_the_right_tokens_field():
    official = OpenAIProvider("gpt-x", KEY, "", 5).request(prompt(json_=True))
    assert official["max_completion_tokens"] == 50 and "max_tokens" not in official
    assert official["response_format"] == {"type": "json_object"}
    assert official["messages"][0] == {"role": "system", "content": f"sys\n\n{JSON_INSTRUCTION}"}
    assert [m["role"] for m in official["messages"]] == ["system", "user", "assistant", "user"]
    compatible = OpenAIProvider("m", KEY, "http://vllm:8000/v1", 5).request(prompt(system=""))
    assert compatible["max_tokens"] == 50 and "response_format" not in compatible
    assert [m["role"] for m in compatible["messages"]] == ["user", "assistant", "user"]


def test_anthropic_gets_the_system_apart_and_max_tokens():
    sent = AnthropicProvider("claude-x", KEY, "", 5).request(prompt(json_=True))
    assert sent["system"] == f"sys\n\n{JSON_INSTRUCTION}" and sent["max_tokens"] == 50
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert "system" not in AnthropicProvider("c", KEY, "", 5).request(prompt(system=""))


def test_without_a_key_every_call_fails_and_cannot_be_retried_into_success():
    provider = make_provider("anthropic", "claude-x", "", "", 5)
    app = create_app(provider, TOKEN, Scrubber(""), key_loaded=False)
    api = TestClient(app)
    answer = api.post("/v1/complete", headers=AUTH, json=body())
    assert answer.status_code == 502 and answer.json()["retryable"] is False
    assert api.get("/health").json()["key_loaded"] is False


def test_the_key_comes_from_its_file_else_from_the_environment_which_forgets_it(
    tmp_path, monkeypatch
):
    key_file = tmp_path / "provider_key"
    key_file.write_text(f"  {KEY}\n")
    monkeypatch.setenv("AIRIG_GATEWAY_KEY_FILE", str(key_file))
    monkeypatch.setenv(KEY_ENV, "sk-from-env")
    assert load_key(GatewaySettings()) == KEY
    key_file.unlink()
    monkeypatch.setenv(KEY_ENV, "sk-from-env")
    settings = GatewaySettings()
    assert load_key(settings) == "sk-from-env"
    assert KEY_ENV not in __import__("os").environ
    assert "sk-from-env" not in repr(settings)


@pytest.fixture
def root_logging():
    """main() routes the root logger to stdout as JSON: put it back for the next tests."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


def test_the_gateway_will_not_serve_without_a_token_or_a_model(monkeypatch, capsys, root_logging):
    monkeypatch.setenv("AIRIG_GATEWAY_KEY_FILE", "/nonexistent/key")
    monkeypatch.setenv("AIRIG_GATEWAY_MODEL", "m")
    monkeypatch.setenv("AIRIG_GATEWAY_TOKEN", "change-me")
    assert gateway_main.main([]) == 2
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["level"] == "error" and "AIRIG_GATEWAY_TOKEN" in line["message"]
    monkeypatch.setenv("AIRIG_GATEWAY_TOKEN", TOKEN)
    monkeypatch.setenv("AIRIG_GATEWAY_MODEL", " ")
    assert gateway_main.main([]) == 2
    monkeypatch.setenv("AIRIG_GATEWAY_PROVIDER", "gemini")
    assert gateway_main.main([]) == 2
