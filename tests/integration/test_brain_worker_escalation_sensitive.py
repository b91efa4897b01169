"""Nothing derived from a sensitive task leaves through a handoff (issue 23 §1), with
real processes: a brain, a worker, the real gateway and the provider stand-in
(tests/standins/provider/). The issue's reproduction (an `escalate: always` task that
only lists the sensitive task upstream) is refused at submission; a task that comes to
wait for the sensitive data only when its plan grows (the external tier's breakdown
reads the secret) fails unsent; the provider never receives the secret. The flow the
author allowed (`allow_external` on the escalating task) is sent."""

from __future__ import annotations

import json

import requests
from brain_procs import ADMIN, Cluster
from standins.conftest_helpers import start_standin
from standins.provider.control import ProviderControl
from standins.provider.gateway import gateway_base_url, start_gateway

SECRET = "PASSWORD=hunter2-TOPSECRET"


def task_of(cluster: Cluster, plan_id: str, key: str) -> dict:
    return next(t for t in cluster.get(f"/v1/plans/{plan_id}")["tasks"] if t["id"] == key)


def test_the_provider_never_receives_what_a_sensitive_task_made(tmp_path):
    provider = start_standin("provider", tmp_path / "provider")
    control = ProviderControl(provider.url)
    gateway = start_gateway(tmp_path / "gw", "openai", gateway_base_url("openai", provider.url))
    cluster = Cluster(tmp_path / "rig", brain_env={
        "AIRIG_ESCALATION": "on", "AIRIG_GATEWAY_URL": gateway.url,
        "AIRIG_GATEWAY_TOKEN": gateway.token,
    })  # fmt: skip
    (tmp_path / "rig").mkdir()
    try:
        cluster.start_brain()
        cluster.start_worker("w-sens")
        secret = {"id": "secret", "type": "noop", "sensitive": True, "payload": {"echo": SECRET}}

        # The reproduction: refused, one line saying what to set.
        chain = {"name": "leak", "tasks": [
            secret,
            {"id": "plain", "type": "noop", "depends_on": ["secret"]},
            {"id": "send", "type": "noop", "depends_on": ["plain"], "escalate": "always"},
        ]}  # fmt: skip
        answer = requests.post(f"{cluster.url}/v1/plans", headers=ADMIN, json=chain, timeout=10)
        assert answer.status_code == 422, answer.text
        assert "allow_external" in answer.text and "'secret'" in answer.text

        # Accepted (nothing sensitive upstream of `after` yet), then the external tier
        # breaks `split` down into a task reading the secret, which `after` waits for.
        control.answers(json.dumps({"subtasks": [
            {"id": "use", "type": "noop", "depends_on": ["secret"],
             "payload": {"echo": "{{ tasks.secret.output.echo }}"}},
        ]}))  # fmt: skip
        grown = cluster.submit({"name": "grown", "tasks": [
            secret,
            {"id": "split", "type": "noop", "escalate": "always"},
            {"id": "after", "type": "noop", "depends_on": ["split"], "escalate": "always"},
        ]})  # fmt: skip
        assert cluster.wait_plan(grown["id"], 40)["status"] == "failed", cluster.logs()
        assert task_of(cluster, grown["id"], "split__use")["state"] == "SUCCEEDED"
        after = task_of(cluster, grown["id"], "after")
        assert after["state"] == "FAILED" and "split__use" in after["error"], after
        [call] = control.calls()  # `split`'s own handoff, and nothing for `after`
        assert SECRET not in json.dumps(call["body"])

        # The flow the author allowed on the task that sends it does go.
        control.answers(json.dumps({"answer": "seen"}))
        allowed = cluster.submit({"name": "allowed", "tasks": [
            secret,
            {"id": "send", "type": "noop", "depends_on": ["secret"], "escalate": "always",
             "allow_external": True},
        ]})  # fmt: skip
        assert cluster.wait_plan(allowed["id"], 40)["status"] == "succeeded", cluster.logs()
        assert SECRET in json.dumps(control.calls()[-1]["body"])
    finally:
        cluster.stop()
        gateway.stop()
        provider.stop()
