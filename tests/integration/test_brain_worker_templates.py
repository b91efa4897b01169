"""Template bounds with a real brain and a real prefetching worker on loopback: readers
that fit run as before (claims carrying fewer tasks than the worker asked for), a reader
over the bound fails when its upstream completes, never leased. Memory under the attack
itself is ``benchmarks/templates.py``'s."""

from __future__ import annotations

import pytest
import requests
from brain_procs import ADMIN, Cluster

BIG = 60_000
LIMITS = {"BRAIN_MAX_RENDERED_BYTES": "200000", "BRAIN_MAX_CLAIM_BYTES": "250000"}


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path, brain_env=LIMITS)
    yield made
    made.stop()


def noop(task_id, deps=(), echo=""):
    return {"id": task_id, "type": "noop", "task_class": "cpu", "depends_on": list(deps),
            "payload": {"echo": echo}}  # fmt: skip


def test_readers_that_fit_run_and_the_oversized_one_fails_at_release(cluster):
    cluster.start_brain()
    cluster.start_worker("w1", AIRIG_WORKER_PREFETCH="4")
    twice = " ".join(["{{ tasks.a.output.echo }}"] * 2)  # 120 KB: two per claim at most
    tasks = [noop("a", echo="y" * BIG)]
    tasks += [noop(f"r{i}", ["a"], twice) for i in range(6)]
    tasks += [noop("over", ["a"], "{{ tasks.a.output.echo }}" * 4), noop("after", ["over"])]
    plan = cluster.submit({"name": "templates", "tasks": tasks})["id"]
    view = cluster.wait_plan(plan, 60)
    by_key = {task["id"]: task for task in view["tasks"]}
    assert {key: by_key[key]["state"] for key in by_key} == {
        "a": "SUCCEEDED", **{f"r{i}": "SUCCEEDED" for i in range(6)},
        "over": "FAILED", "after": "UPSTREAM_FAILED",
    }  # fmt: skip
    over = by_key["over"]
    assert (over["error_type"], over["reason"], over["attempt"]) == (
        "template_error", "payload template", 0,
    )  # fmt: skip
    assert "more than 200000 bytes (BRAIN_MAX_RENDERED_BYTES)" in over["error"]
    assert f"4 x {{{{ tasks.a.output.echo }}}} of {BIG} bytes" in over["error"]
    result = requests.get(
        f"{cluster.url}/v1/plans/{plan}/tasks/r0/result", headers=ADMIN, timeout=10
    ).json()
    assert result["output"]["echo"] == " ".join(["y" * BIG] * 2)
    assert cluster.completions(plan) == {"a": 1, **{f"r{i}": 1 for i in range(6)}}
