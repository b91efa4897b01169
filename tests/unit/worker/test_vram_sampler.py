"""The peak VRAM of an attempt (issue 40): sampled from Ollama's ``/api/ps`` ``size_vram``
for a task of an Ollama model, from the cards otherwise (fake NVML, as
``test_worker_gpus.py``; AMD SMI in ``test_amd_gpus.py``), reported with the completion
as ``peak_vram_mb`` beside the executor's ``tokens_per_s``; a sampler that fails or lies
never fails the attempt, nor makes the brain refuse the report."""

from __future__ import annotations

import math
import sys
import threading
import types
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airig.common.protocol import Assignment, CompleteRequest
from airig.executors.context import ExecContext, ExecResult
from airig.worker import vram
from airig.worker.runner import Worker
from airig.worker.settings import WorkerSettings
from airig.worker.vram import NoSampler, PeakSampler, cards_used_mb, ollama_model_mb

MIB = 1024 * 1024
Memory = namedtuple("Memory", "total free")
MODEL = "qwen2.5:14b"


def fake_nvml(free_mb: list[int], total_mb: int = 8192) -> types.ModuleType:
    """A pynvml with one card whose free VRAM is the next of ``free_mb`` at each read."""
    nvml = types.ModuleType("pynvml")
    readings = iter(free_mb)
    last = [free_mb[0]]

    class NVMLError(Exception):
        pass

    def memory(_handle: int) -> Memory:
        last[0] = next(readings, last[0])
        return Memory(total_mb * MIB, last[0] * MIB)

    nvml.NVMLError = NVMLError
    nvml.NVML_TEMPERATURE_GPU = 0
    nvml.nvmlInit = lambda: None
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: 1
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetMemoryInfo = memory
    nvml.nvmlDeviceGetName = lambda h: b"RTX 3070"
    nvml.nvmlDeviceGetTemperature = lambda h, _kind: 50
    nvml.nvmlDeviceGetPowerUsage = lambda h: 90_000
    return nvml


class Ollama:
    def __init__(self, sizes: list[Any]) -> None:
        self.sizes = iter(sizes)

    def ps(self) -> SimpleNamespace:
        size = next(self.sizes, None)
        if isinstance(size, Exception):
            raise size
        models = [] if size is None else [SimpleNamespace(name=MODEL, model=MODEL,
                                                          size_vram=size)]  # fmt: skip
        return SimpleNamespace(models=models)


def sampled(probe, growth: bool, reads: int) -> PeakSampler:
    sampler = PeakSampler(probe, growth=growth, interval_s=3600)  # no thread sample
    for _ in range(reads):
        sampler.sample()
    return sampler


def test_nvml_reports_the_attempts_own_growth(monkeypatch):
    # 2 GiB in use when it began (another model), 9.1 GiB at the peak: 7.1 GiB its own
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([6144, 3000, 1024, 4000]))
    sampler = sampled(cards_used_mb([0]), growth=True, reads=4)
    assert sampler.peak_mb() == (8192 - 1024) - (8192 - 6144)


def test_without_a_driver_there_is_no_figure(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert sampled(cards_used_mb([0]), growth=True, reads=3).peak_mb() is None


def test_ollama_reports_the_models_own_size_vram():
    ps = Ollama([None, 9300 * MIB, 9318 * MIB, 9000 * MIB]).ps
    assert sampled(ollama_model_mb(ps, MODEL), growth=False, reads=4).peak_mb() == 9318


@pytest.mark.parametrize(
    "sizes",
    [[ConnectionError("down")] * 3, [-5 * MIB], [10**30], [math.nan], ["lots"], [None]],
)
def test_a_failing_or_lying_source_gives_no_figure_and_no_error(sizes):
    sampler = sampled(ollama_model_mb(Ollama(sizes).ps, MODEL), growth=False, reads=3)
    assert sampler.peak_mb() is None


def test_the_sampler_thread_samples_while_the_attempt_runs():
    seen = threading.Event()
    values = iter([100, 500, 700])

    def probe() -> int | None:
        value = next(values, None)
        if value is None:
            seen.set()
        return value

    with PeakSampler(probe, growth=False, interval_s=0.001) as sampler:
        assert seen.wait(10)
    assert sampler.peak_mb() == 700
    with NoSampler() as nothing:
        pass
    assert nothing.peak_mb() is None


@pytest.mark.parametrize(
    "value, sent", [(41.5, 41.5), (-1, None), (math.inf, None), (1e12, None), (True, None),
                    ("fast", None)],
)  # fmt: skip
def test_tokens_per_s_the_brain_would_refuse_is_left_out(value, sent):
    assert vram.tokens_per_s({"tokens_per_s": value}) == sent


class Brain:
    def __init__(self) -> None:
        self.reported: list[Any] = []

    def report(self, task: Assignment, body: Any) -> None:
        self.reported.append(body)


def test_a_completion_reports_the_peak_and_tokens_per_s(tmp_path: Path):
    settings = WorkerSettings(
        WORKER_CLASSES="llm", WORKER_GPU="0", WORKER_WORK_DIR=str(tmp_path / "work"),
        DATA_DIR=str(tmp_path),
    )  # fmt: skip
    brain = Brain()
    w = Worker(settings, link=brain)  # type: ignore[arg-type]
    w.pipeline = brain  # type: ignore[assignment]
    w.ollama = Ollama([9318 * MIB] * 10)  # type: ignore[assignment]

    def llm(task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        return ExecResult(output={"text": "hi"}, metrics={"tokens_per_s": 38.2, "wall_ms": 5})

    w.executor = llm
    task = Assignment(
        task_id=1, plan_id="p", key="t", name="t", type="llm", task_class="llm",
        payload={"model": MODEL, "prompt": "hi"}, model=MODEL, timeout_s=30, attempt=1,
        lease_id="l", lease_expires_at=0.0,
    )  # fmt: skip
    outcome, released = w.run_attempt(task, threading.Event(), tmp_path)
    w.report(task, outcome, tmp_path)
    [body] = brain.reported
    assert isinstance(body, CompleteRequest) and not released
    assert (body.peak_vram_mb, body.tokens_per_s) == (9318, 38.2)
    assert body.metrics["peak_vram_mb"] == 9318
