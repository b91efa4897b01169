"""Fleet benchmark: one real brain serving 10 to 500 simulated GPU workers over HTTP.

Usage: python benchmarks/fleet.py [--workers 10,50,100,500] [--step-s 90] [--warmup-s 25]
                                  [--task-s 2,10] [--load-s 3] [--quick]
                                  [--json results/fleet.json]

Each step starts a fresh brain (``python -m airig.brain``, default settings: 30 s leases,
a heartbeat every 10 s) and ``workers / 5`` rigs of up to 5 GPUs. Each rig gets its own
join token (``POST /v1/tokens``) and registers its workers with it; each worker is an
asyncio client (``fleet_clients.py``) that heartbeats with GPU telemetry at the interval
the brain gives and runs the ``/v1/exchange`` loop of a GPU worker: tasks of
``--task-s`` seconds (LLM calls; embedding batches a third of that), a simulated model
load of about ``--load-s`` seconds when the brain says load, the swap reported in the
completion's metrics as a real worker reports it. Three dashboards poll what the page
polls (worker list + the cluster / plans / events view every 2 s), and a feeder keeps
three tasks per worker queued, so no claim finds the queue empty.

After ``--warmup-s`` (registration, first loads) the step records for ``--step-s``:
exchange and heartbeat round trips (p50 / p99; an exchange that found no task would be a
long-poll and is counted apart), tasks completed per second, the brain's CPU (utime +
stime of its process from ``/proc/<pid>/stat``, in cores) and RSS, the growth of the
database (live pages) and of the log files (events and training-sample JSON logs, the
brain's own log) extrapolated to an hour, and every error any client saw. The load
generator runs on the same host: its own CPU is reported beside the brain's.

Targets at the largest step (500): exchange p99 < 50 ms, heartbeat p99 < 50 ms, brain
< 1 core, no errors; and cost no faster than linear: brain CPU per completed task at the
largest step <= 1.25x the smallest step's.
``--quick``: 10 and 50 workers, 20 s steps after a 15 s warm-up (for run_all.sh and CI),
judged on its largest step.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "fleet"
sys.path[:0] = [str(HERE), str(HERE.parent)]

import httpx  # noqa: E402
from fleet_clients import VIEWS, Rig, Stats, dashboard, feeder  # noqa: E402
from procs import ADMIN, REPO, Brain, rss_mb  # noqa: E402
from scale import percentile  # noqa: E402

GPUS_PER_RIG = 5
TICK = os.sysconf("SC_CLK_TCK")
LOGS = ("events.jsonl", "brain.log", "state/training_samples.jsonl")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (fields 14 and 15 of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def runqueue_seconds(pid: int) -> float:
    """Time the process's threads waited for a CPU (field 2 of /proc/<pid>/schedstat is
    the main thread's; the task/ entries hold every thread's)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


async def loop_lag(stats: Stats, stop: asyncio.Event) -> None:
    """How late the load generator's own event loop wakes: its share of every latency."""
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.1)
        stats.time("generator lag", time.perf_counter() - start - 0.1)


def fsync_probe(folder: Path, stats: Stats, stop: threading.Event) -> None:
    """What one fsync costs on the store's disk while the step runs (a 4 KiB append every
    0.2 s beside the database): the floor under every durable commit's latency."""
    with (folder / "fsync-probe").open("ab") as handle:
        while not stop.wait(0.2):
            handle.write(b"x" * 4096)
            handle.flush()
            start = time.perf_counter()
            os.fsync(handle.fileno())
            stats.time("fsync", time.perf_counter() - start)


def db_bytes(path: Path) -> int:
    """Bytes of live pages (page_count - freelist), WAL included: what the data takes."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    return (pages - free) * size


def log_bytes(root: Path) -> int:
    return sum((root / name).stat().st_size for name in LOGS if (root / name).exists())


def summary(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "p50_ms": None, "p99_ms": None}
    return {"n": len(values), "p50_ms": round(statistics.median(values), 2),
            "p99_ms": round(percentile(values, 0.99), 2)}  # fmt: skip


# The routes the breakdown follows (airig.brain.timing.py labels), and their names here.
ROUTES = {
    "POST /v1/exchange": "exchange", "POST /v1/workers/heartbeat": "heartbeat",
    "POST /v1/tasks/{task_id}/heartbeat": "renew", "GET /v1/workers": "poll /v1/workers",
    "POST /v1/plans": "submit",
}  # fmt: skip
PHASES = ("before", "store_wait", "statements", "commit", "between", "after")
SLOW_MS = 40.0  # the brain logs each request over this with its phases: the tail's anatomy


def scrape(url: str) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """The brain's per-route, per-phase histograms: {(route, phase): [(le, count)]}; the
    whole request is phase "total"."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    found: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in ("airig_brain_request_phase_seconds", "airig_brain_request_seconds"):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                continue
            key = (sample.labels["route"], sample.labels.get("phase", "total"))
            found.setdefault(key, []).append((float(sample.labels["le"]), sample.value))
    return found


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """histogram_quantile as Prometheus computes it: linear within the bucket."""
    buckets = sorted(buckets)
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return None
    rank, low, below = q * total, 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return low * 1000
            share = (rank - below) / (count - below) if count > below else 1.0
            return round((low + (le - low) * share) * 1000, 2)
        low, below = le, count
    return None


def breakdown(before: dict, after: dict) -> dict:
    """Per route of ROUTES: p50 / p99 ms of each phase and of the whole, over the window."""
    out: dict[str, dict] = {}
    for (route, phase), buckets in after.items():
        if route not in ROUTES:
            continue
        earlier = dict(before.get((route, phase), []))
        window = [(le, count - earlier.get(le, 0.0)) for le, count in buckets]
        out.setdefault(ROUTES[route], {})[phase] = {
            "p50_ms": quantile(window, 0.5), "p99_ms": quantile(window, 0.99),
        }  # fmt: skip
    return out


def slow_requests(log: Path, since: float, until: float) -> dict:
    """The brain's "slow request" lines (over SLOW_MS) logged in the window: per route, how
    many, and the mean ms of each phase among them."""
    found: dict[str, list[dict]] = {}
    for line in log.read_text(errors="replace").splitlines():
        if '"slow request"' not in line:
            continue
        entry = json.loads(line)
        when = datetime.datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
        if not since <= when.timestamp() <= until or entry["route"] not in ROUTES:
            continue
        found.setdefault(ROUTES[entry["route"]], []).append(entry)
    return {
        route: {"n": len(entries), "ms": round(statistics.mean(e["ms"] for e in entries), 1),
                **{p: round(statistics.mean(e[f"{p}_ms"] for e in entries), 1) for p in PHASES}}
        for route, entries in found.items()
    }  # fmt: skip


async def join_tokens(url: str, rigs: int) -> list[str]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        tokens = []
        for n in range(rigs):
            answer = await client.post("/v1/tokens", json={"scope": "join", "name": f"rig{n:03d}"})
            answer.raise_for_status()
            tokens.append(answer.json()["token"])
    return tokens


async def drive(brain: Brain, workers: int, args: argparse.Namespace) -> dict:
    stats, stop = Stats(), asyncio.Event()
    counts = [GPUS_PER_RIG] * (workers // GPUS_PER_RIG)
    if workers % GPUS_PER_RIG:
        counts.append(workers % GPUS_PER_RIG)
    tokens = await join_tokens(brain.url, len(counts))
    rigs = [Rig(brain.url, f"rig{n:03d}", tokens[n], gpus, stats) for n, gpus in enumerate(counts)]
    submitted = [0, 0]
    jobs = [asyncio.create_task(feeder(brain.url, ADMIN, workers, stats, stop, submitted))]
    while submitted[0] == 0 and not stats.errors:
        await asyncio.sleep(0.1)
    everyone = [w for rig in rigs for w in rig.workers]
    for batch in range(0, len(everyone), 50):  # a fleet's rigs come up over a few seconds
        await asyncio.gather(*(w.register() for w in everyone[batch : batch + 50]))
    task_s = tuple(float(x) for x in args.task_s.split(","))
    for w in everyone:
        jobs.append(asyncio.create_task(w.run(stop, task_s, args.load_s)))
        jobs.append(asyncio.create_task(w.heartbeats(stop)))
    jobs += [asyncio.create_task(dashboard(brain.url, ADMIN, v, stats, stop)) for v in VIEWS]
    jobs.append(asyncio.create_task(loop_lag(stats, stop)))
    await asyncio.sleep(args.warmup_s)

    root = brain.root
    db_path = root / "state" / "brain.db"
    before = (time.monotonic(), cpu_seconds(brain.pid), time.process_time(),
              db_bytes(db_path), log_bytes(root), runqueue_seconds(brain.pid))  # fmt: skip
    phases_before, window_start = scrape(brain.url), time.time()
    probing = threading.Event()
    probe = threading.Thread(target=fsync_probe, args=(db_path.parent, stats, probing))
    probe.start()
    stats.recording = True
    await asyncio.sleep(args.step_s)
    stats.recording = False
    probing.set()
    probe.join()
    after = (time.monotonic(), cpu_seconds(brain.pid), time.process_time(),
             db_bytes(db_path), log_bytes(root), runqueue_seconds(brain.pid))  # fmt: skip
    phases_after, window_end = scrape(brain.url), time.time()
    load = os.getloadavg()[0]
    rss = rss_mb(brain.pid)
    stop.set()
    await asyncio.wait(jobs, timeout=40)
    for rig in rigs:
        await rig.close()
    wall = after[0] - before[0]
    per_hour = 3600 / wall
    brain_cpu = (after[1] - before[1]) / wall
    return {
        "workers": workers, "rigs": len(rigs), "seconds": round(wall, 1),
        "exchange": summary(stats.latency["exchange"]),
        "heartbeat": summary(stats.latency["heartbeat"]),
        "renew": summary(stats.latency["renew"]),
        "polls": {k: summary(v) for k, v in stats.latency.items() if k.startswith("poll")},
        "submit": summary(stats.latency["submit"]),
        "tasks_per_s": round(stats.completed / wall, 2), "loads": stats.loads,
        "empty_claims": stats.empty_claims, "renew_races": stats.renew_races,
        "retries": stats.retries,
        "brain_cores": round(brain_cpu, 3),
        "brain_cpu_ms_per_task": round(1000 * brain_cpu * wall / max(1, stats.completed), 2),
        "generator_cores": round((after[2] - before[2]) / wall, 3),
        "generator_lag": summary(stats.latency["generator lag"]),
        "brain_waited_for_cpu": round((after[5] - before[5]) / wall, 3),
        "host_load": round(load, 2),
        "fsync": summary(stats.latency["fsync"]),
        "fsync_max_ms": round(max(stats.latency["fsync"], default=0), 1),
        "rss_mb": round(rss, 1),
        "db_mb_per_h": round((after[3] - before[3]) * per_hour / 2**20, 1),
        "logs_mb_per_h": round((after[4] - before[4]) * per_hour / 2**20, 1),
        "errors": len(stats.errors), "first_errors": stats.errors[:5],
        "phases": breakdown(phases_before, phases_after),
        "slow": slow_requests(root / "brain.log", window_start, window_end),
    }  # fmt: skip


def measure(workers: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="airig-fleet-", dir=args.state_dir) as tmp:
        brain = Brain(Path(tmp), {"BRAIN_SLOW_REQUEST_MS": str(SLOW_MS)}, code=args.code)
        try:
            brain.start()
            row = asyncio.run(drive(brain, workers, args))
        finally:
            brain.stop()
    print(f"  {workers} workers: {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def verdicts(rows: list[dict]) -> list[str]:
    last, first = rows[-1], rows[0]
    n = last["workers"]

    def check(ok: bool, text: str) -> str:
        return f"{'PASS' if ok else 'FAIL'} {text}"

    ex, hb, rn = last["exchange"]["p99_ms"], last["heartbeat"]["p99_ms"], last["renew"]["p99_ms"]
    growth = last["brain_cpu_ms_per_task"] / first["brain_cpu_ms_per_task"]
    errors = sum(r["errors"] for r in rows)
    return [
        check(ex is not None and ex < 50, f"exchange p99 {ex} ms at {n} workers (target < 50 ms)"),
        check(hb is not None and hb < 50, f"heartbeat p99 {hb} ms at {n} workers (target < 50 ms)"),
        check(rn is not None and rn < 50, f"renew p99 {rn} ms at {n} workers (target < 50 ms)"),
        check(
            last["brain_cores"] < 1,
            f"brain CPU {last['brain_cores']} cores at {n} workers (target < 1 core)",
        ),  # fmt: skip
        check(errors == 0, f"{errors} errors over all steps (target 0)"),
        check(
            growth <= 1.25,
            f"brain CPU per task {last['brain_cpu_ms_per_task']} ms at {n} "
            f"workers, {growth:.2f}x the {first['workers']}-worker step's (target <= 1.25x: "
            "linear in workers)",
        ),  # fmt: skip
    ]


def markdown(rows: list[dict]) -> str:
    lines = [
        "| workers | rigs | exchange p50 / p99 ms | heartbeat p50 / p99 ms | tasks/s "
        "| brain cores | CPU ms/task | load generator cores | brain RSS MB | DB MB/h "
        "| logs MB/h | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ex, hb = r["exchange"], r["heartbeat"]
        lines.append(
            f"| {r['workers']} | {r['rigs']} | {ex['p50_ms']} / {ex['p99_ms']} "
            f"| {hb['p50_ms']} / {hb['p99_ms']} | {r['tasks_per_s']} | {r['brain_cores']} "
            f"| {r['brain_cpu_ms_per_task']} | {r['generator_cores']} | {r['rss_mb']} "
            f"| {r['db_mb_per_h']} | {r['logs_mb_per_h']} | {r['errors']} |"
        )
    return "\n".join(lines)


def phase_table(row: dict) -> str:
    """Where the time of one step's requests went: each phase's p50 / p99 inside the brain
    (its histograms), then the mean of each phase over the requests slower than SLOW_MS
    (its slow-request lines): what the tail is made of."""
    head = " | ".join(PHASES)
    lines = [
        f"| {row['workers']} workers | requests | whole p50 / p99 ms | {head} |",
        "|---|---|---:|" + "---:|" * len(PHASES),
    ]
    for route in dict.fromkeys(ROUTES.values()):
        phases = row.get("phases", {}).get(route)
        if not phases or "total" not in phases:
            continue
        whole = phases["total"]
        cells = " | ".join(
            f"{phases.get(p, {}).get('p50_ms')} / {phases.get(p, {}).get('p99_ms')}"
            for p in PHASES
        )  # fmt: skip
        lines.append(f"| {route} | all (p50 / p99 ms) | {whole['p50_ms']} / {whole['p99_ms']} "
                     f"| {cells} |")  # fmt: skip
        slow = row.get("slow", {}).get(route)
        if slow:
            means = " | ".join(str(slow[p]) for p in PHASES)
            lines.append(f"| {route} | {slow['n']} over {SLOW_MS:g} ms (mean ms) | {slow['ms']} "
                         f"| {means} |")  # fmt: skip
    return "\n".join(lines)


def notes(rows: list[dict], args: argparse.Namespace) -> list[str]:
    cores = len(os.sched_getaffinity(0))
    out = [
        f"tasks {args.task_s.replace(',', '-')} s (embeddings a third), model loads ~{args.load_s}"
        f" s, {args.step_s:g} s recorded per step after {args.warmup_s:g} s warm-up; brain and "
        f"load generator share this host's {cores} cores",
    ]
    for r in rows:
        polls = ", ".join(f"`{k[5:]}` {v['p50_ms']} / {v['p99_ms']}" for k, v in r["polls"].items())
        out.append(f"{r['workers']} workers: renew p50/p99 {r['renew']['p50_ms']} / "
                   f"{r['renew']['p99_ms']} ms; dashboard polls p50/p99 ms: {polls}; "
                   f"empty claims {r['empty_claims']}, model loads {r['loads']}, renewals that "
                   f"crossed their completion {r['renew_races']}, requests retried after a "
                   f"transport error {r['retries']}")  # fmt: skip
        out.append(f"{r['workers']} workers: host load average {r['host_load']} (cores: "
                   f"{cores}), brain threads waited {r['brain_waited_for_cpu']} s per s for a "
                   f"CPU; generator's event loop late by p50/p99 {r['generator_lag']['p50_ms']}"
                   f" / {r['generator_lag']['p99_ms']} ms; one fsync on the store's disk "
                   f"p50/p99/max {r['fsync']['p50_ms']} / {r['fsync']['p99_ms']} / "
                   f"{r['fsync_max_ms']} ms")  # fmt: skip
        if r["first_errors"]:
            out.append(f"{r['workers']} workers, first errors: {r['first_errors']}")
    return out


def tail_row(label: str, code: str, r: dict) -> tuple[str, bool]:
    ex, hb, rn, poll = r["exchange"], r["heartbeat"], r["renew"], r["polls"]["poll /v1/workers"]
    ok = (all(x["p99_ms"] is not None and x["p99_ms"] < 50 for x in (ex, hb, rn))
          and r["brain_cores"] < 1 and r["errors"] == 0)  # fmt: skip
    line = (f"| {label} | {code} | {ex['p50_ms']} / **{ex['p99_ms']}** | {hb['p99_ms']} "
            f"| {rn['p99_ms']} | {poll['p50_ms']} / {poll['p99_ms']} | {r['fsync']['p99_ms']} "
            f"| {r['brain_cores']} | {r['errors']} | {'PASS' if ok else 'FAIL'} |")  # fmt: skip
    return line, ok


def tail(args: argparse.Namespace, workers: int) -> int:
    """Issue 26's protocol: the largest step on tmpfs, then on this disk, each with the
    tree at ``--before`` (e.g. a ``git archive`` of the parent commit) and this one, back
    to back. Target per row: exchange, heartbeat and renew p99 < 50 ms, brain < 1 core,
    no errors."""
    head = ("| store | brain | exchange p50 / p99 ms | heartbeat p99 ms | renew p99 ms "
            "| `/v1/workers` poll p50 / p99 ms | one fsync p99 ms | brain cores | errors "
            "| target |")  # fmt: skip
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    anatomies, verdicts_ok = [], []
    for label, folder in (("tmpfs", "/dev/shm"), ("disk", None)):
        for code, tree in (("before", args.before), ("after", REPO)):
            if tree is None:
                continue
            run = argparse.Namespace(**{**vars(args), "state_dir": folder, "code": tree})
            row = measure(workers, run)
            line, ok = tail_row(label, code, row)
            lines.append(line)
            if code == "after":
                verdicts_ok.append(ok)
                anatomies.append(f"{label}, this tree:\n\n{phase_table(row)}")
    text = "\n".join(lines) + "\n\n" + "\n\n".join(anatomies)
    print(text)
    if args.readme:
        write_section(args.readme, text, name="fleet-tail")
    return 0 if all(verdicts_ok) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="10,50,100,500")
    parser.add_argument("--step-s", type=float, default=90.0)
    parser.add_argument("--warmup-s", type=float, default=25.0)
    parser.add_argument("--task-s", default="2,10", help="LLM task length range, seconds")
    parser.add_argument("--load-s", type=float, default=3.0)
    parser.add_argument(
        "--state-dir",
        help="where the brain's store and logs go (default: "
        "the system's temp dir; /dev/shm takes the disk's fsync out)",
    )
    parser.add_argument(
        "--code",
        type=Path,
        default=REPO,
        help="run the brain from this tree (e.g. a `git archive` of an older "
        "commit) for a before/after in one sitting",
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--tail", action="store_true",
        help="the largest --workers step on tmpfs and on the disk (issue 26), with --before",
    )  # fmt: skip
    parser.add_argument("--before", type=Path, help="with --tail: the tree to compare against")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--readme", type=Path, help=f"rewrite this file's {NAME} section")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.step_s, args.warmup_s = "10,50", 20.0, 15.0
    sizes = [int(n) for n in args.workers.split(",")]
    if any(n < 1 or math.ceil(n / GPUS_PER_RIG) > 100 for n in sizes):
        parser.error("--workers: 1 to 500 each (at most 100 rigs of 5 GPUs)")
    if args.tail:
        return tail(args, max(sizes))
    rows = [measure(n, args) for n in sizes]
    checks = verdicts(rows)
    extra = notes(rows, args)
    anatomy = phase_table(rows[-1])
    print(markdown(rows))
    print(anatomy)
    print("\n".join(checks + extra))
    if args.readme:
        bullets = [f"- {c}" for c in checks + extra]
        write_section(args.readme, "\n".join([markdown(rows), "", anatomy, "", *bullets]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "verdicts": checks, "notes": extra},
                                        indent=1))  # fmt: skip
    return 0 if all(c.startswith("PASS") for c in checks) else 1


def write_section(readme: Path, text: str, name: str = NAME) -> None:
    """Replace what stands between this benchmark's markers in ``readme``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    head, rest = readme.read_text().split(start, 1)
    _, tail = rest.split(end, 1)
    stamp = f"Measured {datetime.date.today().isoformat()} on {os.cpu_count()} cores."
    readme.write_text(f"{head}{start}\n{stamp}\n\n{text}\n{end}{tail}")


if __name__ == "__main__":
    sys.exit(main())
