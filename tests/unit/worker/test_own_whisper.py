"""A GPU worker with its own Whisper (`whisper-gpuN`, WORKER_OWN_WHISPER=1, issue 34 §3):
its Whisper's loaded models are resident like its Ollama's, and the brain's swaps reach
the server holding each model. Without one, the shared Whisper is left alone."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from airig.common.protocol import Assignment
from airig.executors.context import ExecResult
from airig.executors.ollama_common import CLIENT_ERRORS
from airig.worker.runner import Worker, whisper_loaded
from airig.worker.settings import WorkerSettings
from airig.worker.swap import Swapper

LLM, W_SMALL, W_BASE = "qwen2.5:7b", "Systran/faster-whisper-small", "Systran/faster-whisper-base"


class Speaches:
    """speaches' GET /api/ps: ``{"models": [ids]}`` (routers/misc.py)."""

    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.up = True
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                if not owner.up or self.path != "/api/ps":
                    self.send_error(503 if not owner.up else 404)
                    return
                body = json.dumps({"models": owner.loaded}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def speaches() -> Iterator[Speaches]:
    server = Speaches()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def settings(tmp_path: Path, url: str = "http://whisper:8000", own: bool = True):
    return WorkerSettings(
        WORKER_CLASSES="llm,script,resource", WORKER_GPU="2", WHISPER_URL=url,
        WORKER_OWN_WHISPER="1" if own else "0", WORKER_WORK_DIR=str(tmp_path),
        DATA_DIR=str(tmp_path),
    )  # fmt: skip


class FakeOllama:
    def __init__(self, loaded: list[str]) -> None:
        self.loaded, self.fail = loaded, False

    def ps(self):
        if self.fail:
            raise CLIENT_ERRORS[1]("busy")
        return SimpleNamespace(models=[SimpleNamespace(name=m, model=m) for m in self.loaded])


def worker(tmp_path: Path, url: str, own: bool = True, ollama: list[str] | None = None) -> Worker:
    w = Worker(settings(tmp_path, url, own), link=SimpleNamespace())  # type: ignore[arg-type]
    w.ollama = FakeOllama(ollama or [])  # type: ignore[assignment]
    return w


def test_the_own_whispers_loaded_models_are_resident_beside_ollamas(tmp_path, speaches):
    speaches.loaded = [W_SMALL]
    w = worker(tmp_path, speaches.url, ollama=[LLM])
    assert w.resident_models() == [LLM, W_SMALL]
    assert w.whisper_loaded == [W_SMALL]
    # a server that does not answer keeps its last known set
    speaches.up = False
    w.ollama.fail = True  # type: ignore[union-attr]
    assert w.resident_models() == [LLM, W_SMALL]
    speaches.up, speaches.loaded = True, []
    assert w.resident_models() == [LLM]


def test_the_shared_whispers_models_count_on_each_worker_transcribing_there(tmp_path, speaches):
    """Its loaded model is loaded for every worker whose transcriptions go there (as the
    shared Ollama's models are for CPU workers); a worker taking no transcription (the
    brain's group: llm,resource) does not ask."""
    speaches.loaded = [W_SMALL]
    w = worker(tmp_path, speaches.url, own=False, ollama=[LLM])
    assert w.resident_models() == [LLM, W_SMALL]
    brain_group = Worker(
        WorkerSettings(WORKER_CLASSES="llm,resource", WORKER_GPU="0,3", WHISPER_URL=speaches.url,
                       WORKER_WORK_DIR=str(tmp_path), DATA_DIR=str(tmp_path)),
        link=SimpleNamespace(),  # type: ignore[arg-type]
    )  # fmt: skip
    brain_group.ollama = FakeOllama([LLM])  # type: ignore[assignment]
    assert brain_group.resident_models() == [LLM]


@pytest.mark.parametrize("answer", ["not json", {"models": "x"}, ["x"]])
def test_an_unreadable_ps_answer_keeps_the_last_set(monkeypatch, answer):
    class Reply:
        def raise_for_status(self) -> None:
            pass

        def json(self):
            if answer == "not json":
                raise ValueError(answer)
            return answer

    monkeypatch.setattr("airig.worker.runner.requests.get", lambda *_a, **_k: Reply())
    assert whisper_loaded("http://whisper-gpu2:8000", [W_SMALL]) == [W_SMALL]


def assignment(**swap) -> Assignment:
    return Assignment(
        task_id=1, plan_id="p", key="t", name="t", type=swap.pop("type", "transcribe"),
        task_class="script", payload={}, model=W_BASE, timeout_s=30, attempt=1, lease_id="l",
        lease_expires_at=0.0, **swap,
    )  # fmt: skip


class Services:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def __call__(self, task_type, payload, ctx):
        self.calls.append((payload["service"], payload["action"], payload["model"]))
        metrics = {"load_ms": 3200} if payload["action"] == "load" else {}
        return ExecResult(output={}, metrics=metrics)


def swapping(
    tmp_path: Path, speaches: Speaches, services: Services, resident: list[str],
    whisper: list[str], own: bool = True,
) -> Worker:  # fmt: skip
    """A worker holding ``resident`` (``whisper`` of them in its Whisper) whose executor
    answers at once; its servers' /api/ps are the test's to set."""
    w = worker(tmp_path, speaches.url, own)
    w.swapper = Swapper(settings(tmp_path, speaches.url, own), run=services, free_mb=lambda: None)
    w.swapper.weights_mb = lambda _model: None  # type: ignore[method-assign]
    w.executor = lambda *_a: ExecResult(output={"text": "hi"})
    w.resident, w.whisper_loaded = resident, whisper
    return w


def test_a_transcription_swaps_on_the_own_whisper_and_unloads_each_model_where_it_lives(
    tmp_path, speaches
):
    services = Services()
    host = swapping(tmp_path, speaches, services, [LLM, W_SMALL], [W_SMALL])
    task = assignment(evict=[LLM, W_SMALL], load=W_BASE)
    assert task.load_service == "whisper" and host.swapper.needed(task)
    speaches.loaded = [W_BASE]  # the servers agree with what the swap did
    result, released = host.run_attempt(task, threading.Event(), tmp_path)
    assert not released and isinstance(result, ExecResult) and result.output == {"text": "hi"}
    assert services.calls == [
        ("ollama", "unload", LLM), ("whisper", "unload", W_SMALL), ("whisper", "load", W_BASE),
    ]  # fmt: skip
    assert (host.resident, host.whisper_loaded) == ([W_BASE], [W_BASE])
    # the brain learns the load (model.load event, reload cost) from the task's metrics
    assert result.metrics["swap"]["loaded"] == W_BASE
    assert result.metrics["swap"]["load_ms"] == 3200


def test_an_llm_swap_unloads_the_own_whispers_model_from_the_whisper(tmp_path, speaches):
    services = Services()
    task = assignment(type="llm", evict=[W_SMALL], load=LLM)
    host = swapping(tmp_path, speaches, services, [W_SMALL], [W_SMALL])
    host.ollama.loaded = [LLM]  # type: ignore[union-attr]
    host.run_attempt(task, threading.Event(), tmp_path)
    assert services.calls == [("whisper", "unload", W_SMALL), ("ollama", "load", LLM)]
    assert (host.resident, host.whisper_loaded) == ([LLM], [])


def test_without_an_own_whisper_a_transcription_swaps_nothing(tmp_path):
    swapper = Swapper(settings(tmp_path, own=False), run=Services())
    assert not swapper.needed(assignment(evict=[LLM], load=W_BASE))


def test_an_llm_swap_leaves_the_shared_whispers_model_loaded(tmp_path, speaches):
    """The brain may list it among the victims (it counts on this worker); it is the
    other workers' too, and unloading it would free nothing on this worker's card."""
    services = Services()
    host = swapping(tmp_path, speaches, services, [W_SMALL, LLM], [W_SMALL], own=False)
    speaches.loaded = [W_SMALL]
    host.ollama.loaded = ["llama3.2:1b"]  # type: ignore[union-attr]
    task = assignment(type="llm", evict=[W_SMALL, LLM], load="llama3.2:1b")
    result, _ = host.run_attempt(task, threading.Event(), tmp_path)
    assert isinstance(result, ExecResult)
    assert services.calls == [("ollama", "unload", LLM), ("ollama", "load", "llama3.2:1b")]
    assert result.metrics["swap"]["unload_ms"].keys() == {LLM}  # the brain keeps W_SMALL
    assert host.whisper_loaded == [W_SMALL]
