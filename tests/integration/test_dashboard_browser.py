"""The dashboard in a real headless Chromium against a real brain and worker.

A CPU worker runs a small DAG of noop tasks; a second "rig" registers a GPU worker that
heartbeats rising temperatures until the thermal guard pauses it. The page is driven like
an operator would: token form, nav clicks, filters. Screenshots land in
$AIRIG_TEST_ARTIFACTS (default <repo>/test-artifacts/).
"""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

import pytest
import requests
from brain_procs import ADMIN_TOKEN, BOOTSTRAP_TOKEN, Cluster, free_port
from dashboard_browser import Dashboard, browser_missing, chromium

from airig.provision.cache import VerifyCache
from airig.services import gate as airig_gate

pytestmark = pytest.mark.skipif(bool(browser_missing()), reason=browser_missing() or "")

PLAN = {"name": "nightly digest", "tasks": [
    {"id": "fetch-feeds", "type": "noop", "payload": {"sleep_s": 1.5}},
    {"id": "summarise-news", "type": "noop", "depends_on": ["fetch-feeds"],
     "payload": {"sleep_s": 1.5}},
    {"id": "summarise-mail", "type": "noop", "depends_on": ["fetch-feeds"],
     "payload": {"sleep_s": 2}},
    {"id": "merge", "type": "noop", "depends_on": ["summarise-news", "summarise-mail"],
     "payload": {"sleep_s": 1}},
    {"id": "publish", "type": "noop", "depends_on": ["merge"]},
]}  # fmt: skip
# Nothing claims it: the GPU worker below never asks for work. It keeps the queue busy.
# Its name is markup: the page must show it as text, never build it.
WAITING = {"name": 'needs a GPU <img src=x onerror="window.__xss=1">', "tasks": [
    {"id": "draft", "type": "noop", "task_class": "llm", "model": "llama3.1:8b"},
]}  # fmt: skip


class GpuRig(threading.Thread):
    """A GPU worker of a second rig, as the brain sees it: registration and heartbeats
    whose temperature climbs past the thermal limit (83 °C) and stays there."""

    name_ = "rig2-gpu0"

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        answer = requests.post(f"{url}/v1/workers/register", timeout=10,
            headers={"Authorization": f"Bearer {BOOTSTRAP_TOKEN}"},
            json={"name": self.name_, "classes": ["llm"], "gpu_index": 0,
                  "gpus": [self.gpu(0)], "resident_models": ["qwen2.5:7b"]})  # fmt: skip
        answer.raise_for_status()
        self.headers = {"Authorization": f"Bearer {answer.json()['token']}"}

    @staticmethod
    def gpu(beat: int) -> dict:
        temp = min(61.0 + beat * 1.5, 87.0) + (beat % 3) * 0.5
        return {"index": 0, "name": "NVIDIA GeForce RTX 3090", "vram_total_mb": 24576,
                "vram_free_mb": 24576 - 9800 - (beat % 5) * 120, "temperature_c": temp,
                "power_w": 180.0 + (beat % 7) * 22.0}  # fmt: skip

    def run(self) -> None:
        beat = 0
        while not self.stop.wait(0.3):
            beat += 1
            requests.post(
                f"{self.url}/v1/workers/heartbeat",
                headers=self.headers,
                timeout=5,
                json={"gpus": [self.gpu(beat)], "resident_models": ["qwen2.5:7b"]},
            )


@pytest.fixture
def gate(tmp_path, monkeypatch):
    """02-compute's real models-ready gate handler, on a free port, over two caches."""
    for service, model, size, files in (
        ("ollama", "qwen2.5:0.5b", 397_821_319, 4),
        ("whisper", "Systran/faster-whisper-tiny", 75_538_270, 5),
    ):
        cache = VerifyCache(tmp_path / "caches" / service / ".airig-verified.json")
        cache.mark_model(model, size, files)
        cache.save()
    caches = sorted((tmp_path / "caches").glob("*/.airig-verified.json"))
    monkeypatch.setenv("AIRIG_VERIFY_CACHES", ",".join(map(str, caches)))
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), airig_gate._Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/models"
    server.shutdown()
    server.server_close()


@pytest.fixture
def cluster(tmp_path, gate):
    cluster = Cluster(tmp_path, brain_env={"BRAIN_MODELS_URL": gate})
    cluster.start_brain()
    cluster.start_worker("cpu-1", classes="cpu")
    rig = GpuRig(cluster.url)
    rig.start()
    yield cluster
    rig.stop.set()
    rig.join(timeout=5)
    cluster.stop()


def test_an_operator_watches_the_cluster_and_a_plan_succeed(cluster):
    with chromium() as driver:
        page = Dashboard(driver, cluster.url)
        page.open()
        page.sign_in(ADMIN_TOKEN)
        # A marker that a reload would wipe: every view change must be in-page.
        driver.execute_script("window.__noReload = true")

        # -------- cluster: both workers, the GPU's telemetry, the thermal guard
        page.wait_css('[data-worker="cpu-1"][data-alive="true"]')
        gpu = page.wait_css('[data-worker="rig2-gpu0"] [data-gpu="0"]')
        assert "RTX 3090" in gpu and "/ 24.0 GB" in gpu and " W" in gpu
        warning = page.wait_css('[data-worker="rig2-gpu0"] [data-warning]')
        assert "83" in warning and "claims paused" in warning
        page.wait(lambda _: len(_spark_points(page)) >= 3, what="a sparkline of heartbeats")
        assert page.text("#badge-cluster") == "1"

        # -------- a plan: listed, drawn as a DAG, live until SUCCEEDED
        plan = cluster.submit(PLAN)
        waiting = cluster.submit(WAITING)
        page.wait_css(f'[data-worker="cpu-1"] [data-current^="{plan["id"]}/"]')
        page.screenshot("dashboard.png")
        page.go("plans")
        page.wait_css(f'tr[data-plan="{plan["id"]}"]')
        assert WAITING["name"] in (page.text(f'tr[data-plan="{waiting["id"]}"]') or "")
        assert not page.texts("#view img") and driver.execute_script("return window.__xss") is None
        page.screenshot("dashboard-plans.png")
        page.click(f'tr[data-plan="{plan["id"]}"]')
        page.wait(lambda _: page.attrs(".dag [data-task]", "data-task"), what="the DAG")
        assert set(page.attrs(".dag [data-task]", "data-task")) == {t["id"] for t in PLAN["tasks"]}
        columns = _columns(page)
        assert columns["fetch-feeds"] < columns["summarise-news"] == columns["summarise-mail"]
        assert columns["summarise-mail"] < columns["merge"] < columns["publish"]
        assert len(page.texts(".dag .edge")) == 5
        if _states(page) & {"RUNNING", "LEASED"}:
            page.screenshot("dashboard-plan-running.png")
        page.wait(lambda _: _states(page) == {"SUCCEEDED"}, 60, "every task SUCCEEDED")
        page.wait_css('[data-plan-status="succeeded"]')
        assert len(page.texts("[data-task-row]")) == 5
        page.screenshot("dashboard-plan.png")

        # -------- queue: the task nobody can claim, and its wait against max-wait
        page.go("queue")
        assert page.wait_css('[data-class="llm"] [data-state="READY"]') == "1"
        assert page.text('[data-model="llama3.1:8b"] [data-state="READY"]') == "1"
        gauge = page.text("[data-oldest-wait]") or ""
        assert "of 15m 00s max wait" in gauge and "draft" in gauge
        page.screenshot("dashboard-queue.png")

        # -------- events: filtered by plan and type, then by worker
        page.go("events")
        page.wait_css('[data-filter="plan"]')
        page.type_into('[data-filter="plan"]', plan["id"])
        page.select('[data-filter="type"]', "task_completed")
        page.wait(lambda _: _event_types(page) == ["task_completed"] * 5, what="5 completions")
        page.clear('[data-filter="plan"]')
        page.select('[data-filter="type"]', "")
        page.type_into('[data-filter="worker"]', "rig2-gpu0")
        page.wait(lambda _: "gpu.thermal_block" in _event_types(page), what="the thermal event")
        page.screenshot("dashboard-events.png")

        # -------- models: the gate's verified inventory, sizes and verify times
        page.go("models")
        page.wait_css('[data-models="available"]')
        row = page.text('[data-model="qwen2.5:0.5b"]') or ""
        assert "ollama" in row and "379 MiB" in row and "4" in row
        assert page.text('[data-model="Systran/faster-whisper-tiny"]')
        page.screenshot("dashboard-models.png")

        # -------- the token: in sessionStorage, never in a URL; no reload happened
        assert page.session_token() == ADMIN_TOKEN
        assert not [url for url in page.requested_urls() if ADMIN_TOKEN in url]
        assert driver.execute_script("return window.__noReload") is True
        assert page.console_errors() == []

        # -------- a token the brain refuses: cleared, and the form is back
        driver.execute_script("sessionStorage.setItem('airig.token', 'revoked-token')")
        page.wait(lambda _: page.visible("#login"), what="the token form again")
        assert page.session_token() is None
        assert "did not accept" in (page.text("#login-error") or "")
        requests.post(f"{cluster.url}/v1/plans/{waiting['id']}/cancel", timeout=10,
                      headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})  # fmt: skip


def _spark_points(page: Dashboard) -> list[str]:
    points = page.attrs('[data-worker="rig2-gpu0"] .spark-temp', "points")
    return points[0].split() if points and points[0] else []


def _columns(page: Dashboard) -> dict[str, float]:
    keys = page.attrs(".dag [data-task]", "data-task")
    moves = page.attrs(".dag [data-task]", "transform")
    return {k: float(m.split("(")[1].split(",")[0]) for k, m in zip(keys, moves, strict=True)}


def _states(page: Dashboard) -> set[str]:
    return set(page.attrs(".dag [data-task]", "data-state"))


def _event_types(page: Dashboard) -> list[str]:
    return page.attrs("[data-event]", "data-type")
