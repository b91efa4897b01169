"""A model swap end to end: the brain decides it at claim time, a real worker process runs
it against the Ollama stand-in, and the brain turns the report into events and costs.

A recording proxy sits between the worker and the stand-in, so the test sees every
request in the order Ollama received it and what each /api/ps answered.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from brain_procs import Cluster, wait_until
from standins.conftest_helpers import start_standin

OLD, NEW = "qwen2.5:0.5b", "llama3.2:1b"
LOAD_S = 0.5


class Recorder(BaseHTTPRequestHandler):
    """Forwards to the stand-in; notes (method, path, body, models listed by /api/ps)."""

    upstream = ""
    seen: list[tuple[str, str, dict, list[str] | None]] = []

    def log_message(self, *args) -> None:
        pass

    def _forward(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer = requests.request(
            self.command, self.upstream + self.path, data=raw or None, timeout=30,
            headers={"Content-Type": self.headers.get("Content-Type", "application/json")},
        )  # fmt: skip
        listed = None
        if self.path.startswith("/api/ps"):
            listed = [m["name"] for m in answer.json()["models"]]
        self.seen.append((self.command, self.path, json.loads(raw or b"{}"), listed))
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_DELETE = _forward  # noqa: N815


@pytest.fixture
def ollama(tmp_path):
    standin = start_standin(
        "ollama", tmp_path / "models",
        {"STANDIN_MODEL_BYTES": "4096", "STANDIN_LOAD_SECONDS": str(LOAD_S)},
    )  # fmt: skip
    for model in (OLD, NEW):
        body = {"model": model, "stream": False}
        requests.post(f"{standin.url}/api/pull", json=body, timeout=30).raise_for_status()
    # OLD is resident before the worker starts, as a GPU's model from an earlier task.
    body = {"model": OLD, "keep_alive": -1}
    requests.post(f"{standin.url}/api/generate", json=body, timeout=30).raise_for_status()
    Recorder.upstream, Recorder.seen = standin.url, []
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{proxy.server_address[1]}"
    proxy.shutdown()
    standin.stop()


@pytest.fixture
def cluster(tmp_path, ollama):
    # min_resident 0: OLD was first seen at this claim and may be evicted at once.
    made = Cluster(tmp_path, brain_env={"AIRIG_MIN_RESIDENT_S": "0"},
                   services={"OLLAMA_URL": ollama})  # fmt: skip
    made.start_brain()
    yield made
    made.stop()


def generate_calls(seen) -> list[tuple[int, str, object]]:
    """(position, model, keep_alive) of every /api/generate the stand-in received."""
    return [
        (i, body.get("model"), body.get("keep_alive"))
        for i, (_, path, body, _) in enumerate(seen)
        if path == "/api/generate"
    ]


def test_a_gpu_worker_evicts_the_resident_model_before_loading_the_next(cluster):
    cluster.start_worker("gpu0", classes="llm")
    task = {"id": "ask", "type": "llm", "payload": {"model": NEW, "prompt": "hello there"}}
    plan = cluster.submit({"name": "swap", "tasks": [task]})
    view = cluster.wait_plan(plan["id"], 60)
    assert view["status"] == "succeeded", cluster.logs()

    seen = Recorder.seen
    calls = generate_calls(seen)
    unload = next(i for i, model, keep in calls if model == OLD and keep == 0)
    load = next(i for i, model, keep in calls if model == NEW and keep == -1)
    assert all(i > unload for i, model, _ in calls if model == NEW)  # nothing of NEW before
    confirmed = [i for i, (_, path, _, listed) in enumerate(seen)
                 if path == "/api/ps" and listed is not None and OLD not in listed]  # fmt: skip
    assert any(unload < i < load for i in confirmed), seen

    events = cluster.get(f"/v1/plans/{plan['id']}/events")["events"]
    leased = next(e for e in events if e["event_type"] == "task_leased")
    assert (leased["load"], leased["evict"]) == (NEW, [OLD])
    [unloaded] = [e for e in events if e["event_type"] == "model.unload"]
    [loaded] = [e for e in events if e["event_type"] == "model.load"]
    assert unloaded["model"] == OLD and isinstance(unloaded["duration_ms"], int)
    assert loaded["model"] == NEW and loaded["duration_ms"] >= LOAD_S * 1000 * 0.9
    # The learned cost is the measured load, no longer the 15 s guessed from "1b".
    assert loaded["reload_cost_s"] == pytest.approx(loaded["duration_ms"] / 1000, abs=0.01)

    def resident() -> list[str] | None:  # as the worker's next heartbeat reports it
        [worker] = [w for w in cluster.get("/v1/workers")["workers"] if w["name"] == "gpu0"]
        return worker["resident_models"] if OLD not in worker["resident_models"] else None

    assert NEW in wait_until(resident, 15, "the heartbeat to report the new resident set")
