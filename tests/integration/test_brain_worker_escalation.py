"""Escalation with real processes: a brain, a worker running noop tasks, and a gateway on
loopback (``fake_gateway.py``, which honours the brain's contract and records what it
was sent). A task fails twice on the worker and is escalated; the handoff holds both
attempts; the answer lands as its result; a breakdown runs on the worker; a gateway that
is down leaves the task waiting until it is back; the budget stops a call; a brain killed
mid-call sends it again under the same request id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from brain_procs import ADMIN, ADMIN_TOKEN, REPO, Cluster, wait_until
from fake_gateway import FakeGateway

GATEWAY_TOKEN = "integration-gateway-token"


def escalating_env(gateway: FakeGateway, **extra: str) -> dict[str, str]:
    return {
        "AIRIG_ESCALATION": "on", "AIRIG_GATEWAY_URL": gateway.url,
        "AIRIG_GATEWAY_TOKEN": GATEWAY_TOKEN, "AIRIG_ESCALATION_BUDGET_DAILY": "2",
        **extra,
    }  # fmt: skip


@pytest.fixture
def gateway():
    made = FakeGateway(GATEWAY_TOKEN).start()
    yield made
    made.stop()


@pytest.fixture
def cluster(tmp_path, gateway):
    made = Cluster(tmp_path, brain_env=escalating_env(gateway))
    yield made
    made.stop()


def task_of(cluster: Cluster, plan_id: str, key: str) -> dict:
    return next(t for t in cluster.get(f"/v1/plans/{plan_id}")["tasks"] if t["id"] == key)


def result_of(cluster: Cluster, plan_id: str, key: str) -> dict:
    answer = requests.get(
        f"{cluster.url}/v1/plans/{plan_id}/tasks/{key}/result", headers=ADMIN, timeout=10
    )
    answer.raise_for_status()
    return answer.json()["output"]


def waits_with(cluster: Cluster, plan_id: str, key: str, words: str) -> dict | None:
    task = task_of(cluster, plan_id, key)
    return task if task["state"] == "ESCALATED" and words in (task["reason"] or "") else None


def splitting(body: dict) -> str:
    if "split me" in body["messages"][0]["content"]:
        return json.dumps({"subtasks": [
            {"id": "p1", "type": "noop", "payload": {"echo": "part 1"}},
            {"id": "p2", "type": "noop", "depends_on": ["p1"],
             "payload": {"echo": "{{ tasks.p1.output.echo }} and part 2"}},
        ]})  # fmt: skip
    return json.dumps({"answer": "from outside"})


def test_escalation_end_to_end(cluster, gateway):
    cluster.start_brain()
    cluster.start_worker("w-esc")
    gateway.script = splitting
    failing = {"fail": {"error_type": "boom", "message": "too hard locally"}}
    plan = cluster.submit({"name": "hard", "tasks": [
        {"id": "hard", "type": "noop", "escalate": "on_failure", "payload": failing},
        {"id": "after", "type": "noop", "depends_on": ["hard"],
         "payload": {"echo": "{{ tasks.hard.output }}"}},
    ]})  # fmt: skip
    view = cluster.wait_plan(plan["id"], 30)
    assert view["status"] == "succeeded", cluster.logs()
    hard = task_of(cluster, plan["id"], "hard")
    assert hard["attempt"] == 2 and hard["tainted_output"] is True
    assert result_of(cluster, plan["id"], "hard") == {"text": "from outside"}
    assert result_of(cluster, plan["id"], "after")["echo"] == "from outside"
    # The handoff: the task, and both local attempts with their errors.
    [sent] = gateway.requests
    content = sent["messages"][0]["content"]
    assert "attempt 1 on worker" in content and "attempt 2 on worker" in content
    # the payload as the plan wrote it, then each attempt's error
    assert content.count("too hard locally") == 3 and sent["json"] is True

    # A breakdown: the subtasks run on the worker, in order.
    split = cluster.submit({"name": "split", "tasks": [
        {"id": "split", "type": "noop", "escalate": "always", "payload": {"echo": "split me"}},
    ]})  # fmt: skip
    assert cluster.wait_plan(split["id"], 30)["status"] == "succeeded", cluster.logs()
    assert result_of(cluster, split["id"], "split__p2")["echo"] == "part 1 and part 2"
    done = cluster.completions(split["id"])
    assert done == {"split": 1, "split__p1": 1, "split__p2": 1}
    ran_on = {
        e["task_id"]: e["worker_id"]
        for e in cluster.get(f"/v1/plans/{split['id']}/events")["events"]
        if e["event_type"] == "task_completed"
    }
    assert ran_on["split__p1"] and ran_on["split__p2"] and ran_on["split"] is None

    # The gateway is down: the task waits, visibly, and finishes when it is back.
    port = gateway.port
    gateway.stop()
    down = cluster.submit({"name": "down", "tasks": [
        {"id": "later", "type": "noop", "escalate": "always"},
    ]})  # fmt: skip
    wait_until(lambda: waits_with(cluster, down["id"], "later", "unreachable"), 15,
               f"the task to wait for the gateway\n{cluster.logs()}")  # fmt: skip
    back = FakeGateway(GATEWAY_TOKEN, port=port).start()
    try:
        assert cluster.wait_plan(down["id"], 30)["status"] == "succeeded"
    finally:
        back.stop()
    gateway.port = port
    gateway.start()  # for the budget part, on the same port

    # The budget: a call that cost 3.6 (1.2 M tokens in) passes the daily 2; the next waits.
    gateway.usage = (1_200_000, 0)
    first = cluster.submit({"name": "b1", "tasks": [{"id": "x", "type": "noop",
                                                     "escalate": "always"}]})  # fmt: skip
    assert cluster.wait_plan(first["id"], 30)["status"] == "succeeded"
    sent_before = len(gateway.requests)
    second = cluster.submit({"name": "b2", "tasks": [{"id": "y", "type": "noop",
                                                      "escalate": "always"}]})  # fmt: skip
    wait_until(lambda: waits_with(cluster, second["id"], "y", "over daily budget"), 15,
               "the budget to stop the call")  # fmt: skip
    assert len(gateway.requests) == sent_before
    ledger = cluster.get("/v1/escalations")
    assert ledger["budget"]["spent_today"] >= 3.6 and ledger["enabled"] is True
    assert [w["key"] for w in ledger["waiting"]] == ["y"]
    assert {c["state"] for c in ledger["calls"]} == {"answered", "over_budget"}
    metrics = requests.get(f"{cluster.url}/metrics", headers=ADMIN, timeout=10).text
    assert 'airig_escalation_calls_total{outcome="answer"} 3.0' in metrics
    assert 'airig_escalation_calls_total{outcome="breakdown"} 1.0' in metrics
    assert "airig_escalation_cost_total" in metrics

    # The CLI shows the same.
    env = {**os.environ, "BRAIN_URL": cluster.url, "BRAIN_ADMIN_TOKEN": ADMIN_TOKEN}
    shown = subprocess.run(
        [sys.executable, "start_services.py", "escalations"], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "Spent today (UTC): 3.6" in shown.stdout and "over daily budget" in shown.stdout


def test_a_call_in_flight_when_the_brain_dies_is_sent_again_with_its_id(cluster, gateway):
    cluster.start_brain()
    gateway.hold.set()
    plan = cluster.submit({"name": "restart", "tasks": [
        {"id": "a", "type": "noop", "escalate": "always"},
    ]})  # fmt: skip
    wait_until(lambda: len(gateway.requests) == 1, 15, "the call to be sent")
    assert cluster.brain is not None
    cluster.brain.kill()
    cluster.start_brain()
    wait_until(lambda: len(gateway.requests) == 2, 15, f"the call again\n{cluster.logs()}")
    gateway.hold.clear()
    assert cluster.wait_plan(plan["id"], 30)["status"] == "succeeded"
    first, again = gateway.requests
    assert first["request_id"] == again["request_id"] and first["messages"] == again["messages"]
    [call] = cluster.get("/v1/escalations")["calls"]
    assert (call["attempts"], call["state"]) == (2, "answered")


def test_escalation_off_fails_the_task_with_that_reason(tmp_path, gateway):
    cluster = Cluster(tmp_path)  # AIRIG_ESCALATION unset: off
    try:
        cluster.start_brain()
        cluster.start_worker("w-off")
        plan = cluster.submit({"name": "off", "tasks": [
            {"id": "a", "type": "noop", "escalate": "on_failure", "retry_count": 1,
             "payload": {"fail": {"error_type": "boom"}}},
            {"id": "b", "type": "noop", "escalate": "always"},
        ]})  # fmt: skip
        assert cluster.wait_plan(plan["id"], 30)["status"] == "failed"
        a, b = task_of(cluster, plan["id"], "a"), task_of(cluster, plan["id"], "b")
        assert "escalation is off" in a["reason"] and "escalation is off" in b["error"]
        assert gateway.requests == []
    finally:
        cluster.stop()


def test_the_brain_models_verdict_escalates_after_one_failure(tmp_path, gateway):
    """AIRIG_ESCALATION_REVIEW=on: the Ollama stand-in, as the brain's model, judges the
    first failure worth the external tier; the task goes after one local attempt."""
    from standins.conftest_helpers import start_standin

    script = tmp_path / "script.json"
    script.write_text(json.dumps([json.dumps({"escalate": True, "why": "too hard here"})]))
    model = "qwen2.5:0.5b"
    ollama = start_standin(
        "ollama", tmp_path / "ollama",
        {"STANDIN_MODEL_BYTES": "4096", "STANDIN_SCRIPT": str(script)},
    )  # fmt: skip
    requests.post(
        f"{ollama.url}/api/pull", json={"model": model, "stream": False}, timeout=30
    ).raise_for_status()
    cluster = Cluster(tmp_path / "rig", brain_env=escalating_env(
        gateway, AIRIG_ESCALATION_REVIEW="on", BRAIN_OLLAMA_URL=ollama.url,
        AIRIG_PLANNER_MODEL=model,
    ))  # fmt: skip
    (tmp_path / "rig").mkdir()
    try:
        cluster.start_brain()
        cluster.start_worker("w-review", WORKER_RETRY_CAP_S="0.5")
        failing = {"fail": {"error_type": "boom", "message": "rambled off topic"}}
        plan = cluster.submit({"name": "review", "tasks": [
            # a long enough local backoff that the verdict comes before a second attempt
            {"id": "a", "type": "noop", "escalate": "on_failure", "payload": failing},
        ]})  # fmt: skip
        assert cluster.wait_plan(plan["id"], 30)["status"] == "succeeded", cluster.logs()
        task = task_of(cluster, plan["id"], "a")
        assert task["attempt"] == 1 and result_of(cluster, plan["id"], "a")
        events = cluster.get(f"/v1/plans/{plan['id']}/events")["events"]
        [reviewed] = [e for e in events if e["event_type"] == "task_reviewed"]
        assert (reviewed["verdict"], reviewed["why"]) == (True, "too hard here")
        asked = [json.loads(line) for line in Path(f"{script}.requests").read_text().splitlines()]
        assert "rambled off topic" in json.dumps(asked[0])
        [sent] = gateway.requests
        assert "the brain's model judged it: too hard here" in sent["messages"][0]["content"]
    finally:
        cluster.stop()
        ollama.stop()
