"""Scale benchmark: claim latency with 1k, 10k and 100k tasks queued, and brain memory.

Usage: python benchmarks/scale.py [--sizes 1000,10000,100000] [--claims 300]
                                  [--json results/scale.json]

For each size a fresh SQLite store is seeded directly through the brain's store API
(``airig.brain.plans.submit.insert_plan``, as a submission would, without HTTP), then a
real brain process (``python -m airig.brain``) serves it on 127.0.0.1 and one registered
worker makes ``--claims`` non-blocking claims (``wait_s`` 0) over HTTP, each leasing one
task. Reported: claim round-trip p50 / p99 and the brain's resident memory (VmRSS) after
the claims. The seeded tasks spread over 4 models, 2 classes and priorities 1-10, so the
residency policy has real choices to make. Targets: p99 < 20 ms, p99 growth < 2x from
the smallest to the largest size, RSS < 150 MB at 100k.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import requests  # noqa: E402
from procs import BOOTSTRAP, Brain, rss_mb  # noqa: E402

from airig.brain.plans.models import PlanSpec, TaskSpec  # noqa: E402
from airig.brain.plans.submit import insert_plan  # noqa: E402
from airig.brain.store.db import Database  # noqa: E402
from airig.brain.store.events import Outbox  # noqa: E402

MODELS = ["qwen2.5:7b", "llama3.1:8b", "nomic-embed-text", None]


def seed(db_path: Path, count: int) -> float:
    """Queue ``count`` READY tasks in one plan; returns the seconds it took."""
    start = time.perf_counter()
    specs = [
        TaskSpec(
            id=f"t{i}",
            type="noop",
            task_class="llm" if i % 3 else "cpu",
            payload={"echo": i},
            priority=1 + i % 10,
            model=MODELS[i % len(MODELS)],
        )  # fmt: skip
        for i in range(count)
    ]
    db = Database(db_path)
    with db.tx() as conn:
        insert_plan(
            conn, Outbox(), PlanSpec(name=f"scale-{count}", tasks=specs), set(), time.time(),
            submitted_by="bench", digest=f"scale-{count}", idempotency_key=None,
            default_timeout_s=600.0,
        )  # fmt: skip
    db.close()
    return time.perf_counter() - start


def claim_latencies(url: str, claims: int, name: str = "scale-bench") -> list[float]:
    session = requests.Session()
    answer = session.post(
        f"{url}/v1/workers/register",
        json={"name": name, "classes": ["llm", "cpu"], "resident_models": []},
        headers={"Authorization": f"Bearer {BOOTSTRAP}"},
        timeout=10,
    )
    answer.raise_for_status()
    headers = {"Authorization": f"Bearer {answer.json()['token']}"}
    body = {"wait_s": 0, "resident_models": ["qwen2.5:7b"]}
    latencies = []
    for _ in range(claims):
        start = time.perf_counter()
        response = session.post(f"{url}/v1/claims", json=body, headers=headers, timeout=30)
        latencies.append((time.perf_counter() - start) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"claim answered {response.status_code}: {response.text[:200]}")
    return latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def measure(size: int, claims: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="airig-scale-") as tmp:
        root = Path(tmp)
        seed_s = seed(root / "state" / "brain.db", size)
        brain = Brain(root, {"BRAIN_LEASE_S": "600"})
        try:
            brain.start()
            latencies = claim_latencies(brain.url, claims)
            rss = rss_mb(brain.pid)
        finally:
            brain.stop()
    return {
        "queued": size, "claims": claims, "seed_s": round(seed_s, 1),
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2), "rss_mb": round(rss, 1),
    }  # fmt: skip


def verdicts(rows: list[dict]) -> list[str]:
    first, last = rows[0], rows[-1]
    growth = last["p99_ms"] / first["p99_ms"]
    worst = max(row["p99_ms"] for row in rows)
    return [
        f"{'PASS' if worst < 20 else 'FAIL'} claim p99 {worst} ms at worst (target < 20 ms)",
        f"{'PASS' if growth < 2 else 'FAIL'} p99 growth {growth:.2f}x from {first['queued']} "
        f"to {last['queued']} queued (target < 2x)",
        f"{'PASS' if last['rss_mb'] < 150 else 'FAIL'} brain RSS {last['rss_mb']} MB with "
        f"{last['queued']} queued (target < 150 MB)",
    ]


def markdown(rows: list[dict]) -> str:
    lines = ["| tasks queued | claims | claim p50 ms | claim p99 ms | brain RSS MB |",
             "|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['queued']} | {r['claims']} | {r['p50_ms']} | {r['p99_ms']} "
                     f"| {r['rss_mb']} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = [measure(int(size), args.claims) for size in args.sizes.split(",")]
    checks = verdicts(rows)
    print(markdown(rows))
    print("\n".join(checks))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "verdicts": checks}, indent=1))
    return 0 if all(c.startswith("PASS") for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
