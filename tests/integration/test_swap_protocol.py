"""The worker's swap protocol against the Ollama stand-in, through the real resource executor.

Unload must be confirmed (gone from /api/ps) before the load starts, the VRAM check must
stand between them, and the durations must be reported.
"""

from __future__ import annotations

import threading

import pytest
import requests
from standins.conftest_helpers import start_standin

from airig.executors.base import run_task
from airig.executors.context import ExecContext, TaskError
from airig.worker.swap import run_swap

OLD, NEW = "qwen2.5:0.5b", "llama3.2:1b"
LOAD_S = 0.3


@pytest.fixture(scope="module")
def ollama_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("swap") / "models"
    env = {"STANDIN_MODEL_BYTES": "4096", "STANDIN_LOAD_SECONDS": str(LOAD_S)}
    standin = start_standin("ollama", root, env)
    for model in (OLD, NEW):
        body = {"model": model, "stream": False}
        requests.post(f"{standin.url}/api/pull", json=body, timeout=30).raise_for_status()
    yield standin.url
    standin.stop()


def loaded(url: str) -> dict[str, dict]:
    models = requests.get(f"{url}/api/ps", timeout=5).json()["models"]
    return {m["name"]: m for m in models}


@pytest.fixture
def ctx(ollama_url, make_ctx) -> ExecContext:
    for model in loaded(ollama_url):
        unload = {"service": "ollama", "action": "unload", "model": model}
        run_task("resource", unload, make_ctx(ollama_url=ollama_url))
    load = {"service": "ollama", "action": "load", "model": OLD}
    run_task("resource", load, make_ctx(ollama_url=ollama_url))
    return make_ctx(ollama_url=ollama_url)


class Recorder:
    """Wraps the real executor and notes what Ollama had loaded when each step began."""

    def __init__(self, url: str) -> None:
        self.url, self.steps = url, []

    def __call__(self, task_type, payload, ctx):
        self.steps.append((payload["action"], payload["model"], set(loaded(self.url))))
        return run_task(task_type, payload, ctx)


def test_unload_is_confirmed_before_the_load_starts(ollama_url, ctx):
    assert OLD in loaded(ollama_url)
    seen_together, stop = [], threading.Event()

    def watch() -> None:  # the two models must never be resident at the same time
        while not stop.is_set():
            if {OLD, NEW} <= set(loaded(ollama_url)):
                seen_together.append(True)
            stop.wait(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    recorder = Recorder(ollama_url)
    checks: list[set[str]] = []

    def free_mb() -> int:
        checks.append(set(loaded(ollama_url)))  # the VRAM check runs after the unload
        return 6000

    try:
        report = run_swap(
            ctx, "ollama", [OLD], NEW, need_vram_mb=5000, free_mb=free_mb, run=recorder
        )
    finally:
        stop.set()
        watcher.join()
    assert [(action, model) for action, model, _ in recorder.steps] == [
        ("unload", OLD),
        ("load", NEW),
    ]
    assert OLD not in recorder.steps[1][2] and checks == [set()]
    assert not seen_together
    now = loaded(ollama_url)
    assert set(now) == {NEW}
    assert now[NEW]["expires_at"] > "2200"  # keep_alive -1: only the brain evicts it
    assert report.load_ms >= LOAD_S * 1000 * 0.9 and OLD in report.unload_ms
    assert report.metrics()["swap"]["free_vram_mb"] == 6000


def test_vram_not_freed_stops_the_swap_before_loading(ollama_url, ctx):
    recorder = Recorder(ollama_url)
    with pytest.raises(TaskError) as caught:
        run_swap(ctx, "ollama", [OLD], NEW, need_vram_mb=5000, free_mb=lambda: 1200,
                 settle_s=0.3, run=recorder)  # fmt: skip
    assert caught.value.error_type == "vram_not_freed"
    assert [action for action, _, _ in recorder.steps] == ["unload"]
    assert NEW not in loaded(ollama_url)


def test_vram_that_frees_late_is_waited_for(ollama_url, ctx):
    readings = iter([1000, 3000, 5500])
    report = run_swap(ctx, "ollama", [OLD], NEW, need_vram_mb=5000,
                      free_mb=lambda: next(readings), settle_s=5)  # fmt: skip
    assert report.free_vram_mb == 5500 and set(loaded(ollama_url)) == {NEW}


def test_the_worker_learns_the_vram_need_from_ollama_when_the_brain_has_none(tmp_path):
    """No size from the brain: the worker takes the weights' size from /api/tags (the
    stand-in's 3 MiB model) and will not load into less free VRAM than that."""
    from airig.common.protocol import Assignment
    from airig.worker.runner import Worker
    from airig.worker.settings import WorkerSettings
    from airig.worker.swap import Swapper

    standin = start_standin("ollama", tmp_path / "models", {"STANDIN_MODEL_BYTES": str(3 << 20)})
    try:
        body = {"model": NEW, "stream": False}
        requests.post(f"{standin.url}/api/pull", json=body, timeout=30).raise_for_status()
        settings = WorkerSettings(
            WORKER_CLASSES="llm", WORKER_GPU="0", OLLAMA_URL=standin.url,
            WORKER_WORK_DIR=str(tmp_path), DATA_DIR=str(tmp_path),
        )  # fmt: skip
        swapper = Swapper(settings, free_mb=lambda: 1, settle_s=0.2)
        assert swapper.weights_mb(NEW) == 3 and swapper.weights_mb("missing:1b") is None
        task = Assignment(
            task_id=1, plan_id="p", key="t", name="t", type="llm", task_class="llm",
            payload={}, model=NEW, timeout_s=30, attempt=1, lease_id="l",
            lease_expires_at=0.0, load=NEW,
        )  # fmt: skip
        ctx = Worker(settings, link=object()).context(task, threading.Event(), tmp_path)  # type: ignore[arg-type]
        report, error = swapper.swap(task, ctx)
        assert error is not None and error.error_type == "vram_not_freed", error
        assert report.loaded is None and NEW not in loaded(standin.url)
    finally:
        standin.stop()
