"""The escalation gateway as a real process (``python -m airig.gateway``) against the
provider stand-in (tests/standins/provider/), for both providers.

The stand-in's answers and refusals are checked by the official clients themselves:
``openai.OpenAI`` and ``anthropic.Anthropic`` with ``_strict_response_validation=True``
parse every body into their own types (ChatCompletion, Message, the error classes), so a
shape the clients would not accept fails here. Then the gateway: answers with usage, one
provider call per request_id, which failures the brain may retry, the bearer token, and
the provider's key in no answer, no log line and not in /health.
"""

from __future__ import annotations

import concurrent.futures
import json
import socket

import anthropic
import openai
import pytest
import requests
from anthropic.types import ErrorResponse, Message, TextBlock
from openai.types import ErrorObject
from openai.types.chat import ChatCompletion
from standins.conftest_helpers import StandIn, free_port, start_standin
from standins.provider.control import DEFAULT_KEY, ProviderControl
from standins.provider.gateway import GatewayProcess, gateway_base_url, start_gateway
from support import wait_until

PROVIDERS = ["openai", "anthropic"]
WRONG_KEY = "sk-wrong-key-fedcba9876543210fedcba98"
TIMEOUT_S = 2  # the good gateways' provider timeout (a slower answer is a retryable 502)


@pytest.fixture(scope="module")
def provider(tmp_path_factory) -> StandIn:
    standin = start_standin("provider", tmp_path_factory.mktemp("provider") / "root")
    yield standin
    standin.stop()


@pytest.fixture(scope="module")
def gateways(provider, tmp_path_factory) -> dict[str, GatewayProcess]:
    """openai and anthropic (working), bad-key (openai, the key in the environment rather
    than a file), bad-model (anthropic) and dead (openai, nothing listens): started side
    by side, each imports both clients (seconds)."""
    closed = free_port()
    specs = {
        name: dict(provider=name, base_url=gateway_base_url(name, provider.url),
                   env={"AIRIG_GATEWAY_TIMEOUT_S": str(TIMEOUT_S)})
        for name in PROVIDERS
    }  # fmt: skip
    specs["bad-key"] = dict(provider="openai", key=WRONG_KEY, key_in="env",
                            base_url=gateway_base_url("openai", provider.url))  # fmt: skip
    specs["bad-model"] = dict(provider="anthropic", model="claude-nonexistent-1",
                              base_url=gateway_base_url("anthropic", provider.url))  # fmt: skip
    specs["dead"] = dict(provider="openai", base_url=f"http://127.0.0.1:{closed}/v1")
    root = tmp_path_factory.mktemp("gateways")
    with concurrent.futures.ThreadPoolExecutor(len(specs)) as pool:
        started = {
            name: pool.submit(start_gateway, root / name, **spec) for name, spec in specs.items()
        }
        running = {name: future.result() for name, future in started.items()}
    yield running
    for gateway in running.values():
        gateway.stop()


@pytest.fixture
def control(provider) -> ProviderControl:
    control = ProviderControl(provider.url)
    control.reset()
    return control


def ask(gateway: GatewayProcess, request_id: str, text: str = "what went wrong?", **extra):
    body = {
        "request_id": request_id,
        "system": "You advise a scheduler about a failed task.",
        "messages": [
            {"role": "user", "content": text},
            {"role": "assistant", "content": "Which attempts failed?"},
            {"role": "user", "content": "both local attempts: exit 1"},
        ],
        "max_tokens": 200,
        **extra,
    }
    return requests.post(gateway.url + "/v1/complete", headers=gateway.headers, json=body,
                         timeout=30)  # fmt: skip


def words(*texts: str) -> int:
    return sum(len(t.split()) for t in texts)


# ------------------------------------------------------------------ the stand-in's shapes
def openai_client(provider: StandIn, key: str = DEFAULT_KEY) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=provider.url + "/v1", max_retries=0,
                         _strict_response_validation=True)  # fmt: skip


def anthropic_client(provider: StandIn, key: str = DEFAULT_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=provider.url, max_retries=0,
                               _strict_response_validation=True)  # fmt: skip


def test_the_openai_standin_speaks_what_the_official_client_parses(provider, control):
    client = openai_client(provider)
    control.answers("one two three four five")
    answer = client.chat.completions.create(
        model="gpt-4.1-mini", max_tokens=3,
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    )  # fmt: skip
    assert isinstance(answer, ChatCompletion) and answer.object == "chat.completion"
    assert answer.choices[0].message.content == "one two three"
    assert answer.choices[0].finish_reason == "length"
    usage = answer.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (3, 3, 6)

    with pytest.raises(openai.AuthenticationError) as wrong:
        openai_client(provider, WRONG_KEY).chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "x"}]
        )
    refused = ErrorObject.model_validate(wrong.value.body)
    assert (refused.type, refused.code) == ("invalid_request_error", "invalid_api_key")
    assert WRONG_KEY not in refused.message and WRONG_KEY[-4:] in refused.message  # as upstream
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-0", messages=[{"role": "user", "content": "x"}])
    assert ErrorObject.model_validate(unknown.value.body).code == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="must contain the word 'json'"):
        client.chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_object"},
        )  # fmt: skip
    control.mode("rate_limited", times=1, retry_after=7)
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "x"}])
    assert limited.value.response.headers["retry-after"] == "7"
    control.mode("down", times=1)
    with pytest.raises(openai.InternalServerError) as down:
        client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "x"}])
    assert down.value.status_code == 503
    assert [c["auth"] for c in control.calls()] == ["ok", "wrong", "ok", "ok", "ok", "ok"]


def test_the_anthropic_standin_speaks_what_the_official_client_parses(provider, control):
    client = anthropic_client(provider)
    control.answers("the answer is a missing input file")
    answer = client.messages.create(
        model="claude-sonnet-5-5", max_tokens=100, system="be brief",
        messages=[{"role": "user", "content": "why did it fail"}],
    )  # fmt: skip
    assert isinstance(answer, Message) and isinstance(answer.content[0], TextBlock)
    assert answer.content[0].text == "the answer is a missing input file"
    assert answer.stop_reason == "end_turn"
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (6, 7)
    sent = control.calls()[-1]
    assert sent["body"]["system"] == "be brief" and sent["headers"]["anthropic-version"]

    with pytest.raises(anthropic.AuthenticationError) as wrong:
        anthropic_client(provider, WRONG_KEY).messages.create(
            model="claude-sonnet-5-5", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert ErrorResponse.model_validate(wrong.value.body).error.type == "authentication_error"
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.create(
            model="claude-0", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert unknown.value.api_message == "model: claude-0"
    assert unknown.value.request_id and unknown.value.request_id.startswith("req_")

    def raw(body: dict, **headers: str) -> requests.Response:
        sent = {"x-api-key": DEFAULT_KEY, "anthropic-version": "2023-06-01", **headers}
        return requests.post(provider.url + "/v1/messages", json=body, headers=sent, timeout=10)

    for body, headers, message in [
        ({"model": "claude-sonnet-5-5", "messages": [{"role": "user", "content": "x"}]}, {},
         "max_tokens: Field required"),
        ({"model": "claude-sonnet-5-5", "max_tokens": 5,
          "messages": [{"role": "system", "content": "x"}]}, {},
         "messages.0.role: Input should be 'user' or 'assistant'"),
        ({"model": "claude-sonnet-5-5", "max_tokens": 5}, {"anthropic-version": ""},
         "anthropic-version: header is required"),
    ]:  # fmt: skip
        refused = raw(body, **headers)
        assert refused.status_code == 400
        parsed = ErrorResponse.model_validate(refused.json())
        assert (parsed.error.type, parsed.error.message) == ("invalid_request_error", message)
    assert raw({}, **{"x-api-key": ""}).json()["error"]["message"] == "x-api-key header is required"

    control.mode("down", times=1)
    with pytest.raises(anthropic.APIStatusError) as down:
        client.messages.create(
            model="claude-sonnet-5-5", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert down.value.status_code == 529 and down.value.type == "overloaded_error"


# ------------------------------------------------------------------ the gateway
@pytest.mark.parametrize("name", PROVIDERS)
def test_an_answer_with_usage_through_each_providers_official_client(name, gateways, control):
    control.answers("look at the input path first")
    answer = ask(gateways[name], f"{name}-answer")
    assert answer.status_code == 200, answer.text
    got = answer.json()
    (call,) = control.calls()
    sent = call["body"]
    assert call["api"] == name and call["auth"] == "ok"
    system = "You advise a scheduler about a failed task."
    if name == "openai":
        assert sent["messages"][0] == {"role": "system", "content": system}
        assert sent["max_tokens"] == 200  # a compatible endpoint (base_url set)
        assert got["stop_reason"] == "stop"
    else:
        assert sent["system"] == system and sent["max_tokens"] == 200
        assert all(m["role"] != "system" for m in sent["messages"])
        assert got["stop_reason"] == "end_turn"
    turns = [m["content"] for m in sent["messages"] if m["role"] != "system"]
    assert turns == ["what went wrong?", "Which attempts failed?", "both local attempts: exit 1"]
    assert got == {
        "request_id": f"{name}-answer",
        "provider": name,
        "model": sent["model"],
        "text": "look at the input path first",
        "input_tokens": words(system, *turns),
        "output_tokens": 6,
        "stop_reason": got["stop_reason"],
    }


@pytest.mark.parametrize("name", PROVIDERS)
def test_a_repeated_request_id_is_answered_without_a_second_call(name, gateways, control):
    gateway = gateways[name]
    control.answers("first and only answer", {"text": "slow answer", "delay_s": 1.0})
    first, again = ask(gateway, f"{name}-once"), ask(gateway, f"{name}-once")
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() and len(control.calls()) == 1
    other = ask(gateway, f"{name}-once", text="a different question")
    assert other.status_code == 409 and other.json()["retryable"] is False
    # a re-send while the first call is still running waits for it
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda _: ask(gateway, f"{name}-in-flight"), range(2)))
    assert [b.json()["text"] for b in both] == ["slow answer", "slow answer"]
    assert len(control.calls()) == 2


@pytest.mark.parametrize("name", PROVIDERS)
def test_what_the_brain_may_retry(name, gateways, control):
    gateway = gateways[name]
    control.mode("down", times=1)
    down = ask(gateway, f"{name}-down")
    assert down.status_code == 502 and down.json()["retryable"] is True
    assert down.json()["detail"].startswith(f"provider answered {503 if name == 'openai' else 529}")
    assert ask(gateway, f"{name}-down").status_code == 200  # the same id, once it is back
    control.mode("rate_limited", retry_after=7)
    limited = ask(gateway, f"{name}-limited").json()
    assert (limited["retryable"], limited["retry_after_s"]) == (True, 7.0)
    control.mode("up")
    control.answers({"text": "too late", "delay_s": TIMEOUT_S + 1.5})
    late = ask(gateway, f"{name}-late").json()
    assert late == {"detail": "the provider did not answer in time", "retryable": True,
                    "retry_after_s": None}  # fmt: skip
    # one call each: the clients' own retries are off (the late one is recorded when the
    # stand-in finally answers)
    calls = wait_until(lambda: len(control.calls()) >= 4 and control.calls(), "the late call")
    assert len(calls) == 4


def test_what_the_brain_must_not_retry(gateways, control):
    unknown = ask(gateways["bad-model"], "model")
    assert unknown.status_code == 502 and unknown.json() == {
        "detail": "provider answered 404 not_found_error: model: claude-nonexistent-1",
        "retryable": False,
        "retry_after_s": None,
    }
    refused = ask(gateways["bad-key"], "key")
    assert refused.status_code == 502 and refused.json()["retryable"] is False
    assert "refused the key" in refused.json()["detail"]
    assert "Incorrect API key" not in refused.text  # upstream quotes part of the key there
    assert [c["auth"] for c in control.calls()] == ["ok", "wrong"]
    dead = ask(gateways["dead"], "dead")
    assert dead.status_code == 502 and dead.json()["retryable"] is True
    assert dead.json()["detail"].startswith("cannot reach the provider")


@pytest.mark.parametrize("name", PROVIDERS)
def test_the_gateway_answers_only_the_brains_token(name, gateways, control):
    gateway = gateways[name]
    url = gateway.url + "/v1/complete"
    body = {"request_id": "x", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
    for headers in (
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": f"Bearer {DEFAULT_KEY}"},
    ):
        refused = requests.post(url, json=body, headers=headers, timeout=10)
        assert refused.status_code == 401 and refused.json()["retryable"] is False
    bad = requests.post(url, json={**body, "max_tokens": 0}, headers=gateway.headers, timeout=10)
    assert bad.status_code == 422
    assert control.calls() == []
    health = requests.get(gateway.url + "/health", timeout=10).json()
    assert health == {"ok": True, "provider": name, "model": health["model"], "key_loaded": True}


def test_the_key_is_in_no_answer_no_log_line_and_not_in_health(gateways, control):
    """Every path at once, then everything the gateways said and logged since they started."""
    said: list[str] = []
    control.mode("down", times=2)
    for gateway in gateways.values():
        said += [ask(gateway, f"leak-{n}").text for n in range(2)]
        said.append(requests.get(gateway.url + "/health", timeout=10).text)
        said.append(requests.post(gateway.url + "/v1/complete", json={}, timeout=10).text)
        bad = requests.post(gateway.url + "/v1/complete", json={"request_id": "r", "max_tokens": 0},
                            headers=gateway.headers, timeout=10)  # fmt: skip
        assert bad.status_code == 422
        said.append(bad.text)
    logs = {name: gateway.log() for name, gateway in gateways.items()}
    for name, log in logs.items():
        for line in log.splitlines():
            assert line.startswith("{") and json.loads(line), (name, line)  # JSON lines only
    assert len(said) == 5 * len(gateways)
    for key in (DEFAULT_KEY, WRONG_KEY):
        assert not [s for s in said if key in s], key
        assert not [name for name, log in logs.items() if key in log], key
    assert "provider call" in logs["openai"] and "provider call" in logs["anthropic"]
    assert all('"key_loaded": true' in log for log in logs.values())


def test_a_gateway_without_a_key_says_so_and_fails_health(tmp_path, provider):
    base_url = gateway_base_url("anthropic", provider.url)
    gateway = start_gateway(tmp_path / "gw", "anthropic", base_url, key="", key_in="env")
    try:
        assert requests.get(gateway.url + "/health", timeout=10).json()["key_loaded"] is False
        answer = ask(gateway, "no-key")
        assert answer.status_code == 502 and answer.json()["retryable"] is False
        assert "no provider key" in answer.json()["detail"]
    finally:
        gateway.stop()
    assert "no provider key: every call will fail" in gateway.log()


def test_nothing_listens_on_a_closed_port():
    """The dead gateway's premise: a free port refuses connections."""
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", free_port())) != 0
