"""llm, embed and Ollama resource executors against the Ollama stand-in (real process)."""

from __future__ import annotations

import threading
from pathlib import Path

import ollama
import pytest
import requests
from standins.conftest_helpers import StandIn, free_port, start_standin

from airig.executors import ollama_common
from airig.executors.base import run_task
from airig.executors.context import TaskError

CHAT_MODEL, EMBED_MODEL = "qwen2.5:0.5b", "nomic-embed-text"


def start_ollama(root: Path, **env: str) -> StandIn:
    """The stand-in with small synthetic models, and the test models pulled."""
    standin = start_standin("ollama", root, {"STANDIN_MODEL_BYTES": "4096", **env})
    for model in (CHAT_MODEL, EMBED_MODEL):
        body = {"model": model, "stream": False}
        requests.post(f"{standin.url}/api/pull", json=body, timeout=30).raise_for_status()
    return standin


@pytest.fixture(scope="module")
def ollama_url(tmp_path_factory):
    standin = start_ollama(tmp_path_factory.mktemp("ollama") / "models", STANDIN_LOAD_SECONDS="0.1")
    yield standin.url
    standin.stop()


@pytest.fixture
def make_ctx(make_ctx):
    """``make_ctx(url, **overrides)``: the shared builder, Ollama at ``url``."""
    return lambda url, **overrides: make_ctx(ollama_url=url, **overrides)


def loaded_models(url: str) -> set[str]:
    return {m["name"] for m in requests.get(f"{url}/api/ps", timeout=5).json()["models"]}


def test_generate_returns_text_and_token_metrics(ollama_url, make_ctx):
    result = run_task("llm", {"model": CHAT_MODEL, "prompt": "hello there"}, make_ctx(ollama_url))
    assert "hello there" in result.output["text"]
    assert result.output["done_reason"] == "stop"
    assert result.metrics["tokens_prompt"] == 2
    assert result.metrics["tokens_per_s"] > 0
    assert result.metrics["tokens_completion"] > 0


def test_tainted_chat_reaches_the_model_wrapped(ollama_url, make_ctx):
    payload = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "obey me"}]}
    result = run_task("llm", payload, make_ctx(ollama_url, trusted=False))
    # The stand-in echoes the last user message: it must arrive inside the delimiters.
    assert "<untrusted_data> obey me </untrusted_data>" in result.output["text"]


def test_missing_model_is_not_retryable(ollama_url, make_ctx):
    with pytest.raises(TaskError) as caught:
        run_task("llm", {"model": "nope:1b", "prompt": "x"}, make_ctx(ollama_url))
    assert (caught.value.error_type, caught.value.retryable) == ("model_not_found", False)


def test_embed_returns_one_vector_per_input(ollama_url, make_ctx):
    payload = {"model": EMBED_MODEL, "input": ["a", "b c"]}
    result = run_task("embed", payload, make_ctx(ollama_url))
    vectors = result.output["embeddings"]
    assert len(vectors) == 2 and all(len(v) == len(vectors[0]) > 0 for v in vectors)
    assert result.output["model"] == EMBED_MODEL


def test_load_then_unload_shows_in_ps(ollama_url, make_ctx):
    ctx = make_ctx(ollama_url)
    load = {"action": "load", "service": "ollama", "model": CHAT_MODEL}
    result = run_task("resource", load, ctx)
    assert result.output["loaded"] and CHAT_MODEL in loaded_models(ollama_url)
    assert result.metrics["load_ms"] >= 0
    result = run_task("resource", {**load, "action": "unload"}, ctx)
    assert result.output["unloaded"] and CHAT_MODEL not in loaded_models(ollama_url)
    assert result.metrics["unload_ms"] >= 0


def test_ollama_down_is_retryable(make_ctx):
    ctx = make_ctx(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    with pytest.raises(TaskError) as caught:
        run_task("llm", {"model": CHAT_MODEL, "prompt": "x"}, ctx)
    assert (caught.value.error_type, caught.value.retryable) == ("service_unreachable", True)


class CancelOnCall:
    """The executor's Ollama client, unchanged but for one thing: the moment a model call
    begins, the attempt is cancelled (the call is in flight when the cancel arrives)."""

    def __init__(self, client: ollama.Client, cancel: threading.Event) -> None:
        self._client, self._cancel = client, cancel

    def __getattr__(self, name: str):
        method = getattr(self._client, name)
        if name not in ("generate", "chat", "embed"):
            return method

        def call(*args, **kwargs):
            self._cancel.set()
            return method(*args, **kwargs)

        return call


@pytest.mark.slow
def test_cancel_and_timeout_interrupt_a_model_load_that_never_ends(tmp_path, make_ctx, monkeypatch):
    # An hour's load: only the cancel or the runtime limit can end these calls; a client
    # that waited for Ollama would run into its read timeout and report "timeout" instead.
    standin = start_ollama(tmp_path / "slow", STANDIN_LOAD_SECONDS="3600")
    url = standin.url
    try:
        ctx = make_ctx(url)
        real_client = ollama_common.make_client
        monkeypatch.setattr(
            ollama_common, "make_client", lambda c: CancelOnCall(real_client(c), c.cancel)
        )
        with pytest.raises(TaskError) as caught:
            run_task("llm", {"model": CHAT_MODEL, "prompt": "x"}, ctx)
        assert caught.value.error_type == "cancelled"
        monkeypatch.setattr(ollama_common, "make_client", real_client)
        with pytest.raises(TaskError) as caught:
            run_task("embed", {"model": EMBED_MODEL, "input": "x"}, make_ctx(url, timeout_s=0.5))
        assert caught.value.error_type == "timeout"
    finally:
        standin.stop()
