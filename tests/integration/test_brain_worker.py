"""Brain and worker processes on loopback: fencing, a killed worker, a killed brain."""

from __future__ import annotations

import time

import pytest
import requests
from brain_procs import ADMIN, BOOTSTRAP_TOKEN, Cluster, spawn, wait_until


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path)
    yield made
    made.stop()


def noop(task_id, deps=(), **payload):
    return {"id": task_id, "type": "noop", "depends_on": list(deps), "payload": payload}


def test_brain_and_worker_health_checks(cluster):
    cluster.start_brain()
    assert cluster.get("/health")["status"] == "ok"
    worker = cluster.start_worker("w-check")
    env = {"WORKER_STATE_FILE": str(cluster.root / "w-check.state.json")}
    check = spawn("airig.worker", "check", env, cluster.root, ("--check",))
    assert check.process.wait(timeout=20) == 0, check.log()
    brain_check = spawn(
        "airig.brain", "brain-check", {"BRAIN_LISTEN_PORT": str(cluster.port)}, cluster.root,
        ("--check",),
    )  # fmt: skip
    assert brain_check.process.wait(timeout=20) == 0, brain_check.log()
    missing = {"WORKER_STATE_FILE": str(cluster.root / "nothing.json")}
    assert spawn("airig.worker", "c2", missing, cluster.root, ("--check",)).process.wait(20) == 1
    assert worker.stop() == 0  # SIGTERM is a clean stop


def test_a_stale_report_gets_409(cluster):
    cluster.start_brain()
    registered = requests.post(
        f"{cluster.url}/v1/workers/register",
        headers={"Authorization": f"Bearer {BOOTSTRAP_TOKEN}"},
        json={"name": "manual", "classes": ["cpu"]}, timeout=10,
    ).json()  # fmt: skip
    me = {"Authorization": f"Bearer {registered['token']}"}
    plan = cluster.submit({"name": "stale", "tasks": [noop("a")]})
    task = requests.post(
        f"{cluster.url}/v1/claims", headers=me, json={"wait_s": 5}, timeout=10
    ).json()
    lease = {"attempt": task["attempt"], "lease_id": task["lease_id"]}
    # No heartbeats: the lease (2 s) expires and the reaper moves the task on.
    wait_until(
        lambda: cluster.get(f"/v1/plans/{plan['id']}")["tasks"][0]["state"] != "LEASED",
        10, "the lease to expire",
    )  # fmt: skip
    late = requests.post(
        f"{cluster.url}/v1/tasks/{task['task_id']}/complete", headers=me,
        json={**lease, "output": {"text": "too late"}}, timeout=10,
    )  # fmt: skip
    assert late.status_code == 409
    assert (
        "airig_stale_reports_rejected_total 1.0"
        in requests.get(f"{cluster.url}/metrics", headers=ADMIN, timeout=10).text
    )


def test_a_worker_killed_mid_task_completes_once_elsewhere(cluster):
    cluster.start_brain()
    first = cluster.start_worker("w-doomed")
    plan = cluster.submit({"name": "kill-worker", "tasks": [noop("slow", sleep_s=3)]})
    wait_until(
        lambda: cluster.get(f"/v1/plans/{plan['id']}")["tasks"][0]["state"] == "RUNNING",
        15, "the task to start",
    )  # fmt: skip
    first.kill()
    cluster.start_worker("w-rescue")
    view = cluster.wait_plan(plan["id"], 30)
    task = view["tasks"][0]
    assert (view["status"], task["worker_id"], task["attempt"]) == ("succeeded", "w-rescue", 2)
    assert cluster.completions(plan["id"]) == {"slow": 1}


def test_the_brain_killed_mid_plan_restarts_and_the_plan_completes(cluster):
    cluster.start_brain()
    for name in ("w1", "w2"):
        cluster.start_worker(name)
    tasks = [noop(f"t{i}", sleep_s=0.3) for i in range(8)]
    tasks += [noop("join", [f"t{i}" for i in range(8)]), noop("last", ["join"], sleep_s=0.2)]
    plan = cluster.submit({"name": "kill-brain", "tasks": tasks})
    wait_until(
        lambda: cluster.get(f"/v1/plans/{plan['id']}")["counts"].get("SUCCEEDED", 0) >= 2,
        20, "some tasks to finish",
    )  # fmt: skip
    cluster.brain.kill()
    cluster.start_brain()  # same database and results
    view = cluster.wait_plan(plan["id"], 60)
    assert view["status"] == "succeeded", view
    assert cluster.completions(plan["id"]) == {t["id"]: 1 for t in tasks}


def _running(cluster, plan_id, worker):
    """RUNNING at the brain and begun by the worker: a claim starts the attempt at the
    brain before the worker has read the answer (a stop then releases it unrun)."""
    state = cluster.get(f"/v1/plans/{plan_id}")["tasks"][0]["state"]
    return state == "RUNNING" and "attempt started" in worker.log()


def test_sigterm_finishes_a_short_attempt(cluster):
    cluster.start_brain()
    worker = cluster.start_worker("w-finish")  # stop grace 2 s
    plan = cluster.submit({"name": "finish", "tasks": [noop("short", sleep_s=1)]})
    wait_until(lambda: _running(cluster, plan["id"], worker), 15, "the task to start")
    assert worker.stop() == 0
    task = cluster.get(f"/v1/plans/{plan['id']}")["tasks"][0]
    assert (task["state"], task["worker_id"]) == ("SUCCEEDED", "w-finish")


def test_sigterm_releases_a_long_attempt_to_another_worker(cluster):
    cluster.start_brain()
    worker = cluster.start_worker("w-leaving")
    plan = cluster.submit({"name": "release", "tasks": [noop("long", sleep_s=4)]})
    wait_until(lambda: _running(cluster, plan["id"], worker), 15, "the task to start")
    assert worker.stop() == 0
    events = cluster.get(f"/v1/plans/{plan['id']}/events")["events"]
    assert "task_released" in [e["event_type"] for e in events]
    cluster.start_worker("w-staying")
    view = cluster.wait_plan(plan["id"], 30)
    assert (view["status"], view["tasks"][0]["worker_id"]) == ("succeeded", "w-staying")
    assert cluster.completions(plan["id"]) == {"long": 1}


def test_cancelling_a_running_plan_stops_the_attempt_on_the_worker(cluster):
    cluster.start_brain()
    busy = cluster.start_worker("w-busy")
    plan = cluster.submit({"name": "cancel", "tasks": [noop("forever", sleep_s=60)]})
    wait_until(lambda: _running(cluster, plan["id"], busy), 15, "the task to start")
    answer = requests.post(f"{cluster.url}/v1/plans/{plan['id']}/cancel", headers=ADMIN, timeout=10)
    assert answer.json() == {"cancelled": 1}
    # The next heartbeat gets 409, the worker cancels the sleep and is free again.
    follow_up = cluster.submit({"name": "after", "tasks": [noop("quick")]})
    assert cluster.wait_plan(follow_up["id"], 15)["status"] == "succeeded"
    assert "lease lost" in cluster.workers["w-busy"].log()
    assert cluster.get(f"/v1/plans/{plan['id']}")["tasks"][0]["state"] == "CANCELLED"


def test_a_second_worker_cannot_take_a_live_workers_name(cluster):
    """Every worker holds the bootstrap token; a twin with the same name (a copied .env
    on a second rig) used to fail the holder's leases and revoke its token."""
    cluster.start_brain()
    holder = cluster.start_worker("gpu0")
    twin = cluster.start_worker("gpu0", proc_name="gpu0-twin", wait=False)
    wait_until(lambda: "worker name in use" in twin.log(), 15, f"the twin to wait\n{twin.log()}")
    plan = cluster.submit({"name": "held", "tasks": [noop(f"t{i}") for i in range(4)]})
    assert cluster.wait_plan(plan["id"], 30)["status"] == "succeeded"
    assert '"registered"' not in twin.log() and holder.process.poll() is None
    holder.stop()  # a clean stop gives the name back at once
    wait_until(lambda: '"registered"' in twin.log(), 15, f"the twin to register\n{twin.log()}")
    plan = cluster.submit({"name": "after", "tasks": [noop("x")]})
    assert cluster.wait_plan(plan["id"], 30)["status"] == "succeeded"


def test_a_revoked_rigs_worker_parks_instead_of_crash_looping(cluster):
    """Under Docker's restart policy an exit would repeat the refusal forever."""
    cluster.start_brain()
    made = requests.post(f"{cluster.url}/v1/tokens", headers=ADMIN, timeout=10,
                         json={"scope": "join", "name": "rig-b"}).json()  # fmt: skip
    worker = cluster.start_worker("rig-b-cpu", WORKER_BOOTSTRAP_TOKEN=made["token"])
    gone = requests.delete(f"{cluster.url}/v1/tokens/{made['id']}", headers=ADMIN, timeout=10)
    assert gone.status_code == 200, gone.text
    wait_until(lambda: "refused WORKER_BOOTSTRAP_TOKEN" in worker.log(), 20,
               f"the refusal\n{worker.log()}")  # fmt: skip
    time.sleep(2)
    assert worker.process.poll() is None  # parked: still running, not restarting
    assert worker.log().count("refused WORKER_BOOTSTRAP_TOKEN") == 1
    assert worker.stop() == 2
