"""What a task can do to the kit, with the kit up for real (docs/security.md).

The kit runs with small worker limits (.env: what tests may change). A shell task scans
every process of its container for tokens while healthchecks come and go; the kit's
containers run hardened; a task that fork-bombs or eats memory is stopped inside its own
worker's container, and the brain and the other worker go on working.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import requests
from e2e_lanes import lane_for

pytestmark = pytest.mark.docker
LANE = lane_for(__file__)
BRAIN = LANE.url("BRAIN_PORT")
MEM_LIMIT, PIDS_LIMIT = 256 << 20, 96
KIT_SERVICES = {"volumes-init", "files", "ollama-init", "comfyui-init", "whisper-init",
                "models-ready", "brain", "worker-cpu"}  # fmt: skip

# Every process of the container for 25 s (two healthcheck runs at least): which were
# healthchecks (their command line is readable) and which environment lines say TOKEN.
SCAN = r"""end=$(( $(date +%s) + 25 ))
while [ "$(date +%s)" -lt "$end" ]; do
  for p in /proc/[0-9]*; do
    tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q -- '--check' && echo "healthcheck ${p#/proc/}"
    tr '\0' '\n' < $p/environ 2>/dev/null | grep TOKEN
  done
done | sort -u"""
# A fork bomb that waits on its children, so it never ends by itself: the task's timeout
# ends it (the worker kills its process group). bash, not sh: dash exits when a fork
# fails, and the bomb would collapse as soon as it reached the limit.
FORK_BOMB = ["bash", "-c", "bomb() { bomb & bomb & wait; }; bomb"]
MEMORY_HOG = "python3 -c 'hog = []\nwhile True: hog.append(b\"x\" * (8 << 20))'"


@pytest.fixture(scope="module")
def limited_kit(tmp_path_factory, test_images):
    from conftest import Kit, copy_kit, force_clean, write_test_env

    force_clean()
    root = copy_kit(tmp_path_factory.mktemp("kit") / "airig")
    write_test_env(
        root, AIRIG_OLLAMA_MODELS="", AIRIG_WHISPER_MODELS="", AIRIG_CPU_WORKERS="2",
        AIRIG_WORKER_MEM_LIMIT=str(MEM_LIMIT), AIRIG_WORKER_PIDS_LIMIT=str(PIDS_LIMIT),
    )  # fmt: skip
    kit = Kit(root)
    done = kit.run("--profile", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    yield kit
    kit.run("down", "--volumes", "--yes")
    force_clean()


def auth(kit) -> dict:
    return {"Authorization": f"Bearer {kit.env()['BRAIN_ADMIN_TOKEN']}"}


def shell_task(kit, command: str | list[str], timeout_s: int = 120) -> dict:
    """Run one shell task (no retry) to its end: the task's view and its "plan_id"."""
    task = {"id": "t", "type": "shell", "task_class": "cpu", "retry_count": 0,
            "timeout_s": timeout_s, "payload": {"command": command}}  # fmt: skip
    answer = requests.post(f"{BRAIN}/v1/plans", headers=auth(kit), timeout=10,
                           json={"name": "blast radius", "tasks": [task]})  # fmt: skip
    assert answer.status_code == 201, answer.text
    plan_id = answer.json()["id"]
    deadline = time.monotonic() + timeout_s + 120
    while time.monotonic() < deadline:
        plan = requests.get(f"{BRAIN}/v1/plans/{plan_id}", headers=auth(kit), timeout=10).json()
        if plan["status"] != "running":
            return {**plan["tasks"][0], "plan_id": plan_id}
        time.sleep(1)
    raise AssertionError(f"plan {plan_id} still running")


def result(kit, task: dict) -> dict:
    path = f"{BRAIN}/v1/plans/{task['plan_id']}/tasks/{task['id']}/result"
    return requests.get(path, headers=auth(kit), timeout=10).json()


def inspect(*containers: str) -> list[dict]:
    out = subprocess.run(["docker", "inspect", *containers], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def cgroup_counter(container: str, v2_file: str, v1_file: str, key: str) -> int:
    """A counter of the container's own cgroup (v2 or v1), read from inside it."""
    read = f"cat /sys/fs/cgroup/{v2_file} 2>/dev/null || cat /sys/fs/cgroup/{v1_file}"
    out = subprocess.run(["docker", "exec", container, "sh", "-c", read],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr
    counts = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)
    return int(counts[key])


def the_rest_is_healthy(kit, except_worker: str = "") -> None:
    """The brain answers, every worker is alive at it, and a new task runs."""
    assert requests.get(f"{BRAIN}/health", timeout=10).status_code == 200
    for row in kit.status():
        if row["state"] == "running":
            assert row["health"] == "healthy", row
    workers = requests.get(f"{BRAIN}/v1/workers", headers=auth(kit), timeout=10).json()
    alive = {w["name"]: w["alive"] for w in workers["workers"]}
    assert len(alive) == 2 and all(alive.values()), alive
    assert shell_task(kit, "echo fine")["state"] == "SUCCEEDED"


def test_the_kits_containers_run_hardened(limited_kit):
    rows = [r for r in limited_kit.status() if r["service"] in KIT_SERVICES]
    assert {r["service"] for r in rows} == KIT_SERVICES
    for row, info in zip(rows, inspect(*(r["container"] for r in rows)), strict=True):
        host = info["HostConfig"]
        assert host["CapDrop"] == ["ALL"], row["service"]
        assert "no-new-privileges:true" in host["SecurityOpt"], row["service"]
        assert host["ReadonlyRootfs"] is True, row["service"]
        assert host["Memory"] > 0 and host["PidsLimit"] > 0, row["service"]
        if row["service"] == "worker-cpu":
            assert (host["Memory"], host["PidsLimit"]) == (MEM_LIMIT, PIDS_LIMIT)
            assert info["Path"] == "python"  # the worker is PID 1: no init holds its env


def test_a_shell_task_finds_no_token_in_its_container(limited_kit):
    task = shell_task(limited_kit, SCAN)
    assert task["state"] == "SUCCEEDED", task
    lines = result(limited_kit, task)["output"]["stdout_tail"].splitlines()
    assert [line for line in lines if "TOKEN" in line] == []
    assert [line for line in lines if line.startswith("healthcheck ")], lines


def test_a_fork_bomb_is_stopped_in_its_own_worker(limited_kit):
    task = shell_task(limited_kit, FORK_BOMB, timeout_s=20)
    assert (task["state"], task["error_type"]) == ("FAILED", "timeout"), task
    from conftest import worker_container

    worker = worker_container(task["worker_id"])  # the worker's name is its Compose slot
    assert cgroup_counter(worker, "pids.events", "pids/pids.events", "max") > 0
    the_rest_is_healthy(limited_kit)


def test_a_memory_hog_is_oom_killed_in_its_own_worker(limited_kit):
    task = shell_task(limited_kit, MEMORY_HOG, timeout_s=60)
    assert (task["state"], task["error_type"]) == ("FAILED", "nonzero_exit"), task
    assert "code -9" in task["error"] or "code 137" in task["error"], task  # SIGKILL
    from conftest import worker_container

    worker = worker_container(task["worker_id"])
    oom = cgroup_counter(worker, "memory.events", "memory/memory.oom_control", "oom_kill")
    assert oom > 0
    the_rest_is_healthy(limited_kit)
