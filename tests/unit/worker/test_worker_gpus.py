"""NVML telemetry labelled with host GPU indexes, inside a pinned container and on the host."""

from __future__ import annotations

import sys
import types
from collections import namedtuple

import pytest

from airig.worker.gpus import probe_gpus

Memory = namedtuple("Memory", "total free")
MIB = 1024 * 1024


def fake_nvml(cards: list[tuple[str, float]]) -> types.ModuleType:
    """A pynvml with ``cards`` (name, temperature) visible as devices 0..n-1."""
    nvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    nvml.NVMLError = NVMLError
    nvml.NVML_TEMPERATURE_GPU = 0
    nvml.nvmlInit = lambda: None
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: len(cards)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetMemoryInfo = lambda h: Memory(6144 * MIB, (1000 + h) * MIB)
    nvml.nvmlDeviceGetName = lambda h: cards[h][0].encode()
    nvml.nvmlDeviceGetTemperature = lambda h, _kind: cards[h][1]
    nvml.nvmlDeviceGetPowerUsage = lambda h: 90_000
    return nvml


@pytest.fixture
def nvml(monkeypatch):
    def install(cards):
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(cards))

    return install


def test_a_pinned_container_reports_its_card_under_the_host_index(nvml):
    nvml([("GTX 1060 #3", 84.0)])  # the runtime shows host GPU 3 as device 0
    [gpu] = probe_gpus([3])
    assert (gpu.index, gpu.name, gpu.temperature_c) == (3, "GTX 1060 #3", 84.0)


def test_on_the_host_the_owned_card_is_picked_by_index(nvml):
    nvml([(f"GTX 1060 #{i}", 60.0 + i) for i in range(5)])
    [gpu] = probe_gpus(3)
    assert (gpu.index, gpu.name, gpu.vram_free_mb) == (3, "GTX 1060 #3", 1003)


def test_the_brain_group_keeps_both_host_indexes(nvml):
    nvml([("GTX 1060 #0", 70.0), ("GTX 1060 #3", 71.0)])
    assert [g.index for g in probe_gpus([0, 3])] == [0, 3]


def test_no_driver_means_no_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert probe_gpus([0]) == []


def test_a_sensor_reading_out_of_range_is_left_out_not_sent(nvml):
    """The brain refuses a heartbeat with an impossible reading (422): a broken sensor
    must not take the worker off the brain, so the card goes without it."""
    from airig.common.protocol import GpuInfo

    nvml([("GTX 1060 #0", 4294967295.0)])
    [gpu] = probe_gpus([0])
    assert (gpu.temperature_c, gpu.power_w, gpu.vram_total_mb) == (None, None, 6144)
    assert GpuInfo.model_validate(gpu.model_dump()) == gpu
