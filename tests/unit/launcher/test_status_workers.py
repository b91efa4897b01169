"""`status` shows each worker's GPU temperature and the brain's thermal warning."""

from __future__ import annotations

import io

import brain_helpers as h
from fastapi.testclient import TestClient
from rich.console import Console

from airig.brain.api.app import create_app
from airig.launcher.views.status import workers_table

BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
ADMIN = {"Authorization": "Bearer admin-secret-token"}


def rendered(table) -> str:
    out = io.StringIO()
    Console(file=out, width=250, color_system=None).print(table)
    return out.getvalue()


def test_a_hot_gpu_worker_shows_its_temperature_and_the_warning(tmp_path):
    settings = h.make_settings(tmp_path, AIRIG_THERMAL_LIMIT_C=83, AIRIG_THERMAL_HYSTERESIS_C=5)
    with TestClient(create_app(settings)) as client:
        tokens = {}
        for name, gpu in (("gpu0", 0), ("gpu1", 1)):
            body = {"name": name, "classes": ["llm"], "gpu_index": gpu}
            answer = client.post("/v1/workers/register", headers=BOOT, json=body)
            tokens[name] = {"Authorization": f"Bearer {answer.json()['token']}"}
        for name, gpu, temp in (("gpu0", 0, 86.0), ("gpu1", 1, 61.0)):
            beat = {"gpus": [{"index": gpu, "temperature_c": temp}], "resident_models": ["m"]}
            assert client.post("/v1/workers/heartbeat", headers=tokens[name], json=beat).is_success
        workers = client.get("/v1/workers", headers=ADMIN).json()["workers"]
    text = rendered(workers_table(workers))
    hot = next(line for line in text.splitlines() if "gpu0" in line)
    cool = next(line for line in text.splitlines() if "gpu1" in line)
    assert "86°C" in hot and "⚠" in hot and "83" in hot
    assert "61°C" in cool and "⚠" not in cool


def test_status_lists_the_dashboard_url_with_the_brain():
    from airig.launcher.compose.container import ContainerState
    from airig.launcher.views.status import _row

    brain = ContainerState("brain", "airig-agents-brain-1", "running", "healthy", None,
                         ["127.0.0.1:8080->8080/tcp"])  # fmt: skip
    ollama = ContainerState("ollama", "o", "running", "healthy", None, ["0.0.0.0:11434->11434/tcp"])
    assert _row(brain)["urls"] == ["http://127.0.0.1:8080", "http://127.0.0.1:8080/dashboard"]
    assert _row(ollama)["urls"] == ["http://localhost:11434"]
