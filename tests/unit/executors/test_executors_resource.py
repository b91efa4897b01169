"""The resource executor's HTTP contract with speaches and Ollama's unload polling."""

from __future__ import annotations

import ollama
import pytest
import requests

from airig.executors import ollama_common
from airig.executors.base import run_task
from airig.executors.context import TaskError


@pytest.fixture
def ctx(make_ctx):
    return make_ctx(
        ollama_url="http://ollama:11434",
        comfyui_url="http://comfyui:8188",
        whisper_url="http://whisper:8000/",
    )


@pytest.fixture
def http(monkeypatch):
    """Replace every requests call with one canned status; record what was asked."""
    calls = []

    def answer(status: int):
        def request(self, method, url, **kwargs):
            calls.append((method, url, kwargs.get("json")))
            response = requests.Response()
            # speaches' "is it installed" check answers 200 (the model is installed)
            installed = method == "GET" and "/v1/models/" in url
            response.status_code, response._content = (200 if installed else status), b"msg"
            return response

        monkeypatch.setattr(requests.Session, "request", request)
        return calls

    return answer


@pytest.mark.parametrize(
    ("action", "status", "method", "note"),
    [
        ("load", 201, "POST", None),
        ("load", 409, "POST", "already loaded"),
        ("unload", 204, "DELETE", None),
        ("unload", 404, "DELETE", "was not loaded"),
    ],
)
def test_whisper_uses_speaches_ps_routes(ctx, http, action, status, method, note):
    calls = http(status)
    payload = {"action": action, "service": "whisper", "model": "Systran/faster-whisper-small"}
    result = run_task("resource", payload, ctx)
    checked = [("GET", "http://whisper:8000/v1/models/Systran/faster-whisper-small", None)]
    assert calls == (checked if action == "load" else []) + [
        (method, "http://whisper:8000/api/ps/Systran/faster-whisper-small", None)
    ]
    assert result.output.get("note") == note


def test_whisper_busy_model_is_retried_later(ctx, http):
    http(409)
    payload = {"action": "unload", "service": "whisper", "model": "w"}
    with pytest.raises(TaskError) as caught:
        run_task("resource", payload, ctx)
    assert (caught.value.error_type, caught.value.retryable) == ("service_busy", True)


def test_comfyui_unload_posts_free(ctx, http):
    calls = http(200)
    run_task("resource", {"action": "unload", "service": "comfyui"}, ctx)
    assert calls == [
        ("POST", "http://comfyui:8188/free", {"unload_models": True, "free_memory": True})
    ]


class StubbornOllama:
    """Accepts the unload request but keeps listing the model as loaded."""

    def __init__(self):
        self.generate_calls = []

    def generate(self, **kwargs):
        self.generate_calls.append(kwargs)
        return ollama.GenerateResponse(model=kwargs["model"], done=True, done_reason="unload")

    def ps(self):
        return ollama.ProcessResponse(models=[{"model": "m:latest", "name": "m:latest"}])

    def close(self):
        pass


def test_ollama_unload_gives_up_after_its_bounded_wait(ctx, monkeypatch):
    client = StubbornOllama()
    monkeypatch.setattr(ollama_common, "make_client", lambda ctx: client)
    payload = {"action": "unload", "service": "ollama", "model": "m", "wait_s": 0.3}
    with pytest.raises(TaskError) as caught:
        run_task("resource", payload, ctx)
    assert caught.value.error_type == "unload_timeout"
    assert client.generate_calls == [{"model": "m", "keep_alive": 0}]


def test_ollama_load_keeps_the_model_and_sends_pinned_options(ctx, monkeypatch):
    client = StubbornOllama()
    monkeypatch.setattr(ollama_common, "make_client", lambda ctx: client)
    ctx.model_options = {"m": {"num_ctx": 8192}}
    result = run_task("resource", {"action": "load", "service": "ollama", "model": "m"}, ctx)
    assert client.generate_calls == [{"model": "m", "keep_alive": -1, "options": {"num_ctx": 8192}}]
    assert result.output["loaded"]


def test_a_whisper_model_speaches_cannot_load_fails_for_good(ctx, http):
    http(500)  # speaches: the load raised; the model stays registered (a retry gets 409)
    payload = {"action": "load", "service": "whisper", "model": "w"}
    with pytest.raises(TaskError) as caught:
        run_task("resource", payload, ctx)
    assert (caught.value.error_type, caught.value.retryable) == ("model_load_failed", False)


def test_unloading_a_model_whose_load_failed_is_nothing_to_do(ctx, monkeypatch):
    def request(self, method, url, **kwargs):
        response = requests.Response()
        response.status_code = 409
        response._content = b'{"detail": "Model w is not loaded. self.ref_count=0"}'
        return response

    monkeypatch.setattr(requests.Session, "request", request)
    result = run_task("resource", {"action": "unload", "service": "whisper", "model": "w"}, ctx)
    assert result.output["note"] == "was not loaded"
