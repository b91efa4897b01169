"""A compute outage waits; it does not fail the work (issue 35 §2).

A plan submitted while Ollama is stopped (what `update` or `restart ollama` does for a
minute) must finish once Ollama is back: the worker's "unreachable" goes back to the
queue as an infrastructure condition, never a counted failure, and the brain offers
Ollama's tasks to no worker while its probe says Ollama is down, saying so in the task.
"""

from __future__ import annotations

import time

import pytest
import requests
from brain_procs import Cluster, wait_until
from standins.conftest_helpers import start_standin

MODEL = "qwen2.5:0.5b"


@pytest.fixture
def ollama_models(tmp_path):
    """A models directory holding MODEL, and the port a stopped stand-in listened on."""
    models = tmp_path / "ollama-models"
    standin = start_standin("ollama", models, {"STANDIN_MODEL_BYTES": "4096"})
    body = {"model": MODEL, "stream": False}
    requests.post(f"{standin.url}/api/pull", json=body, timeout=30).raise_for_status()
    standin.stop()
    return models, standin.port


def test_a_plan_submitted_while_ollama_is_stopped_finishes_after_it_starts(tmp_path, ollama_models):
    models, port = ollama_models
    url = f"http://127.0.0.1:{port}"
    env = {
        "BRAIN_PROBE_SERVICES": f"ollama={url}",
        "BRAIN_PROBE_INTERVAL_S": "0.2",
        "BRAIN_PROBE_DOWN_AFTER": "2",
    }
    (tmp_path / "cluster").mkdir()
    cluster = Cluster(tmp_path / "cluster", brain_env=env, services={"OLLAMA_URL": url})
    ollama = None
    try:
        cluster.start_brain()
        cluster.start_worker("gpu0", classes="llm")
        task = {"id": "ask", "type": "llm", "retry_count": 1,
                "payload": {"model": MODEL, "prompt": "hello"}}  # fmt: skip
        plan = cluster.submit({"name": "outage", "tasks": [task]})

        def waiting() -> str | None:
            [row] = cluster.get(f"/v1/plans/{plan['id']}")["tasks"]
            assert row["state"] not in ("FAILED", "SUCCEEDED"), (row, cluster.logs())
            reason = row["reason"] or ""
            return reason if reason.startswith("waiting for ollama: down") else None

        reason = wait_until(waiting, 20, f"the task to say why it waits\n{cluster.logs()}")
        assert "AIRIG_MAX_WAIT_S" in reason
        # Far longer than the task's own retries (0.1 .. 0.5 s apart) would last.
        time.sleep(3)
        assert waiting(), cluster.logs()
        ollama = start_standin("ollama", models, {"STANDIN_MODEL_BYTES": "4096"}, port=port)
        view = cluster.wait_plan(plan["id"], 30)
        assert view["status"] == "succeeded", cluster.logs()

        events = cluster.get(f"/v1/plans/{plan['id']}/events")["events"]
        retries = [e for e in events if e["event_type"] == "task_retry_scheduled"]
        # no failure counted against the task: at most the outage's infra retries
        assert all(e["reason"].startswith("infra error") for e in retries), retries
        assert all("unreachable" in e["error"] for e in retries), retries
        brain_events = [e["event_type"] for e in cluster.get("/v1/events?limit=500")["events"]]
        assert {"service.held", "service.resumed"} <= set(brain_events)
    finally:
        if ollama is not None:
            ollama.stop()
        cluster.stop()
