"""Escalation through the real gateway (airig/gateway/) to the provider stand-in
(tests/standins/provider/), each API the gateway speaks: a noop task fails twice on a
real worker and is escalated; the provider received both attempts; the answer lands as
the result; a breakdown runs on the worker; a provider that is down leaves the task
waiting until it is back; the budget stops a call; the provider's key is nowhere in the
brain's or the worker's environment, logs, events or database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
from brain_procs import ADMIN, Cluster, wait_until
from standins.conftest_helpers import start_standin
from standins.provider.control import DEFAULT_KEY, ProviderControl
from standins.provider.gateway import gateway_base_url, start_gateway


def task_of(cluster: Cluster, plan_id: str, key: str) -> dict:
    return next(t for t in cluster.get(f"/v1/plans/{plan_id}")["tasks"] if t["id"] == key)


def output_of(cluster: Cluster, plan_id: str, key: str) -> dict:
    answer = requests.get(
        f"{cluster.url}/v1/plans/{plan_id}/tasks/{key}/result", headers=ADMIN, timeout=10
    )
    answer.raise_for_status()
    return answer.json()["output"]


def waits_with(cluster: Cluster, plan_id: str, key: str, words: str) -> dict | None:
    task = task_of(cluster, plan_id, key)
    return task if task["state"] == "ESCALATED" and words in (task["reason"] or "") else None


def environ(pid: int) -> str:
    return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_escalation_through_the_gateway(tmp_path, api):
    provider = start_standin("provider", tmp_path / "provider")
    control = ProviderControl(provider.url)
    gateway = start_gateway(tmp_path / "gw", api, gateway_base_url(api, provider.url))
    cluster = Cluster(tmp_path / "rig", brain_env={
        "AIRIG_ESCALATION": "on", "AIRIG_GATEWAY_URL": gateway.url,
        "AIRIG_GATEWAY_TOKEN": gateway.token,
    })  # fmt: skip
    (tmp_path / "rig").mkdir()
    try:
        cluster.start_brain()
        cluster.start_worker("w-gw")
        control.answers(json.dumps({"answer": "from the stand-in"}))
        failing = {"fail": {"error_type": "boom", "message": "too hard locally"}}
        plan = cluster.submit({"name": "hard", "tasks": [
            {"id": "hard", "type": "noop", "escalate": "on_failure", "payload": failing},
        ]})  # fmt: skip
        assert cluster.wait_plan(plan["id"], 40)["status"] == "succeeded", cluster.logs()
        assert output_of(cluster, plan["id"], "hard") == {"text": "from the stand-in"}
        [call] = control.calls()
        assert call["auth"] == "ok"  # the gateway did send the key
        sent = json.dumps(call["body"])
        assert "attempt 1 on worker" in sent and "attempt 2 on worker" in sent

        # A breakdown runs on the worker.
        control.answers(json.dumps({"subtasks": [
            {"id": "p1", "type": "noop", "payload": {"echo": "part 1"}},
            {"id": "p2", "type": "noop", "depends_on": ["p1"],
             "payload": {"echo": "{{ tasks.p1.output.echo }} and part 2"}},
        ]}))  # fmt: skip
        split = cluster.submit({"name": "split", "tasks": [
            {"id": "s", "type": "noop", "escalate": "always"},
        ]})  # fmt: skip
        assert cluster.wait_plan(split["id"], 40)["status"] == "succeeded", cluster.logs()
        assert output_of(cluster, split["id"], "s__p2")["echo"] == "part 1 and part 2"

        # The provider is down: the task waits (the gateway says 502, retryable), then ends.
        control.mode("down")
        down = cluster.submit({"name": "down", "tasks": [
            {"id": "later", "type": "noop", "escalate": "always"},
        ]})  # fmt: skip
        wait_until(lambda: waits_with(cluster, down["id"], "later", "gateway HTTP 502"), 20,
                   f"the task to wait for the provider\n{cluster.logs()}")  # fmt: skip
        control.mode("up")
        control.answers(json.dumps({"answer": "back again"}))
        assert cluster.wait_plan(down["id"], 40)["status"] == "succeeded", cluster.logs()
        assert output_of(cluster, down["id"], "later") == {"text": "back again"}

        # The budget: a brain restarted with a budget below one call's estimate waits.
        assert cluster.brain is not None
        cluster.brain.stop()
        cluster.brain_env["AIRIG_ESCALATION_BUDGET_DAILY"] = "0.01"
        cluster.start_brain()
        calls_before = len(control.calls())
        poor = cluster.submit({"name": "poor", "tasks": [
            {"id": "y", "type": "noop", "escalate": "always"},
        ]})  # fmt: skip
        wait_until(lambda: waits_with(cluster, poor["id"], "y", "over daily budget"), 20,
                   f"the budget to stop the call\n{cluster.logs()}")  # fmt: skip
        assert len(control.calls()) == calls_before
        ledger = cluster.get("/v1/escalations")
        spent = [c for c in ledger["calls"] if c["state"] == "answered"]
        assert len(spent) == 3 and all(c["input_tokens"] > 0 and c["cost"] > 0 for c in spent)
        assert {c["provider"] for c in spent} == {api}

        # The key: nowhere on the brain's or the worker's side.
        assert cluster.brain is not None
        pids = [cluster.brain.process.pid, cluster.workers["w-gw"].process.pid]
        rig = tmp_path / "rig"
        texts = [environ(pid) for pid in pids] + [
            path.read_bytes().decode(errors="replace")
            for path in rig.rglob("*") if path.is_file()
        ]  # fmt: skip
        assert len(texts) > 4
        assert not [t for t in texts if DEFAULT_KEY in t]
    finally:
        cluster.stop()
        gateway.stop()
        provider.stop()
