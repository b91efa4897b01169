"""The brain's residency decision reaches the worker (Assignment.evict / load), and the
worker's Swapper carries it out: which services, which failures, which resident set."""

from __future__ import annotations

import threading

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.scheduling.residency import Decision, ReadyTask, swap_fields
from airig.common.protocol import Assignment
from airig.executors.context import ExecContext, ExecResult, TaskError
from airig.worker.runner import Worker
from airig.worker.settings import WorkerSettings
from airig.worker.swap import Swapper

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
OLD, NEW, WHISPER = "qwen2.5:0.5b", "llama3.2:1b", "Systran/faster-whisper-small"


@pytest.fixture
def client(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0, AIRIG_MIN_RESIDENT_S=0)
    with TestClient(create_app(settings)) as client:
        yield client


def gpu_worker(client) -> dict:
    answer = client.post(
        "/v1/workers/register", headers=BOOT, json={"name": "gpu0", "classes": ["llm"]}
    )
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def submit_llm(client, model: str) -> None:
    task = {"id": "t", "type": "llm", "payload": {"model": model, "prompt": "hi"}}
    answer = client.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": [task]})
    assert answer.status_code == 201, answer.text


def test_the_assignment_carries_the_decisions_eviction_and_load(client):
    worker = gpu_worker(client)
    submit_llm(client, NEW)
    body = {"wait_s": 0, "resident_models": [OLD]}
    answer = client.post("/v1/claims", headers=worker, json=body)
    assert answer.status_code == 200
    task = Assignment.model_validate(answer.json())
    assert (task.evict, task.load, task.load_service) == ([OLD], NEW, "ollama")


def test_a_compatible_claim_asks_for_no_swap(client):
    worker = gpu_worker(client)
    submit_llm(client, OLD)
    body = {"wait_s": 0, "resident_models": [OLD]}
    task = Assignment.model_validate(client.post("/v1/claims", headers=worker, json=body).json())
    assert (task.evict, task.load) == ([], None)


def test_a_transcription_goes_to_the_worker_whose_own_whisper_holds_its_model(client):
    """Issue 34 §3: a worker reports its own Whisper's models with its Ollama's, and the
    brain counts them alike: the same model is a compatible claim, another a swap that
    the worker carries out on its Whisper (load_service)."""
    gpu1 = {"name": "gpu1", "classes": ["llm", "script", "resource"]}
    answer = client.post("/v1/workers/register", headers=BOOT, json=gpu1)
    worker = {"Authorization": f"Bearer {answer.json()['token']}"}
    for key, model in (("a", WHISPER), ("b", "Systran/faster-whisper-base")):
        task = {"id": key, "type": "transcribe", "payload": {"model": model, "audio": "a.wav"}}
        answer = client.post("/v1/plans", headers=ADMIN, json={"name": key, "tasks": [task]})
        assert answer.status_code == 201, answer.text
    body = {"wait_s": 0, "resident_models": [OLD, WHISPER]}
    first = Assignment.model_validate(client.post("/v1/claims", headers=worker, json=body).json())
    assert (first.model, first.evict, first.load) == (WHISPER, [], None)
    second = Assignment.model_validate(client.post("/v1/claims", headers=worker, json=body).json())
    assert second.load == "Systran/faster-whisper-base" and second.load_service == "whisper"
    assert set(second.evict) == {OLD, WHISPER}  # sizes unknown: the card is exclusive


def test_swap_fields_copy_the_decision_and_the_known_size():
    ready = ReadyTask(1, "llm", 5, 0.0, model=NEW, vram_mb=4200)
    fields = swap_fields(Decision(ready, "swap", load=NEW, evict=(OLD,)))
    assert fields == {"evict": [OLD], "load": NEW, "need_vram_mb": 4200}
    assert swap_fields(None) == {}


def assignment(**swap) -> Assignment:
    return Assignment(
        task_id=1, plan_id="p", key="t", name="t", type=swap.pop("type", "llm"),
        task_class="llm", payload={}, model=NEW, timeout_s=30, attempt=1, lease_id="l",
        lease_expires_at=0.0, **swap,
    )  # fmt: skip


def context(tmp_path) -> ExecContext:
    """The context an attempt's swap runs in (the worker builds one per attempt)."""
    return Worker(settings(tmp_path), link=object()).context(  # type: ignore[arg-type]
        assignment(), threading.Event(), tmp_path
    )


def settings(tmp_path, classes="llm", gpu="") -> WorkerSettings:
    paths = {"WORKER_WORK_DIR": str(tmp_path), "DATA_DIR": str(tmp_path)}
    return WorkerSettings(WORKER_CLASSES=classes, WORKER_GPU=gpu, **paths)


class FakeServices:
    """Stands in for the resource executor: records (service, action, model) in order."""

    def __init__(self, fail_on: tuple[str, str] | None = None) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.fail_on = fail_on

    def __call__(self, task_type, payload, ctx):
        step = (payload["service"], payload["action"], payload["model"])
        self.calls.append(step)
        if self.fail_on == step[1:]:
            raise TaskError("Ollama still lists it", error_type="unload_timeout")
        return ExecResult(output={}, metrics={"load_ms": 1500} if step[1] == "load" else {})


def test_a_cpu_worker_ignores_load_and_evict(tmp_path):
    swapper = Swapper(settings(tmp_path, classes="cpu,script"), run=FakeServices())
    assert not swapper.needed(assignment(evict=[OLD], load=NEW))
    assert Swapper(settings(tmp_path, classes="script", gpu="0")).needed(assignment(load=NEW))


def test_ollama_models_are_swapped_but_a_shared_whisper_server_is_left_alone(tmp_path):
    services = FakeServices()
    swapper = Swapper(settings(tmp_path), run=services, free_mb=lambda: None)
    assert not swapper.needed(assignment(type="transcribe", evict=[OLD], load=WHISPER))
    report, error = swapper.swap(assignment(evict=[OLD], load=NEW), context(tmp_path))
    assert error is None and (report.loaded, report.load_ms) == (NEW, 1500)
    assert services.calls == [("ollama", "unload", OLD), ("ollama", "load", NEW)]


def test_a_failed_unload_fails_the_attempt_retryable_and_skips_the_load(tmp_path):
    services = FakeServices(fail_on=("unload", OLD))
    swapper = Swapper(settings(tmp_path), run=services, free_mb=lambda: None)
    report, error = swapper.swap(assignment(evict=[OLD], load=NEW), context(tmp_path))
    assert error is not None and error.retryable and error.error_type == "unload_timeout"
    assert f"unload {OLD}, load {NEW}" in error.message
    assert services.calls == [("ollama", "unload", OLD)] and report.loaded is None


def test_vram_not_freed_is_a_retryable_failure_before_the_load(tmp_path):
    services = FakeServices()
    swapper = Swapper(settings(tmp_path), run=services, free_mb=lambda: 900, settle_s=0)
    report, error = swapper.swap(
        assignment(evict=[OLD], load=NEW, need_vram_mb=4000), context(tmp_path)
    )
    assert error is not None and error.retryable and error.error_type == "vram_not_freed"
    assert [action for _, action, _ in services.calls] == ["unload"]
    assert OLD in report.unload_ms
