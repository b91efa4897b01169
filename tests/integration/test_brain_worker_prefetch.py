"""A worker holding tasks ahead (AIRIG_WORKER_PREFETCH): stop releases them, a kill retries."""

from __future__ import annotations

import pytest
from brain_procs import Cluster, wait_until

PREFETCH = {"AIRIG_WORKER_PREFETCH": "4"}


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path)
    yield made
    made.stop()


# The slow task runs until the test opens the gate (a file in the shared data folder): the
# worker holds the quick ones for as long as the test needs, however slow the machine.
GATE = "gate-open"
WAIT_FOR_GATE = f"while [ ! -e {GATE} ]; do sleep 0.05; done"


def plan_of_four(cluster):
    """One slow task the worker runs, three quick ones it holds leased meanwhile."""
    slow = {"command": WAIT_FOR_GATE}
    tasks = [{"id": "slow", "type": "shell", "priority": 9, "payload": slow}]
    tasks += [{"id": f"q{i}", "type": "noop", "payload": {}} for i in range(3)]
    return cluster.submit({"name": "held", "tasks": tasks})["id"]


def open_gate(cluster):
    (cluster.root / "data" / GATE).touch()


def held_by(cluster, plan_id, worker_id):
    tasks = cluster.get(f"/v1/plans/{plan_id}")["tasks"]
    return {t["id"]: t["state"] for t in tasks if t["worker_id"] == worker_id}


def test_a_graceful_stop_releases_the_tasks_held_ahead(cluster):
    cluster.start_brain()
    first = cluster.start_worker("w-first", **PREFETCH)
    plan = plan_of_four(cluster)
    wait_until(lambda: held_by(cluster, plan, "w-first").get("q2") == "LEASED", 15, "prefetch")
    assert first.stop() == 0  # the slow task outlives the stop grace: released too
    events = cluster.get(f"/v1/plans/{plan}/events")["events"]
    released = {e["task_id"] for e in events if e["event_type"] == "task_released"}
    assert {"slow", "q0", "q1", "q2"} <= released
    open_gate(cluster)
    cluster.start_worker("w-second", **PREFETCH)
    assert cluster.wait_plan(plan, 30)["status"] == "succeeded"
    assert cluster.completions(plan) == {"slow": 1, "q0": 1, "q1": 1, "q2": 1}


def test_tasks_held_by_a_killed_worker_run_again_elsewhere(cluster):
    cluster.start_brain()
    doomed = cluster.start_worker("w-doomed", **PREFETCH)
    plan = plan_of_four(cluster)
    wait_until(lambda: held_by(cluster, plan, "w-doomed").get("q2") == "LEASED", 15, "prefetch")
    doomed.kill()
    open_gate(cluster)
    cluster.start_worker("w-rescue", **PREFETCH)
    view = cluster.wait_plan(plan, 30)
    assert view["status"] == "succeeded"
    assert {t["worker_id"] for t in view["tasks"]} == {"w-rescue"}
    assert cluster.completions(plan) == {"slow": 1, "q0": 1, "q1": 1, "q2": 1}
    events = cluster.get(f"/v1/plans/{plan}/events")["events"]
    assert any(e["error"] and "stopped renewing" in e["error"] for e in events)
