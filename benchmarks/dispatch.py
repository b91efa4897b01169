"""Dispatch benchmark: N no-op tasks through airig and through Celery 5 + Redis, same run.

Usage: python benchmarks/dispatch.py [--tasks 3000] [--workers 4] [--timeout 300]
                                     [--json results/dispatch.json]

airig: a real brain (``python -m airig.brain``) and ``--workers`` worker processes
(``python -m airig.worker``, class cpu, ``AIRIG_WORKER_PREFETCH`` = ``--prefetch``, default 4
like Celery's prefetch multiplier) on 127.0.0.1; one plan of N ``noop`` tasks is
submitted over HTTP. Celery: a private ``redis-server`` on 127.0.0.1 (temp dir, no
persistence) and ``--workers`` Celery workers (solo pool, one task at a time each, like
an airig worker); N ``noop.delay()`` calls. For both, latency = task finished - the
moment submission began (airig: the brain's ``finished_at``, after the worker reported;
Celery: the task's own return time, before its result is stored, which favours Celery
slightly), throughput = N / (last finish - submission start). Needs ``redis-server``
(Debian: ``apt-get install -y redis-server``) and ``pip install celery redis``;
everything started is stopped at the end, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import requests  # noqa: E402
from procs import ADMIN, Brain, free_port, spawn, stop  # noqa: E402


def summary(system: str, start: float, finishes: list[float]) -> dict:
    latencies = sorted((f - start) * 1000 for f in finishes)
    span = max(finishes) - start
    return {
        "system": system, "tasks": len(finishes), "seconds": round(span, 2),
        "tasks_per_s": round(len(finishes) / span, 1),
        "p50_ms": round(statistics.median(latencies)),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]),
    }  # fmt: skip


def wait_for(check, timeout: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise RuntimeError(f"timed out waiting for {what}")


def run_airig(root: Path, tasks: int, workers: int, timeout: float, prefetch: int) -> dict:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    brain = Brain(root, {"BRAIN_MAX_TASKS": str(max(tasks, 5000))})
    with ExitStack() as stack:
        brain.start()
        stack.callback(brain.stop)
        for i in range(workers):
            env = {**brain.worker_env(f"bench-{i}"), "AIRIG_WORKER_PREFETCH": str(prefetch)}
            proc = spawn("airig.worker", env, root / f"w{i}.log")
            stack.callback(stop, proc)

        def registered() -> bool:
            listing = requests.get(f"{brain.url}/v1/workers", headers=headers, timeout=5).json()
            return sum(w["alive"] for w in listing["workers"]) == workers

        wait_for(registered, 60, "the airig workers to register")
        plan = {"name": "dispatch", "tasks": [
            {"id": f"t{i}", "type": "noop", "task_class": "cpu", "payload": {"echo": i}}
            for i in range(tasks)
        ]}  # fmt: skip
        start = time.time()
        answer = requests.post(f"{brain.url}/v1/plans", json=plan, headers=headers, timeout=60)
        answer.raise_for_status()
        plan_url = f"{brain.url}/v1/plans/{answer.json()['id']}"

        def finished() -> dict | None:
            listing = requests.get(f"{brain.url}/v1/plans", headers=headers, timeout=10).json()
            mine = next(p for p in listing["plans"] if p["id"] == answer.json()["id"])
            return mine if mine["status"] != "running" else None

        wait_for(finished, timeout, "the airig plan to finish", every=1.0)
        view = requests.get(plan_url, headers=headers, timeout=60).json()
    if any(t["state"] != "SUCCEEDED" for t in view["tasks"]):
        raise RuntimeError("some airig no-op tasks did not succeed")
    return summary("airig (HTTP, SQLite)", start, [t["finished_at"] for t in view["tasks"]])


def run_celery(root: Path, tasks: int, workers: int, timeout: float, prefetch: int) -> dict:
    if shutil.which("redis-server") is None:
        raise RuntimeError("redis-server is missing: apt-get install -y redis-server")
    port = free_port()
    url = f"redis://127.0.0.1:{port}"
    env = {"BENCH_REDIS_URL": url, "PYTHONPATH": f"{HERE}:{HERE.parent}"}
    with ExitStack() as stack:
        redis = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(root),
             "--save", "", "--appendonly", "no"],
            stdout=(root / "redis.log").open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        stack.callback(stop, redis)
        os.environ["BENCH_REDIS_URL"] = url  # celery_noop reads it when imported
        from celery_noop import app, noop

        wait_for(lambda: _redis_up(url), 20, "redis-server")
        for i in range(workers):
            command = [sys.executable, "-m", "celery", "-A", "celery_noop", "worker",
                       "--pool", "solo", "-n", f"bench{i}@%h", "--loglevel", "WARNING",
                       "--without-gossip", "--without-mingle",
                       "--prefetch-multiplier", str(prefetch)]  # fmt: skip
            with (root / f"celery{i}.log").open("ab") as log:
                proc = subprocess.Popen(command, cwd=HERE, env={**os.environ, **env},
                                        stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
            stack.callback(stop, proc)
        wait_for(lambda: len(app.control.ping(timeout=0.5)) == workers, 60, "Celery workers")
        start = time.time()
        results = [noop.delay(i) for i in range(tasks)]
        deadline = time.monotonic() + timeout
        finishes = [r.get(timeout=max(1.0, deadline - time.monotonic())) for r in results]
    return summary("Celery 5 + Redis (solo pool)", start, finishes)


def _redis_up(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url).ping())
    except redis.RedisError:
        return False


RUNNERS = {"airig": run_airig, "celery": run_celery}


def median_run(runs: list[dict]) -> dict:
    """The run with the median throughput (an actual run, so its latencies belong to it)."""
    return sorted(runs, key=lambda r: r["tasks_per_s"])[len(runs) // 2]


def markdown(rows: list[dict]) -> str:
    lines = ["| system | tasks | seconds | tasks/s | latency p50 ms | latency p99 ms |",
             "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['system']} | {r['tasks']} | {r['seconds']} | {r['tasks_per_s']} "
                     f"| {r['p50_ms']} | {r['p99_ms']} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=300.0)
    # The same for both: AIRIG_WORKER_PREFETCH and Celery's --prefetch-multiplier (with
    # the solo pool, concurrency 1, that is the number of tasks a worker holds). 4 is
    # Celery's default.
    parser.add_argument("--prefetch", type=int, default=4,
                        help="tasks a worker holds, for both systems")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, help="runs of each system")
    parser.add_argument("--only", choices=["airig", "celery"], help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.only:  # one run of one system, in a fresh process (see below)
        with tempfile.TemporaryDirectory(prefix="airig-dispatch-") as tmp:
            run = RUNNERS[args.only]
            row = run(Path(tmp), args.tasks, args.workers, args.timeout, args.prefetch)
        print(json.dumps(row))
        return 0
    runs: dict[str, list[dict]] = {"airig": [], "celery": []}
    # Alternate the two systems and keep each one's median run: on a 2-core host a
    # single run swings by a third with whatever else the machine does. Each run is its
    # own process, as Celery's client binds to one broker URL per process.
    for _ in range(args.repeat):
        for system in runs:
            command = [sys.executable, __file__, "--only", system, "--tasks", str(args.tasks),
                       "--workers", str(args.workers), "--timeout", str(args.timeout),
                       "--prefetch", str(args.prefetch)]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{system} run failed: {done.stderr.strip()[-500:]}")
            runs[system].append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = [median_run(runs["airig"]), median_run(runs["celery"])]
    ratio = rows[0]["tasks_per_s"] / rows[1]["tasks_per_s"]
    each = ", ".join(
        f"{a['tasks_per_s']:.0f}/{c['tasks_per_s']:.0f}"
        for a, c in zip(runs["airig"], runs["celery"], strict=True)
    )
    verdict = (
        f"{'PASS' if ratio >= 1 else 'FAIL'} airig throughput {ratio:.2f}x Celery's "
        f"(target >= 1x; median of {args.repeat} runs, each airig/Celery tasks/s: {each})"
    )
    print(markdown(rows))
    print(verdict)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "verdicts": [verdict]}, indent=1))
    return 0 if ratio >= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
