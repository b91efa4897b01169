"""Dashboard benchmark: what open dashboards cost the scheduler, and what a poll costs.

Usage: python benchmarks/dashboard.py [--queued 100000] [--claims 300] [--viewers 3]
                                      [--interval 2] [--json results/dashboard.json]

One store is seeded with ``--queued`` READY tasks (as ``scale.py`` does); a real brain
process serves it. Measured in the same run, side by side:

1. claim round-trip p50 / p99 with nobody watching;
2. the same with ``--viewers`` dashboards open, each polling what the page polls
   (``/v1/workers``, ``/v1/queue``, ``/v1/plans``, ``/v1/events?limit=200``) every
   ``--interval`` seconds, as the page does (2 s); ``--interval 0`` polls back to back,
   a stress case no page produces;
3. the latency of each poll route (p50 / p99) under that load.

Target (at the page's 2 s): claim p99 with viewers ≤ 2× claim p99 without — the page
must not slow the cluster it shows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import requests  # noqa: E402
from procs import ADMIN, Brain, rss_mb  # noqa: E402
from scale import claim_latencies, percentile, seed  # noqa: E402

POLLED = ["/v1/workers", "/v1/queue", "/v1/plans", "/v1/events?limit=200"]


def viewer(
    url: str, stop: threading.Event, timings: dict[str, list[float]], interval: float
) -> None:
    session = requests.Session()
    headers = {"Authorization": f"Bearer {ADMIN}"}
    while not stop.wait(0):
        cycle = time.perf_counter()
        for path in POLLED:
            start = time.perf_counter()
            answer = session.get(f"{url}{path}", headers=headers, timeout=30)
            timings[path].append((time.perf_counter() - start) * 1000)
            if answer.status_code != 200:
                raise RuntimeError(f"{path} answered {answer.status_code}: {answer.text[:200]}")
        stop.wait(max(0.0, interval - (time.perf_counter() - cycle)))


def summary(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values), 2),
        "p99_ms": round(percentile(values, 0.99), 2),
    }


def run(queued: int, claims: int, viewers: int, interval: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="airig-dash-") as tmp:
        root = Path(tmp)
        seed(root / "state" / "brain.db", queued)
        brain = Brain(root, {"BRAIN_LEASE_S": "600"})
        try:
            brain.start()
            alone = claim_latencies(brain.url, claims, "bench-alone")
            stop = threading.Event()
            timings: dict[str, list[float]] = {path: [] for path in POLLED}
            threads = [
                threading.Thread(
                    target=viewer, args=(brain.url, stop, timings, interval), daemon=True
                )
                for _ in range(viewers)
            ]
            for thread in threads:
                thread.start()
            time.sleep(1)  # every viewer is polling before the claims start
            watched = claim_latencies(brain.url, claims, "bench-watched")
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
            rss = rss_mb(brain.pid)
        finally:
            brain.stop()
    return {
        "queued": queued, "claims": claims, "viewers": viewers, "interval_s": interval,
        "claims_alone": summary(alone), "claims_watched": summary(watched),
        "polls": {path: summary(values) for path, values in timings.items()},
        "rss_mb": round(rss, 1),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--viewers", type=int, default=3)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = run(args.queued, args.claims, args.viewers, args.interval)
    alone, watched = result["claims_alone"], result["claims_watched"]
    print(f"{result['queued']} tasks queued, {result['viewers']} dashboards polling every "
          f"{args.interval} s, brain RSS {result['rss_mb']} MB")  # fmt: skip
    print("| | p50 ms | p99 ms |\n|---|---:|---:|")
    print(f"| claim, nobody watching | {alone['p50_ms']} | {alone['p99_ms']} |")
    print(f"| claim, dashboards open | {watched['p50_ms']} | {watched['p99_ms']} |")
    for path, row in result["polls"].items():
        print(f"| poll `{path}` ({row['n']}) | {row['p50_ms']} | {row['p99_ms']} |")
    ratio = watched["p99_ms"] / alone["p99_ms"]
    verdict = (f"{'PASS' if ratio <= 2 else 'FAIL'} claim p99 with dashboards open is "
               f"{ratio:.2f}x the p99 without (target <= 2x)")  # fmt: skip
    print(verdict)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**result, "verdict": verdict}, indent=1))
    return 0 if verdict.startswith("PASS") else 1


if __name__ == "__main__":
    sys.exit(main())
