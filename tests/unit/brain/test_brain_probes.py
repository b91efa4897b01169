"""The brain's probes of the compute services: what they read, and what becomes an alert."""

from __future__ import annotations

import json

import brain_helpers as h
import pytest
import requests

from airig.brain.ops import probes as probes_module
from airig.brain.ops.probes import ServiceProbes, Target, parse_targets
from airig.brain.service import Brain
from airig.common.errors import ConfigError

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

OLLAMA = Target("ollama", "http://ollama:11434", on_gpu=True)
COMFY = Target("comfyui", "http://comfyui:8188", on_gpu=True)
WHISPER = Target("whisper", "http://whisper:8000", on_gpu=False)


class Answers:
    """A fake GET: url -> a 2xx body (a str as is, anything else as JSON text), or an
    exception to raise; records what was asked."""

    def __init__(self, **by_path: object) -> None:
        self.by_path = by_path
        self.asked: list[str] = []

    def __call__(self, url: str, timeout_s: float) -> str:
        self.asked.append(url)
        answer = self.by_path[url.split("/", 3)[3]]
        if isinstance(answer, Exception):
            raise answer
        return answer if isinstance(answer, str) else json.dumps(answer)


def test_targets_parse_and_a_bad_item_is_refused():
    got = parse_targets("ollama=http://ollama:11434/, whisper=http://w:8000", "ollama")
    assert got == (
        Target("ollama", "http://ollama:11434", True),
        Target("whisper", "http://w:8000", False),
    )
    assert parse_targets("", "") == ()
    for bad in ("redis=http://r:6379", "ollama", "ollama=ollama:11434"):
        with pytest.raises(ValueError, match="NAME=http"):
            parse_targets(bad, "")


def test_a_brain_with_a_bad_probe_list_does_not_start(tmp_path):
    with pytest.raises(ConfigError, match="BRAIN_PROBE_SERVICES"):
        Brain(h.make_settings(tmp_path, BRAIN_PROBE_SERVICES="ollama=nope"))


def test_ollama_on_the_gpu_with_its_model_out_of_vram_is_a_fallback():
    ps = {"models": [{"name": "qwen2.5:7b", "size": 5_000, "size_vram": 0},
                     {"name": "nomic", "size": 100, "size_vram": 100}]}  # fmt: skip
    probes = ServiceProbes((OLLAMA,), get=Answers(**{"api/version": {}, "api/ps": ps}))
    probes.probe_once()
    assert list(probes.holding()) == [("gpu_fallback", "ollama")]
    assert "qwen2.5:7b size 5000 size_vram 0" in probes.holding()[("gpu_fallback", "ollama")]


def test_a_service_on_the_cpu_by_design_is_not_asked_where_it_runs():
    get = Answers(**{"health": {}})
    probes = ServiceProbes((WHISPER,), get=get)
    probes.probe_once()
    assert probes.holding() == {} and get.asked == ["http://whisper:8000/health"]


def test_comfyui_reporting_a_cpu_device_is_a_fallback_from_one_answer():
    stats = {"devices": [{"name": "cpu", "type": "cpu"}]}
    get = Answers(**{"system_stats": stats})
    probes = ServiceProbes((COMFY,), get=get)
    probes.probe_once()
    assert list(probes.holding()) == [("gpu_fallback", "comfyui")]
    assert get.asked == ["http://comfyui:8188/system_stats"]  # one request serves both


def test_down_after_n_failures_in_a_row_and_one_answer_clears_it():
    get = Answers(**{"api/version": requests.ConnectionError("refused"), "api/ps": {"models": []}})
    probes = ServiceProbes((OLLAMA,), down_after=3, get=get)
    for _ in range(2):
        probes.probe_once()
    assert probes.holding() == {}  # a restart in progress is not yet an alert
    probes.probe_once()
    [(key, message)] = probes.holding().items()
    assert key == ("service_down", "ollama") and "3 probes in a row failed" in message
    get.by_path["api/version"] = {"version": "0.20.6"}
    probes.probe_once()
    assert probes.holding() == {}


def test_probe_alerts_fire_and_clear_once_through_the_brain(tmp_path):
    brain = Brain(h.make_settings(tmp_path))
    brain.probes = ServiceProbes(
        (OLLAMA,), down_after=1, get=Answers(**{"api/version": requests.ConnectionError("refused")})
    )
    try:
        brain.probes.probe_once()
        fired = brain.check_alerts(now=1000.0)
        assert [(n.kind, n.subject, n.fired) for n in fired] == [("service_down", "ollama", True)]
        assert brain.check_alerts(now=1001.0) == []  # once
        brain.probes._get = Answers(**{"api/version": {}, "api/ps": {"models": []}})
        brain.probes.probe_once()
        cleared = brain.check_alerts(now=1002.0)
        assert [(n.kind, n.fired) for n in cleared] == [("service_down", False)]
    finally:
        brain.stop()


def test_whisper_answering_its_plain_text_ok_is_up(monkeypatch):
    """speaches v0.8.3 answers GET /health with the text `OK` (src/speaches/routers/misc.py):
    the probe read it as JSON and called a healthy whisper down for good."""
    monkeypatch.setattr(requests, "get", lambda url, timeout: response(200, "OK", url))
    probes = ServiceProbes((WHISPER,), down_after=1)  # the real getter
    for _ in range(3):
        probes.probe_once()
    assert probes.holding() == {}


def test_ollama_health_is_its_status_alone_and_a_bad_placement_answer_says_nothing():
    """Ollama's `GET /api/version` may be any 2xx body; a /api/ps that is not JSON leaves
    where it runs unknown, which is no outage."""
    get = Answers(**{"api/version": "", "api/ps": "<html>proxy</html>"})
    probes = ServiceProbes((OLLAMA,), down_after=1, get=get)
    probes.probe_once()
    assert probes.holding() == {}


def response(status: int, text: str, url: str = "http://w:8000/health") -> requests.Response:
    """A real requests.Response, as the wire would give it (no Content-Type, as speaches)."""
    answer = requests.Response()
    answer.status_code, answer._content, answer.url = status, text.encode(), url
    answer.reason = "Reason"
    return answer


@pytest.mark.parametrize(("status", "text"), [(200, "OK"), (204, ""), (200, '{"a": 1}')])
def test_the_real_getter_takes_any_2xx_body(monkeypatch, status, text):
    monkeypatch.setattr(requests, "get", lambda url, timeout: response(status, text))
    assert probes_module._get_text("http://w:8000/health", 1.0) == text


@pytest.mark.parametrize("status", [301, 404, 500, 503])
def test_the_real_getter_refuses_anything_else(monkeypatch, status):
    monkeypatch.setattr(requests, "get", lambda url, timeout: response(status, "OK"))
    with pytest.raises(requests.HTTPError, match=f"{status} Reason for http://w:8000/health"):
        probes_module._get_text("http://w:8000/health", 1.0)


# ---------------------------------------------------------------- Vulkan offload is GPU
# Ollama's /api/ps reports size_vram the same way for every GPU library (issue 28): the
# brain cannot see which one a service runs on, so the launcher may say it in
# AIRIG_GPU_SERVICES (``ollama=vulkan``) and the alert names it.

GB = 1_000_000_000
VULKAN = Target("ollama", "http://ollama:11434", on_gpu=True, backend="vulkan")
CUDA = Target("ollama", "http://ollama:11434", on_gpu=True, backend="cuda")


def ollama_ps(size: int, size_vram: int) -> dict[str, object]:
    """Ollama 0.20.6's /api/ps with one model, `size_vram` of its `size` bytes in VRAM."""
    return {"models": [{
        "name": "qwen2.5:7b", "model": "qwen2.5:7b", "size": size, "size_vram": size_vram,
        "digest": "845dbda0ea48ed749caafd9e6037047aa19acfcfd82e704d7ca97d631a0b697e",
        "details": {"parent_model": "", "format": "gguf", "family": "qwen2",
                    "families": ["qwen2"], "parameter_size": "7.6B",
                    "quantization_level": "Q4_K_M"},
        "expires_at": "2318-11-03T10:00:00Z", "context_length": 8192,
    }]}  # fmt: skip


def holding(target: Target, size: int, size_vram: int) -> dict[tuple[str, str], str]:
    get = Answers(**{"api/version": {"version": "0.20.6"}, "api/ps": ollama_ps(size, size_vram)})
    probes = ServiceProbes((target,), get=get)
    probes.probe_once()
    return probes.holding()


def test_gpu_services_may_name_each_ones_backend():
    got = parse_targets(
        "ollama=http://ollama:11434,comfyui=http://comfyui:8188,whisper=http://w:8000",
        "comfyui=xpu, ollama=vulkan",
    )
    assert got == (
        VULKAN,
        Target("comfyui", "http://comfyui:8188", True, "xpu"),
        Target("whisper", "http://w:8000", False, ""),
    )
    assert parse_targets("ollama=http://ollama:11434", "ollama") == (OLLAMA,)


def test_a_model_fully_offloaded_through_vulkan_is_on_the_gpu():
    assert ServiceProbes._cpu_evidence(VULKAN, ollama_ps(5 * GB, 5 * GB)) == []
    assert holding(VULKAN, 5 * GB, 5 * GB) == {}


def test_no_vram_on_a_vulkan_ollama_is_a_fallback_that_names_vulkan():
    [(key, message)] = holding(VULKAN, 5 * GB, 0).items()
    assert key == ("gpu_fallback", "ollama")
    assert message.startswith(
        f"given a GPU (vulkan) but runs on the CPU: /api/ps: qwen2.5:7b size {5 * GB} size_vram 0;"
    )


@pytest.mark.parametrize("in_vram", [1.0, 0.9, 0.5, 0.49, 0.1, 0.0])
def test_a_partial_offload_is_judged_on_vulkan_as_on_cuda(in_vram: float):
    size = 5 * GB
    on_vulkan = holding(VULKAN, size, int(in_vram * size))
    on_cuda = holding(CUDA, size, int(in_vram * size))
    assert (
        list(on_vulkan) == list(on_cuda) == ([("gpu_fallback", "ollama")] if in_vram < 0.5 else [])
    )
