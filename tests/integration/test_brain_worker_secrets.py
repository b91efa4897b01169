"""What a shell task can reach in a real worker process: not the worker's tokens (issue 15).

The task runs as the worker's own user, as in the container (uid 10001 there; here the
user running pytest, without capabilities when that is root), so /proc would show it the
worker's environment and memory unless the worker closes them.
"""

from __future__ import annotations

import pytest
import requests
from brain_procs import ADMIN, Cluster, wait_until

# The command: every process's environment this user may read, lines with TOKEN.
SCAN = "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null | grep TOKEN"
# The worker is the shell's parent: can the task open its environment or its memory?
PARENT = (
    "for f in environ mem; do "
    'if (exec 3< /proc/$PPID/$f) 2>/dev/null; then echo "$f open"; else echo "$f closed"; fi; '
    "done"
)


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path)
    yield made
    made.stop()


def shell(task_id: str, command: str) -> dict:
    return {"id": task_id, "type": "shell", "payload": {"command": command}}


def outputs(cluster: Cluster, plan: dict) -> dict[str, str]:
    view = cluster.wait_plan(plan["id"], 30)
    assert view["status"] == "succeeded", [(t["id"], t["error"]) for t in view["tasks"]]
    path = f"/v1/plans/{plan['id']}/tasks/{{}}/result"
    return {
        t["id"]: cluster.get(path.format(t["id"]))["output"]["stdout_tail"] for t in view["tasks"]
    }


def test_a_shell_task_finds_no_token_of_its_worker(cluster):
    """The worker registers with a join token, a value no other process holds (the brain,
    a process of the same user here, holds the bootstrap token in its environment).
    The count is taken by grep in the task, so a long scan cannot hide the token."""
    cluster.start_brain()
    made = requests.post(f"{cluster.url}/v1/tokens", headers=ADMIN, timeout=10,
                         json={"scope": "join", "name": "scan"}).json()  # fmt: skip
    token = made["token"]
    cluster.start_worker("w-scan", capless=True, WORKER_BOOTSTRAP_TOKEN=token)
    plan = cluster.submit({"name": "reach", "tasks": [
        shell("scan", f"{SCAN} | grep -cF '{token}' || true"),
        shell("parent", PARENT),
    ]})  # fmt: skip
    found = outputs(cluster, plan)
    assert found == {"scan": "0\n", "parent": "environ closed\nmem closed\n"}


def test_the_worker_registers_again_after_the_brain_lost_its_state(cluster):
    """The bootstrap token left the worker's environment at start; its link keeps it, so
    a brain that forgot every worker (a new state volume) gets this one back."""
    cluster.start_brain()
    cluster.start_worker("w-again", capless=True)
    # registered with the first brain before it goes: on a loaded machine the worker may
    # not have reached it yet, and then it registers once only (CI, 2026-11-29)
    wait_until(lambda: '"registered"' in cluster.workers["w-again"].log(), 20, cluster.logs())
    cluster.brain.kill()
    fresh = cluster.root / "fresh"
    cluster.brain_env.update(
        BRAIN_DB=str(fresh / "brain.db"), BRAIN_RESULTS_DIR=str(fresh / "results")
    )
    cluster.start_brain()
    wait_until(lambda: cluster.worker_alive("w-again"), 20, f"w-again again\n{cluster.logs()}")
    plan = cluster.submit({"name": "after", "tasks": [shell("true", "true")]})
    assert cluster.wait_plan(plan["id"], 30)["status"] == "succeeded"
    assert cluster.workers["w-again"].log().count('"registered"') == 2
