"""AMD GPUs through AMD SMI's Python API (issue 40: the peak VRAM "from NVML/amdsmi"): a
fake ``amdsmi`` module in ``sys.modules`` that behaves as upstream's ``py-interface``
documents it (``amdsmi_init`` raising ``AmdSmiLibraryException`` without a driver, a list
of handles, ``amdsmi_get_gpu_vram_usage`` → ``{"vram_total", "vram_used"}`` in MB,
``"N/A"`` for what a board does not report, ``amdsmi_shut_down`` last). Heartbeats report
the cards under the host's indexes, an attempt's peak VRAM is sampled from them, and no
refusal or hostile figure from the library ever fails the attempt."""

from __future__ import annotations

import math
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from airig.common.protocol import Assignment, CompleteRequest
from airig.executors.context import ExecContext, ExecResult
from airig.worker import amd_gpus, amd_sysfs
from airig.worker.gpus import probe_gpus
from airig.worker.runner import Worker
from airig.worker.settings import WorkerSettings
from airig.worker.vram import PeakSampler, cards_used_mb


class AmdSmiException(Exception):
    """upstream's base class (amdsmi_exception.py)"""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(f"Error code:\n\t{err_code} | AMDSMI_STATUS_INIT_ERROR")
        self.err_code = err_code


class FakeSmi(types.ModuleType):
    """amdsmi with ``cards``: per card (market name, total MB, [used MB per read]), or an
    exception / hostile dict in place of a reading."""

    def __init__(self, cards: list[tuple[str, int, list[Any]]], init_error: bool = False):
        super().__init__("amdsmi")
        self.cards, self.init_error = cards, init_error
        self.reads = [iter(used) for _, _, used in cards]
        self.last: list[Any] = [used[0] for _, _, used in cards]
        self.initialised = 0  # amdsmi_init minus amdsmi_shut_down
        self.AmdSmiException = AmdSmiException
        self.AmdSmiLibraryException = AmdSmiLibraryException

    def amdsmi_init(self, flag: int = 2) -> None:
        if self.init_error:  # "driver must be loaded for amdsmi_init() to pass"
            raise AmdSmiLibraryException(8)
        self.initialised += 1

    def amdsmi_shut_down(self) -> None:
        self.initialised -= 1

    def _handle(self, handle: Any) -> int:
        if self.initialised <= 0:
            raise AmdSmiLibraryException(32)  # a call outside init … shut_down
        return handle.index

    def amdsmi_get_processor_handles(self) -> list[Any]:
        self._handle(types.SimpleNamespace(index=0))
        return [types.SimpleNamespace(index=i) for i in range(len(self.cards))]

    def amdsmi_get_gpu_asic_info(self, handle: Any) -> dict[str, Any]:
        name = self.cards[self._handle(handle)][0]
        return {"market_name": name, "vendor_id": 0x1002, "device_id": 0x73BF}

    def amdsmi_get_gpu_vram_usage(self, handle: Any) -> Any:
        i = self._handle(handle)
        self.last[i] = next(self.reads[i], self.last[i])
        value = self.last[i]
        if isinstance(value, Exception):
            raise value
        if isinstance(value, dict | type(None)):
            return value
        return {"vram_total": self.cards[i][1], "vram_used": value}


@pytest.fixture
def smi(monkeypatch):
    """Install a FakeSmi as ``amdsmi``; NVML absent (an AMD host); amdgpu's sysfs files
    (the fallback, ``amd_sysfs.py``) absent too, whatever this machine has."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(amd_sysfs, "SYSFS_ROOT", Path("/nonexistent-sysfs"))

    def install(cards, **kwargs) -> FakeSmi:
        fake = FakeSmi(cards, **kwargs)
        monkeypatch.setitem(sys.modules, "amdsmi", fake)
        return fake

    return install


def test_a_container_listing_only_its_card_reports_it_under_the_host_index(smi):
    fake = smi([("Radeon RX 6800 XT", 16368, [1200])])  # host GPU 2, the one node mapped
    [gpu] = probe_gpus([2])
    assert (gpu.index, gpu.name, gpu.vram_total_mb, gpu.vram_free_mb) == (
        2, "Radeon RX 6800 XT", 16368, 16368 - 1200,
    )  # fmt: skip
    assert fake.initialised == 0  # shut down again


def test_where_every_card_of_the_host_is_listed_the_owned_ones_are_picked_by_index(smi):
    # on the bare host, and in a container where AMD SMI reads the whole sysfs
    smi([(f"Radeon #{i}", 8192, [100 * i]) for i in range(4)])
    assert [(g.index, g.name, g.vram_free_mb) for g in probe_gpus([1, 3])] == [
        (1, "Radeon #1", 8092), (3, "Radeon #3", 7892),
    ]  # fmt: skip


def test_the_attempts_peak_is_its_own_growth_on_an_amd_card(smi):
    # 2 GB in use when it began, 11.3 GB at the peak: 9.3 GB its own
    smi([("Radeon RX 7900 XTX", 24560, [2048, 6000, 11348, 4000])])
    sampler = PeakSampler(cards_used_mb([0]), growth=True, interval_s=3600)
    for _ in range(4):
        sampler.sample()
    assert sampler.peak_mb() == 11348 - 2048


def test_nvml_wins_where_both_answer(smi, monkeypatch):
    smi([("Radeon", 8192, [0])])
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = type("NVMLError", (Exception,), {})  # type: ignore[attr-defined]
    nvml.__dict__.update(
        NVML_TEMPERATURE_GPU=0, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=2**33, free=2**32),
        nvmlDeviceGetName=lambda h: b"RTX 3070", nvmlDeviceGetTemperature=lambda h, k: 50,
        nvmlDeviceGetPowerUsage=lambda h: 90_000,
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert [g.name for g in probe_gpus([0])] == ["RTX 3070"]


def test_without_amdsmi_or_a_driver_there_are_no_cards(smi, monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # not installed: the import fails
    assert probe_gpus([0]) == []
    fake = smi([("Radeon", 8192, [0])], init_error=True)  # no amdgpu driver loaded
    assert probe_gpus([0]) == [] and fake.initialised == 0


@pytest.mark.parametrize("failure", ["raise SystemExit(1)", "raise OSError('libamd_smi.so')"])
def test_an_amdsmi_whose_library_is_missing_prints_nothing_and_is_absent(
    monkeypatch, capsys, tmp_path, failure
):
    # the package installed without ROCm's library: its import prints, then gives up
    package = tmp_path / "amdsmi"
    package.mkdir()
    (package / "__init__.py").write_text(f"print('Unable to find libamd_smi.so')\n{failure}\n")
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVIDIA driver either
    monkeypatch.setattr(amd_sysfs, "SYSFS_ROOT", tmp_path / "no-sysfs")  # nor amdgpu's files
    monkeypatch.syspath_prepend(str(tmp_path))
    assert amd_gpus.load_amdsmi() is None
    assert probe_gpus([0]) == []
    assert capsys.readouterr() == ("", "")
    assert "amdsmi" not in sys.modules


def test_an_owned_card_amdsmi_does_not_list_gives_no_reading(smi):
    smi([("Radeon #0", 8192, [100]), ("Radeon #1", 8192, [100])])
    assert probe_gpus([5]) == []  # WORKER_GPU=5, two cards listed
    assert probe_gpus([1, 7, 9]) == []  # one of three is no sum of three


@pytest.mark.parametrize(
    "reading",
    [
        AmdSmiLibraryException(2),  # AMDSMI_STATUS_NOT_SUPPORTED
        AmdSmiException("device busy"),
        RuntimeError("ctypes: access violation"),
        -1,
        10**30,
        "N/A",
        math.nan,
        math.inf,
        12.5,
        True,
        99999,  # more used than the card has
        {"vram_total": -4, "vram_used": 0},
        {"vram_total": "N/A", "vram_used": "N/A"},
        {"vram_total": 2**31, "vram_used": 0},
        {},
        None,
    ],
)
def test_a_refusal_or_a_hostile_figure_gives_no_reading_and_no_error(smi, reading):
    fake = smi([("Radeon #0", 8192, [100]), ("Radeon #1", 8192, [reading])])
    assert probe_gpus([0, 1]) == []
    assert fake.initialised == 0  # shut down whatever the query did
    sampler = PeakSampler(cards_used_mb([0, 1]), growth=True, interval_s=3600)
    sampler.sample()
    assert sampler.peak_mb() is None


def test_a_hostile_name_is_bounded_and_a_failing_one_is_a_plain_label(smi):
    fake = smi([("x" * 10_000, 8192, [0])])
    [gpu] = probe_gpus([0])
    assert gpu.name == "x" * 256

    def refuse(_handle: Any) -> dict:
        raise AmdSmiLibraryException(2)

    fake.amdsmi_get_gpu_asic_info = refuse  # type: ignore[method-assign]
    assert [g.name for g in probe_gpus([0])] == ["AMD GPU"]


class Brain:
    def __init__(self) -> None:
        self.reported: list[Any] = []

    def report(self, task: Assignment, body: Any) -> None:
        self.reported.append(body)


def attempt(tmp_path: Path) -> CompleteRequest:
    """One transcribe attempt (Whisper's model: no Ollama figure) on GPU worker 0."""
    settings = WorkerSettings(
        WORKER_CLASSES="script", WORKER_GPU="0", WORKER_WORK_DIR=str(tmp_path / "work"),
        DATA_DIR=str(tmp_path),
    )  # fmt: skip
    brain = Brain()
    w = Worker(settings, link=brain)  # type: ignore[arg-type]
    w.pipeline = brain  # type: ignore[assignment]

    def transcribe(task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
        return ExecResult(output={"text": "hi"}, metrics={"wall_ms": 5})

    w.executor = transcribe
    task = Assignment(
        task_id=1, plan_id="p", key="t", name="t", type="transcribe", task_class="script",
        payload={"model": "large-v3", "input": "a.wav"}, model="large-v3", timeout_s=30,
        attempt=1, lease_id="l", lease_expires_at=0.0,
    )  # fmt: skip
    outcome, released = w.run_attempt(task, threading.Event(), tmp_path)
    assert not released
    w.report(task, outcome, tmp_path)
    [body] = brain.reported
    assert isinstance(body, CompleteRequest)
    return body


def test_a_completion_reports_the_amd_peak(smi, tmp_path):
    smi([("Radeon RX 6800 XT", 16368, [1000, 4000])])
    assert attempt(tmp_path).peak_vram_mb == 3000


@pytest.mark.parametrize("broken", ["init", "query", "module"])
def test_an_amdsmi_failure_never_fails_the_attempt(smi, monkeypatch, tmp_path, broken):
    if broken == "module":
        monkeypatch.setitem(sys.modules, "amdsmi", types.ModuleType("amdsmi"))  # no API
    else:
        smi([("Radeon", 8192, [AmdSmiLibraryException(2)])], init_error=broken == "init")
    body = attempt(tmp_path)
    assert body.output == {"text": "hi"} and body.peak_vram_mb is None
