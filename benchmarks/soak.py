"""Soak test: SIGKILL random workers while a big plan runs; count lost and duplicated tasks.

Not part of CI. Runs a real brain and real workers on 127.0.0.1 (no Docker):

    python benchmarks/soak.py                      # 500 tasks, 200 kills, 4 workers
    python benchmarks/soak.py --tasks 60 --kills 15 --workers 3 --task-seconds 0.3

Phase 1 measures the per-task overhead of the brain round trips (claim, start, complete)
with instant no-op tasks and one worker. Phase 2 runs the soak: every ``--kill-every``
seconds one random worker is SIGKILLed and restarted (same name half of the time, as
`docker restart` would; a new name otherwise). At the end it prints:

- lost: tasks that did not end SUCCEEDED;
- duplicated: tasks whose completion was committed more than once (from the brain's
  event table; re-executions after a kill are expected, double commits are not).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from brain_procs import Cluster  # noqa: E402

SOAK_BRAIN = {
    # Workers die hundreds of times: allow many infrastructure retries per task.
    "BRAIN_INFRA_RETRIES": "100",
    "BRAIN_LEASE_S": "2",
    "BRAIN_REAPER_INTERVAL_S": "0.2",
}


def noop_plan(name: str, count: int, seconds: float) -> dict:
    """``count`` independent tasks plus a final join, so dependencies are exercised."""
    tasks = [
        {"id": f"t{i}", "type": "noop", "payload": {"sleep_s": seconds, "echo": i}}
        for i in range(count)
    ]
    tasks.append({"id": "join", "type": "noop", "depends_on": [t["id"] for t in tasks]})
    return {"name": name, "tasks": tasks}


def measure_overhead(root: Path, count: int) -> float:
    """Seconds of brain round trips per task: instant tasks, one worker, no faults."""
    cluster = Cluster(root, brain_env=SOAK_BRAIN)
    try:
        cluster.start_brain()
        cluster.start_worker("bench")
        started = time.monotonic()
        plan = cluster.submit(noop_plan("overhead", count, 0.0))
        view = cluster.wait_plan(plan["id"], timeout=count * 2 + 30)
        elapsed = time.monotonic() - started
        assert view["status"] == "succeeded", view["counts"]
        return elapsed / (count + 1)
    finally:
        cluster.stop()


def soak(root: Path, args: argparse.Namespace) -> tuple[int, int, int, float]:
    """(lost, duplicated, kills, seconds) of one soak run."""
    rng = random.Random(args.seed)
    cluster = Cluster(root, brain_env=SOAK_BRAIN)
    names = [f"w{i}" for i in range(args.workers)]
    generation = 0
    try:
        cluster.start_brain()
        for name in names:
            cluster.start_worker(name)
        started = time.monotonic()
        plan = cluster.submit(noop_plan("soak", args.tasks, args.task_seconds))
        kills = 0
        while kills < args.kills and cluster.get(f"/v1/plans/{plan['id']}")["status"] == "running":
            time.sleep(args.kill_every)
            victim = rng.randrange(len(names))
            cluster.workers.pop(names[victim]).kill()
            kills += 1
            if rng.random() < 0.5:
                generation += 1
                names[victim] = f"w{victim}-{generation}"
            cluster.start_worker(names[victim])
        view = cluster.wait_plan(plan["id"], timeout=args.tasks * args.task_seconds + 600)
        elapsed = time.monotonic() - started
        lost = sum(1 for task in view["tasks"] if task["state"] != "SUCCEEDED")
        duplicated = sum(1 for n in cluster.completions(plan["id"]).values() if n > 1)
        return lost, duplicated, kills, elapsed
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--task-seconds", type=float, default=1.0)
    parser.add_argument("--kill-every", type=float, default=0.5)
    parser.add_argument("--overhead-tasks", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="airig-soak-") as tmp:
        (Path(tmp) / "overhead").mkdir()
        (Path(tmp) / "soak").mkdir()
        overhead = measure_overhead(Path(tmp) / "overhead", args.overhead_tasks)
        print(f"per-task overhead: {overhead * 1000:.1f} ms (claim + start + complete, 1 worker)")
        lost, duplicated, kills, elapsed = soak(Path(tmp) / "soak", args)
    print(
        f"soak: {args.tasks + 1} tasks, {kills} worker kills, {elapsed:.0f} s: "
        f"lost {lost}, duplicated {duplicated}"
    )
    return 0 if lost == 0 and duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
