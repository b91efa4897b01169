"""Fan-out benchmark: a plan over 100 files beside the same plan over 10,000.

Usage: python benchmarks/fanout.py [--sizes 100,10000] [--claims 180] [--per-item 2]

For each size a real brain process (``python -m airig.brain``) serves a fresh store whose
data folder holds that many files; one plan is submitted over HTTP whose group repeats
``--per-item`` no-op tasks for each file (independent, so the 100-file plan has as
many READY tasks as the claims take) (``for_each: {glob: ...}``, resolved at
submission: airig/brain/PLANS.md, "Fan-out"). Reported: the submission's round trip (glob,
validation of every item's tasks, one transaction), the brain's resident memory (VmRSS)
after it, and the round trips of ``--claims`` non-blocking claims by one worker, each
leasing one task, as ``scale.py`` measures them. The bounds are the scale benchmark's
(claim p99 < 20 ms; brain RSS < 150 MB), and the claim p99 at 10,000 items must stay
within 2x of the 100-item plan's: a fan-out is ordinary tasks once submitted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import requests  # noqa: E402
from procs import ADMIN, Brain, rss_mb  # noqa: E402
from scale import claim_latencies, percentile  # noqa: E402


def plan_body(per_item: int) -> str:
    chain = [
        f"      - {{id: s{step}, type: noop, task_class: cpu, "
        f'payload: {{echo: "{{{{ item.path }}}}"}}}}'
        for step in range(per_item)
    ]
    return (
        "name: fan-out benchmark\ntasks:\n  - id: files\n"
        "    for_each: {glob: 'inputs/bench/*.txt'}\n    tasks:\n" + "\n".join(chain) + "\n"
    )


def measure(size: int, claims: int, per_item: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="airig-fanout-") as tmp:
        root = Path(tmp)
        inputs = root / "data" / "inputs" / "bench"
        inputs.mkdir(parents=True)
        for index in range(size):
            (inputs / f"doc-{index:05d}.txt").write_text(f"document {index}\n")
        brain = Brain(
            root,
            {"BRAIN_DATA_DIR": str(root / "data"), "BRAIN_LEASE_S": "600",
             "AIRIG_PLAN_MAX_TASKS": str(size * per_item + 10)},
        )  # fmt: skip
        try:
            brain.start()
            rss_before = rss_mb(brain.pid)
            start = time.perf_counter()
            answer = requests.post(
                f"{brain.url}/v1/plans", data=plan_body(per_item), timeout=600,
                headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/yaml"},
            )  # fmt: skip
            submit_s = time.perf_counter() - start
            if answer.status_code not in (200, 201):
                raise RuntimeError(f"submit answered {answer.status_code}: {answer.text[:300]}")
            tasks = answer.json()["task_total"]
            rss_after = rss_mb(brain.pid)
            latencies = claim_latencies(brain.url, claims, name="fanout-bench")
            rss_claims = rss_mb(brain.pid)
        finally:
            brain.stop()
    return {
        "items": size, "tasks": tasks, "submit_s": round(submit_s, 2),
        "rss_before_mb": round(rss_before, 1), "rss_after_mb": round(max(rss_after, rss_claims), 1),
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
    }  # fmt: skip


def verdicts(rows: list[dict]) -> list[str]:
    first, last = rows[0], rows[-1]
    growth = last["p99_ms"] / first["p99_ms"]
    return [
        f"{'PASS' if last['p99_ms'] < 20 else 'FAIL'} claim p99 {last['p99_ms']} ms with "
        f"{last['items']} items (target < 20 ms, scale.py's bound)",
        f"{'PASS' if growth < 2 else 'FAIL'} claim p99 growth {growth:.2f}x from "
        f"{first['items']} to {last['items']} items (target < 2x)",
        f"{'PASS' if last['rss_after_mb'] < 150 else 'FAIL'} brain RSS {last['rss_after_mb']} "
        f"MB after {last['items']} items (target < 150 MB)",
    ]


def markdown(rows: list[dict]) -> str:
    lines = [
        "| items | tasks | submit s | brain RSS before / after MB | claim p50 ms | claim p99 ms |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['items']} | {r['tasks']} | {r['submit_s']} | {r['rss_before_mb']} / "
            f"{r['rss_after_mb']} | {r['p50_ms']} | {r['p99_ms']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,10000")
    parser.add_argument("--claims", type=int, default=180)
    parser.add_argument("--per-item", type=int, default=2)
    args = parser.parse_args(argv)
    rows = [measure(int(size), args.claims, args.per_item) for size in args.sizes.split(",")]
    print(markdown(rows))
    lines = verdicts(rows)
    print("\n".join(lines))
    return 0 if all(line.startswith("PASS") for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
