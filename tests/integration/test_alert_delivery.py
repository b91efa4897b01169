"""Alerts reach a webhook through Apprise (json://): each once, and nothing is lost while
the receiver is down; the brain's claims keep answering meanwhile."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from brain_procs import Cluster, free_port, wait_until


class Receiver:
    """A webhook on 127.0.0.1: answers 503 while ``down``, records what it accepts."""

    def __init__(self) -> None:
        self.port = free_port()
        self.down = False
        self.refused = 0
        self.received: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if receiver.down:
                    receiver.refused += 1
                    self.send_response(503)
                else:
                    receiver.received.append(json.loads(body))
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/alerts"

    def titles(self) -> list[str]:
        return [message["title"] for message in self.received]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.server.shutdown()


@pytest.fixture
def cluster(tmp_path, receiver):
    env = {"AIRIG_ALERT_URLS": receiver.url, "AIRIG_ALERT_QUEUE_DEPTH": "0"}
    made = Cluster(tmp_path, brain_env=env)
    yield made
    made.stop()


FIRED = "airig ALERT: queue_depth queue"
CLEARED = "airig cleared: queue_depth queue"


def noop_plan() -> dict:
    return {"name": "alerts", "tasks": [{"id": "a", "type": "noop"}]}


def alert_events(cluster: Cluster) -> list[str]:
    events = cluster.get("/v1/events?limit=200")["events"]
    return [e["event_type"] for e in reversed(events) if e["event_type"].startswith("alert_")]


def test_each_alert_arrives_once(cluster, receiver):
    cluster.start_brain()
    plan = cluster.submit(noop_plan())  # one READY task is over a threshold of 0
    wait_until(lambda: receiver.titles() == [FIRED], 20, f"the firing\n{cluster.logs()}")
    cluster.start_worker("w1")
    cluster.wait_plan(plan["id"], 30)
    wait_until(lambda: len(receiver.received) >= 2, 20, f"the clear\n{cluster.logs()}")
    assert receiver.titles() == [FIRED, CLEARED]
    assert alert_events(cluster) == ["alert_fired", "alert_cleared"]


def test_a_receiver_that_is_down_gets_the_alerts_later(cluster, receiver):
    receiver.down = True
    cluster.start_brain()
    plan = cluster.submit(noop_plan())
    wait_until(lambda: receiver.refused >= 2, 20, f"two refused deliveries\n{cluster.logs()}")
    # delivery is retrying: the worker's claims are still answered and the plan finishes
    cluster.start_worker("w1")
    assert cluster.wait_plan(plan["id"], 30)["status"] == "succeeded"
    wait_until(lambda: alert_events(cluster) == ["alert_fired", "alert_cleared"], 20, "events")
    assert receiver.received == []
    receiver.down = False
    wait_until(lambda: len(receiver.received) >= 2, 30, f"late delivery\n{cluster.logs()}")
    assert receiver.titles() == [FIRED, CLEARED]  # in order, nothing lost, none twice


def test_ollama_quietly_on_cpu_then_down_reaches_people_once_each(tmp_path, receiver):
    """The brain probes the compute services: a stand-in Ollama `up` put on a GPU that
    answers /api/ps with size_vram 0 raises gpu_fallback; the same service gone raises
    service_down; back (and on the GPU) both clear. Each arrives once."""
    from standins.conftest_helpers import start_standin

    models = tmp_path / "ollama-models"
    ollama = start_standin("ollama", models, {"STANDIN_MODEL_BYTES": "4096"})
    model = "qwen2.5:0.5b"
    pulled = requests.post(f"{ollama.url}/api/pull", json={"model": model, "stream": False})
    pulled.raise_for_status()
    requests.post(f"{ollama.url}/api/generate", json={"model": model, "keep_alive": "5m"})
    env = {
        "AIRIG_ALERT_URLS": receiver.url,
        "BRAIN_PROBE_SERVICES": f"ollama={ollama.url}",
        "AIRIG_GPU_SERVICES": "ollama",
        "BRAIN_PROBE_INTERVAL_S": "0.2",
        "BRAIN_PROBE_DOWN_AFTER": "3",
    }
    (tmp_path / "cluster").mkdir()
    cluster = Cluster(tmp_path / "cluster", brain_env=env)
    try:
        cluster.start_brain()
        fired = "airig ALERT: gpu_fallback ollama"
        wait_until(lambda: fired in receiver.titles(), 20, f"gpu_fallback\n{cluster.logs()}")
        [message] = [m for m in receiver.received if m["title"] == fired]
        assert "size_vram 0" in message["message"] and "triage ollama" in message["message"]
        ollama.stop()  # what a crash loop looks like from the network
        down = "airig ALERT: service_down ollama"
        wait_until(lambda: down in receiver.titles(), 20, f"service_down\n{cluster.logs()}")
        # back, with the model in VRAM this time (the same models directory)
        ollama = start_standin("ollama", models, {"STANDIN_VRAM_FRACTION": "1"}, port=ollama.port)
        requests.post(f"{ollama.url}/api/generate", json={"model": model, "keep_alive": "5m"})
        cleared = {"airig cleared: service_down ollama", "airig cleared: gpu_fallback ollama"}
        wait_until(lambda: cleared <= set(receiver.titles()), 20, f"clears\n{cluster.logs()}")
        titles = receiver.titles()
        assert sorted(titles) == sorted([fired, down, *cleared])  # each once
    finally:
        ollama.stop()
        cluster.stop()
