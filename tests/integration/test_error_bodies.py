"""Every HTTP server of the kit refuses with the one error body (airig/common/http_errors.py,
airig/brain/PLANS.md "Error bodies"): ``{"detail", "retryable", "retry_after_s"}`` and
nothing else, from the brain (FastAPI handlers, the request guard, the exchange fast
path), the escalation gateway, the file service and the models-ready gate, each a real
server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import uvicorn
from brain_procs import ADMIN, BOOTSTRAP_TOKEN, Cluster
from pydantic import TypeAdapter
from standins.provider.gateway import GatewayProcess, start_gateway
from support import wait_until

from airig.common.http_errors import FIELDS
from airig.common.protocol import ErrorBody, PlanErrorBody, ValidationErrorBody
from airig.services import gate

# What a body may be, as published in the brain's and the gateway's OpenAPI documents.
ONE_SHAPE: TypeAdapter[Any] = TypeAdapter(ErrorBody | ValidationErrorBody | PlanErrorBody)
FILES_TOKEN = "files-test-token"


def one_shape(answer: requests.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, (answer.request.method, answer.url, answer.text)
    return _checked(answer.headers["content-type"], answer.json())


def _checked(content_type: str, body: Any) -> dict[str, Any]:
    assert content_type.startswith("application/json"), content_type
    assert tuple(body) == FIELDS, body  # these keys, in this order, nothing else
    ONE_SHAPE.validate_python(body, strict=True)
    assert isinstance(body["retryable"], bool) and body["detail"], body
    return body


def _declared_too_large(gateway: GatewayProcess) -> dict[str, Any]:
    """A body declared larger than the gateway takes, and never sent: the answer comes
    from the headers alone."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    try:
        conn.putrequest("POST", "/v1/complete")
        for name, value in {**gateway.headers, "Content-Type": "application/json",
                            "Content-Length": str(64 * 1024 * 1024)}.items():  # fmt: skip
            conn.putheader(name, value)
        conn.endheaders()
        answer = conn.getresponse()
        assert answer.status == 413, answer.status
        return _checked(answer.getheader("content-type", ""), json.loads(answer.read()))
    finally:
        conn.close()


@pytest.fixture(scope="module")
def brain(tmp_path_factory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("brain"), brain_env={"BRAIN_LEASE_S": "30"})
    cluster.start_brain()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[GatewayProcess]:
    # No provider behind it: every refusal here comes before a provider call.
    root = tmp_path_factory.mktemp("gateway")
    process = start_gateway(root, "openai", "http://127.0.0.1:9/v1")
    yield process
    process.stop()


def _bound() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.fixture
def files(tmp_path, monkeypatch) -> Iterator[str]:
    """The file service (01-infra) under uvicorn, as ``infra serve`` runs it."""
    from airig.services.infra import create_app

    monkeypatch.setenv("FILES_ROOT", str(tmp_path))
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", FILES_TOKEN)
    sock = _bound()
    server = uvicorn.Server(uvicorn.Config(create_app(), log_level="warning"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])))
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), "the file service")
        assert server.started, "the file service did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def models_gate(tmp_path, monkeypatch) -> Iterator[str]:
    """The models-ready gate's own server class and handler, on a free port."""
    monkeypatch.setenv("AIRIG_VERIFY_CACHES", str(tmp_path / "none.json"))
    server = gate.GateServer(("127.0.0.1", 0), gate._Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_brain_refuses_with_the_one_body(brain):
    url = brain.url
    one_shape(requests.get(f"{url}/v1/plans", timeout=10), 401)  # a route's dependency
    one_shape(requests.post(f"{url}/v1/tokens", json={}, timeout=10), 401)  # the guard
    one_shape(requests.post(f"{url}/v1/exchange", json={}, timeout=10), 401)  # fast path
    one_shape(requests.get(f"{url}/v1/plans/nope", headers=ADMIN, timeout=10), 404)
    one_shape(requests.delete(f"{url}/v1/plans", headers=ADMIN, timeout=10), 405)
    invalid = requests.post(f"{url}/v1/tokens", headers=ADMIN, json={"scope": "x"}, timeout=10)
    assert isinstance(one_shape(invalid, 422)["detail"], list)
    plan = {"tasks": [{"id": "a", "type": "nope"}]}
    refused = requests.post(f"{url}/v1/plans", headers=ADMIN, json=plan, timeout=10)
    assert "unknown type 'nope'" in str(one_shape(refused, 422)["detail"]["errors"])
    # A refusal worth retrying says so, and when: a worker name a live worker holds.
    bootstrap = {"Authorization": f"Bearer {BOOTSTRAP_TOKEN}"}
    register = {"name": "held", "classes": ["cpu"]}
    first = requests.post(f"{url}/v1/workers/register", headers=bootstrap, json=register,
                          timeout=10)  # fmt: skip
    assert first.status_code == 200, first.text
    again = requests.post(f"{url}/v1/workers/register", headers=bootstrap, json=register,
                          timeout=10)  # fmt: skip
    held = one_shape(again, 409)
    assert held["retryable"] is True
    assert held["retry_after_s"] == float(again.headers["Retry-After"]) > 0


def test_the_gateway_refuses_with_the_one_body(gateway):
    url = f"{gateway.url}/v1/complete"
    ask = {"request_id": "r1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    assert one_shape(requests.post(url, json=ask, timeout=10), 401)["retryable"] is False
    assert _declared_too_large(gateway)["retryable"] is False
    bad = requests.post(url, json={**ask, "max_tokens": 0}, headers=gateway.headers, timeout=10)
    assert isinstance(one_shape(bad, 422)["detail"], list)
    one_shape(requests.get(f"{gateway.url}/v1/nothing", headers=gateway.headers, timeout=10), 404)
    # The provider is unreachable: a 502 the brain may retry.
    down = one_shape(requests.post(url, json=ask, headers=gateway.headers, timeout=30), 502)
    assert down["retryable"] is True and "cannot reach the provider" in down["detail"]


def test_the_file_service_refuses_with_the_one_body(files):
    auth = {"Authorization": f"Bearer {FILES_TOKEN}"}
    no_token = requests.get(f"{files}/files/x", timeout=10)
    one_shape(no_token, no_token.status_code)  # 401 or 403, by FastAPI's release
    assert no_token.status_code in (401, 403)
    wrong = {"Authorization": "Bearer nope"}
    one_shape(requests.get(f"{files}/files/x", headers=wrong, timeout=10), 401)
    one_shape(requests.get(f"{files}/files/missing.txt", headers=auth, timeout=10), 404)
    escape = requests.get(f"{files}/files/%252e%252e/etc", headers=auth, timeout=10)
    assert "data volume" in one_shape(escape, 400)["detail"]
    one_shape(requests.post(f"{files}/files/x", headers=auth, timeout=10), 405)


def test_the_models_gate_refuses_with_the_one_body(models_gate):
    missing = one_shape(requests.get(f"{models_gate}/nowhere", timeout=10), 404)
    assert "/health" in missing["detail"] and missing["retryable"] is False
    one_shape(requests.post(f"{models_gate}/health", timeout=10), 501)  # http.server's own
    assert requests.get(f"{models_gate}/health", timeout=10).json() == {"status": "ok"}
