"""Fleet benchmark: one real brain serving 10 to 500 simulated GPU workers over HTTP.

Usage: python benchmarks/fleet.py [--workers 10,50,100,500] [--step-s 90] [--warmup-s 25]
                                  [--task-s 2,10] [--load-s 3] [--quick]
                                  [--store sqlite|postgres] [--brains N] [--kill-brain-at S]
                                  [--compare] [--json results/fleet.json]

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

``--store postgres --brains N`` (issue 38): N brain processes on one throwaway, durable
PostgreSQL database (``fleet_store.py``); worker i talks to brain i % N and moves to the
next on a connection error (a client-side round robin standing in for a load balancer).
CPU is reported per brain and for the database server. ``--kill-brain-at S`` SIGKILLs
brain 0 (the one running the timers) S seconds into the step; after the step the feeder
stops, the fleet drains the queue, and the store is audited: tasks never completed
(lost), tasks completed twice, and every error a client saw. ``--compare`` runs issue
38's table in one sitting (SQLite/1, PostgreSQL/1, PostgreSQL/N at the largest step,
the kill run, then the other steps on PostgreSQL/N) and names the largest step meeting
the target: exchange, heartbeat and renew p99 < 50 ms, no errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import math
import os
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "fleet"
sys.path[:0] = [str(HERE), str(HERE.parent)]

import httpx  # noqa: E402
from fleet_clients import VIEWS, Rig, Stats, Upstream, dashboard, feeder  # noqa: E402
from fleet_store import Fleet, fleet  # noqa: E402
from procs import ADMIN, REPO, rss_mb  # noqa: E402
from scale import percentile  # noqa: E402

GPUS_PER_RIG = 5
MAX_RIGS = 200  # rig names are rig000..rig199
DRAIN_S = 120.0  # after a kill: a lease (30 s) to expire and be reaped, the queue to empty
TARGET_MS = 50.0
TICK = os.sysconf("SC_CLK_TCK")
LOGS = ("events.jsonl", "brain.log", "state/training_samples.jsonl")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (fields 14 and 15 of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu_with_children(pid: int) -> float:
    """A server's CPU: its own, its reaped children's (cutime + cstime, fields 16 and 17)
    and its live children's: PostgreSQL's backends end and are reaped by the postmaster."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    total = sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            child = stat.read_text().rsplit(")", 1)[1].split()
            if int(child[1]) == pid:
                total += (int(child[11]) + int(child[12])) / TICK
        except (OSError, IndexError, ValueError):
            continue  # a process that ended meanwhile
    return total


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


async def scrape_all(urls: list[str | None]) -> list[dict | None]:
    """Every brain's histograms, off the event loop (the clients keep running); a brain
    that does not answer in time (or None: killed) gives None and is left out."""

    async def one(url: str | None) -> dict | None:
        if url is None:
            return None
        try:
            return await asyncio.to_thread(scrape, url)
        except httpx.HTTPError as exc:
            print(f"  /metrics of {url}: {type(exc).__name__}", file=sys.stderr, flush=True)
            return None

    return list(await asyncio.gather(*(one(url) for url in urls)))


def scrape(url: str) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """The brain's per-route, per-phase histograms: {(route, phase): [(le, count)]}; the
    whole request is phase "total"."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"},
                     timeout=60).text  # fmt: skip
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


def breakdown(before: list[dict | None], after: list[dict | None]) -> dict:
    """Per route of ROUTES: p50 / p99 ms of each phase and of the whole, over the window,
    the brains' histograms added up (a brain killed in the window has no "after": left out)."""
    windows: dict[tuple[str, str], dict[float, float]] = {}
    for earlier_all, later in zip(before, after, strict=True):
        if earlier_all is None or later is None:
            continue
        for (route, phase), buckets in later.items():
            if route not in ROUTES:
                continue
            earlier = dict(earlier_all.get((route, phase), []))
            summed = windows.setdefault((route, phase), {})
            for le, count in buckets:
                summed[le] = summed.get(le, 0.0) + count - earlier.get(le, 0.0)
    out: dict[str, dict] = {}
    for (route, phase), summed in windows.items():
        window = list(summed.items())
        out.setdefault(ROUTES[route], {})[phase] = {
            "p50_ms": quantile(window, 0.5), "p99_ms": quantile(window, 0.99),
        }  # fmt: skip
    return out


def slow_requests(logs: list[Path], since: float, until: float) -> dict:
    """The brains' "slow request" lines (over SLOW_MS) logged in the window: per route, how
    many, and the mean ms of each phase among them."""
    found: dict[str, list[dict]] = {}
    lines = [line for log in logs for line in log.read_text(errors="replace").splitlines()]
    for line in lines:
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


class Meter:
    """The brains' and the store server's counters; a killed brain's stay at what they
    read just before its kill (its /proc entry may be gone by the end)."""

    def __init__(self, fl: Fleet) -> None:
        self.fl = fl
        self.last: dict[int, tuple[float, float]] = {}

    def brains(self) -> list[tuple[float, float]]:
        """(CPU seconds, seconds waited for a CPU) of each brain."""
        out = []
        for n, brain in enumerate(self.fl.brains):
            if n not in self.fl.killed or n not in self.last:
                with contextlib.suppress(OSError, IndexError, ValueError):  # gone: the last stands
                    self.last[n] = (cpu_seconds(brain.pid), runqueue_seconds(brain.pid))
            out.append(self.last.get(n, (0.0, 0.0)))
        return out

    def server(self) -> float:
        cluster = self.fl.cluster
        if cluster is None or cluster.process is None:
            return 0.0
        return cpu_with_children(cluster.process.pid)

    def sample(self, logs: list[Path]) -> dict:
        return {"t": time.monotonic(), "brains": self.brains(), "gen": time.process_time(),
                "db": self.fl.db_bytes(), "logs": sum(log_bytes(p) for p in logs),
                "server": self.server()}  # fmt: skip


async def drive(fl: Fleet, workers: int, args: argparse.Namespace,
                kill_at: float | None = None) -> dict:  # fmt: skip
    stats, stop, feeding = Stats(), asyncio.Event(), asyncio.Event()
    urls, last = fl.urls, len(fl.brains) - 1
    counts = [GPUS_PER_RIG] * (workers // GPUS_PER_RIG)
    if workers % GPUS_PER_RIG:
        counts.append(workers % GPUS_PER_RIG)
    tokens = await join_tokens(urls[0], len(counts))
    # worker i of the fleet starts on brain i % N (Rig: first + its GPU index)
    firsts = [sum(counts[:n]) for n in range(len(counts))]
    rigs = [Rig(urls, f"rig{n:03d}", tokens[n], gpus, stats, firsts[n])
            for n, gpus in enumerate(counts)]  # fmt: skip
    submitted = [0, 0]
    # The feeder talks to the last brain, the one a kill never takes: a submit cut off
    # mid-commit cannot be sent again safely (it may have been stored).
    jobs = [asyncio.create_task(feeder(Upstream(urls, last), ADMIN, workers, stats, feeding,
                                       submitted))]  # fmt: skip
    while submitted[0] == 0 and not stats.errors:
        await asyncio.sleep(0.1)
    everyone = [w for rig in rigs for w in rig.workers]
    for batch in range(0, len(everyone), 50):  # a fleet's rigs come up over a few seconds
        await asyncio.gather(*(w.register() for w in everyone[batch : batch + 50]))
    lo, hi = (float(x) for x in args.task_s.split(","))
    for w in everyone:
        jobs.append(asyncio.create_task(w.run(stop, (lo, hi), args.load_s)))
        jobs.append(asyncio.create_task(w.heartbeats(stop)))
    jobs += [asyncio.create_task(dashboard(Upstream(urls, n), ADMIN, v, stats, stop))
             for n, v in enumerate(VIEWS)]  # fmt: skip
    jobs.append(asyncio.create_task(loop_lag(stats, stop)))
    await asyncio.sleep(args.warmup_s)

    meter, roots = Meter(fl), [b.root for b in fl.brains]
    before = meter.sample(roots)
    phases_before, window_start = await scrape_all(list(urls)), time.time()
    probing = threading.Event()
    probe = threading.Thread(target=fsync_probe, args=(fl.state, stats, probing))
    probe.start()
    stats.recording = True
    if kill_at is None:
        await asyncio.sleep(args.step_s)
    else:
        await asyncio.sleep(kill_at)
        meter.brains()  # the killed brain's last counters
        fl.kill(0)
        await asyncio.sleep(args.step_s - kill_at)
    stats.recording = False
    probing.set()
    probe.join()
    after = meter.sample(roots)
    phases_after = await scrape_all([None if n in fl.killed else u for n, u in enumerate(urls)])
    window_end, load = time.time(), os.getloadavg()[0]
    rss = sum(rss_mb(b.pid) for b in fl.alive())
    feeding.set()
    audit, drain_s = None, 0.0
    if kill_at is not None:  # run until every submitted task is done, then count
        began = time.monotonic()
        while fl.unfinished() and time.monotonic() - began < DRAIN_S:
            await asyncio.sleep(1.0)
        drain_s = time.monotonic() - began
        audit = fl.audit()
        audit["completed_twice_workers"] = sum(len(d) > 1 for d in stats.done.values())
    stop.set()
    await asyncio.wait(jobs, timeout=40)
    for rig in rigs:
        await rig.close()
    wall = after["t"] - before["t"]
    per_hour = 3600 / wall
    each = [(a[0] - b[0]) / wall for a, b in zip(after["brains"], before["brains"], strict=True)]
    waited = sum(a[1] - b[1] for a, b in zip(after["brains"], before["brains"], strict=True))
    brain_cpu = sum(each)
    return {
        "workers": workers, "rigs": len(rigs), "seconds": round(wall, 1),
        "store": fl.store, "brains": len(fl.brains),
        "killed_at_s": kill_at, "failovers": stats.failovers,
        "exchange": summary(stats.latency["exchange"]),
        "heartbeat": summary(stats.latency["heartbeat"]),
        "renew": summary(stats.latency["renew"]),
        "polls": {k: summary(v) for k, v in stats.latency.items() if k.startswith("poll")},
        "submit": summary(stats.latency["submit"]),
        "tasks_per_s": round(stats.completed / wall, 2), "loads": stats.loads,
        "empty_claims": stats.empty_claims, "renew_races": stats.renew_races,
        "retries": stats.retries,
        "brain_cores": round(brain_cpu, 3),
        "per_brain_cores": [round(c, 3) for c in each],
        "postgres_cores": round((after["server"] - before["server"]) / wall, 3),
        "brain_cpu_ms_per_task": round(1000 * brain_cpu * wall / max(1, stats.completed), 2),
        "generator_cores": round((after["gen"] - before["gen"]) / wall, 3),
        "generator_lag": summary(stats.latency["generator lag"]),
        "brain_waited_for_cpu": round(waited / wall, 3),
        "host_load": round(load, 2),
        "fsync": summary(stats.latency["fsync"]),
        "fsync_max_ms": round(max(stats.latency["fsync"], default=0), 1),
        "rss_mb": round(rss, 1),
        "db_mb_per_h": round((after["db"] - before["db"]) * per_hour / 2**20, 1),
        "logs_mb_per_h": round((after["logs"] - before["logs"]) * per_hour / 2**20, 1),
        "errors": len(stats.errors), "first_errors": stats.errors[:5],
        "phases": breakdown(phases_before, phases_after),
        "slow": slow_requests([r / "brain.log" for r in roots], window_start, window_end),
        "audit": audit, "drain_s": round(drain_s, 1),
    }  # fmt: skip


def measure(workers: int, args: argparse.Namespace, store: str | None = None,
            brains: int | None = None, kill_at: float | None = None) -> dict:  # fmt: skip
    store, brains = store or args.store, brains or args.brains
    extra = {"BRAIN_SLOW_REQUEST_MS": str(SLOW_MS)}
    with fleet(store, brains, args.state_dir, args.code, extra) as fl:
        row = asyncio.run(drive(fl, workers, args, kill_at))
    print(f"  {row_label(row)}, {workers} workers: {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def row_label(row: dict) -> str:
    """The run in words: "PostgreSQL, 2 brains, brain 0 killed at 20 s"."""
    store = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[row.get("store", "sqlite")]
    n = row.get("brains", 1)
    text = f"{store}, {n} brain{'s' if n > 1 else ''}"
    if row.get("killed_at_s") is not None:
        text += f", brain 0 killed at {row['killed_at_s']:g} s"
    return text


def check(ok: bool, text: str) -> str:
    return f"{'PASS' if ok else 'FAIL'} {text}"


def p99_ok(row: dict) -> bool:
    """The latency target of a step: exchange, heartbeat and renew p99 < 50 ms, no errors."""
    return row["errors"] == 0 and all(
        row[k]["p99_ms"] is not None and row[k]["p99_ms"] < TARGET_MS
        for k in ("exchange", "heartbeat", "renew")
    )


def cpu_check(row: dict) -> str:
    n, cores = row["workers"], row.get("per_brain_cores", [row["brain_cores"]])
    if len(cores) == 1:
        return check(cores[0] < 1, f"brain CPU {cores[0]} cores at {n} workers (target < 1 core)")
    spelled = " + ".join(str(c) for c in cores)
    text = (f"brains' CPU {spelled} cores at {n} workers, PostgreSQL {row['postgres_cores']} "
            "(target < 1 core per brain)")  # fmt: skip
    return check(max(cores) < 1, text)


def latency_checks(row: dict) -> list[str]:
    n, where = row["workers"], row_label(row)
    return [
        check(row[k]["p99_ms"] is not None and row[k]["p99_ms"] < TARGET_MS,
              f"{k} p99 {row[k]['p99_ms']} ms at {n} workers, {where} (target < 50 ms)")
        for k in ("exchange", "heartbeat", "renew")
    ]  # fmt: skip


def kill_checks(row: dict) -> list[str]:
    """A step with a brain SIGKILLed: nothing lost, nothing done twice, no client error."""
    audit, at = row["audit"], row["killed_at_s"]
    lost = audit["lost"]
    twice = max(audit["completed_twice_events"], audit["completed_twice_workers"])
    return [
        check(row["errors"] == 0, f"{row['errors']} client errors at {row['workers']} workers "
              f"with brain 0 SIGKILLed {at:g} s into the step ({row['failovers']} moves of a "
              "client to the next brain; target 0)"),
        check(lost == 0, f"{lost} tasks lost of {audit['submitted']} submitted after the run "
              f"drained ({row['drain_s']} s; not SUCCEEDED: {audit['lost_by_state'] or 'none'}; "
              "target 0)"),
        check(twice == 0, f"{twice} tasks completed twice (task_completed events: "
              f"{audit['completed_twice_events']}, workers' accepted leases: "
              f"{audit['completed_twice_workers']}; {audit['retried_tasks']} tasks ran a second "
              "attempt; target 0)"),
    ]  # fmt: skip


def largest_fleet(rows: list[dict]) -> str:
    """The largest step meeting the latency target (a measurement, not a verdict)."""
    steps = sorted(rows, key=lambda r: r["workers"])
    where = row_label(steps[-1])
    tried = ", ".join(f"{r['workers']} ({r['exchange']['p99_ms']} ms)" for r in steps)
    good = [r["workers"] for r in steps if p99_ok(r)]
    best = f"{max(good)} workers" if good else "none of the steps"
    return (f"largest fleet {where} serve with exchange, heartbeat and renew p99 < 50 ms and no "
            f"errors: {best} (steps, exchange p99: {tried})")  # fmt: skip


def verdicts(rows: list[dict]) -> list[str]:
    plain = [r for r in rows if r.get("killed_at_s") is None]
    last, first = plain[-1], plain[0]
    n = last["workers"]
    growth = last["brain_cpu_ms_per_task"] / first["brain_cpu_ms_per_task"]
    errors = sum(r["errors"] for r in plain)
    out = [
        *latency_checks(last),
        cpu_check(last),
        check(errors == 0, f"{errors} errors over all steps (target 0)"),
        check(
            growth <= 1.25,
            f"brain CPU per task {last['brain_cpu_ms_per_task']} ms at {n} "
            f"workers, {growth:.2f}x the {first['workers']}-worker step's (target <= 1.25x: "
            "linear in workers)",
        ),  # fmt: skip
    ]
    for row in rows:
        if row.get("killed_at_s") is not None:
            out += kill_checks(row)
    return out


def markdown(rows: list[dict]) -> str:
    pg = any(r.get("store") == "postgres" for r in rows)
    lines = [
        "| workers | rigs | exchange p50 / p99 ms | heartbeat p50 / p99 ms | tasks/s "
        "| brain cores | CPU ms/task | load generator cores | brain RSS MB | DB MB/h "
        f"| logs MB/h | errors |{' PostgreSQL cores |' if pg else ''}",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if pg else ""),
    ]
    for r in rows:
        ex, hb = r["exchange"], r["heartbeat"]
        lines.append(
            f"| {r['workers']} | {r['rigs']} | {ex['p50_ms']} / {ex['p99_ms']} "
            f"| {hb['p50_ms']} / {hb['p99_ms']} | {r['tasks_per_s']} | {r['brain_cores']} "
            f"| {r['brain_cpu_ms_per_task']} | {r['generator_cores']} | {r['rss_mb']} "
            f"| {r['db_mb_per_h']} | {r['logs_mb_per_h']} | {r['errors']} |"
            + (f" {r.get('postgres_cores')} |" if pg else "")
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
        who = f"{r['workers']} workers"
        if r.get("store", "sqlite") != "sqlite" or r.get("brains", 1) > 1:
            who = f"{row_label(r)}, {who}"
            out.append(f"{who}: brains' cores {r['per_brain_cores']}, PostgreSQL's server "
                       f"{r['postgres_cores']} cores, moves of a client to the next brain after a "
                       f"transport error {r['failovers']}")  # fmt: skip
        polls = ", ".join(f"`{k[5:]}` {v['p50_ms']} / {v['p99_ms']}" for k, v in r["polls"].items())
        out.append(f"{who}: renew p50/p99 {r['renew']['p50_ms']} / "
                   f"{r['renew']['p99_ms']} ms; dashboard polls p50/p99 ms: {polls}; "
                   f"empty claims {r['empty_claims']}, model loads {r['loads']}, renewals that "
                   f"crossed their completion {r['renew_races']}, requests retried after a "
                   f"transport error {r['retries']}")  # fmt: skip
        out.append(f"{who}: host load average {r['host_load']} (cores: "
                   f"{cores}), brain threads waited {r['brain_waited_for_cpu']} s per s for a "
                   f"CPU; generator's event loop late by p50/p99 {r['generator_lag']['p50_ms']}"
                   f" / {r['generator_lag']['p99_ms']} ms; one fsync on the store's disk "
                   f"p50/p99/max {r['fsync']['p50_ms']} / {r['fsync']['p99_ms']} / "
                   f"{r['fsync_max_ms']} ms")  # fmt: skip
        if r["first_errors"]:
            out.append(f"{who}, first errors: {r['first_errors']}")
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


def compare_row(r: dict) -> str:
    audit = r.get("audit") or {}
    lost = audit.get("lost", "")
    twice = (max(audit["completed_twice_events"], audit["completed_twice_workers"])
             if audit else "")  # fmt: skip
    ok = p99_ok(r) and max(r["per_brain_cores"]) < 1 and lost in ("", 0) and twice in ("", 0)
    return (f"| {row_label(r)} | {r['workers']} | {r['exchange']['p50_ms']} / "
            f"**{r['exchange']['p99_ms']}** | {r['heartbeat']['p99_ms']} | {r['renew']['p99_ms']} "
            f"| {r['tasks_per_s']} | {' + '.join(str(c) for c in r['per_brain_cores'])} "
            f"| {r['postgres_cores']} | {r['fsync']['p99_ms']} | {r['errors']} | {lost} "
            f"| {twice} | {'PASS' if ok else 'FAIL'} |")  # fmt: skip


def compare(args: argparse.Namespace, sizes: list[int]) -> tuple[str, list[str], list[dict]]:
    """Issue 38's protocol, in one sitting so the host's load is alike: at ``--compare-at``
    workers SQLite with one brain, PostgreSQL with one, PostgreSQL with ``--brains`` (2
    unless more), that again with brain 0 SIGKILLed (``--kill-brain-at``), then the other steps
    with ``--brains``: the largest fleet they serve under the target."""
    top, many = args.compare_at, max(2, args.brains)
    runs = [("sqlite", 1, None, top), ("postgres", 1, None, top), ("postgres", many, None, top)]
    if args.kill_brain_at is not None:
        runs.append(("postgres", many, args.kill_brain_at, top))
    runs += [("postgres", many, None, n) for n in sorted(set(sizes)) if n != top]
    heads = 3 + (args.kill_brain_at is not None)
    rows = [measure(n, args, store, brains, kill) for store, brains, kill, n in runs]
    head = ("| run | workers | exchange p50 / p99 ms | heartbeat p99 ms | renew p99 ms | tasks/s "
            "| brain cores | PostgreSQL cores | one fsync p99 ms | errors | lost | done twice "
            "| target |")  # fmt: skip
    table = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    table += [compare_row(r) for r in rows[:heads]]
    sweep = sorted((r for r in rows if r["brains"] == many and r["killed_at_s"] is None),
                   key=lambda r: r["workers"])  # fmt: skip
    main_row = rows[2]
    checks = [*latency_checks(main_row), cpu_check(main_row),
              check(main_row["errors"] == 0, f"{main_row['errors']} errors at {top} workers, "
                    f"{row_label(main_row)} (target 0)")]  # fmt: skip
    for row in rows:
        if row.get("killed_at_s") is not None:
            checks += kill_checks(row)
    checks.append(largest_fleet(sweep))
    text = "\n\n".join([
        "\n".join(table),
        f"{row_label(main_row)}, every step:\n\n{markdown(sweep)}",
        f"{row_label(main_row)}, {top} workers:\n\n{phase_table(main_row)}",
        f"{row_label(rows[0])}, {top} workers:\n\n{phase_table(rows[0])}",
    ])  # fmt: skip
    return text, checks, rows


def refusal(args: argparse.Namespace, sizes: list[int]) -> str | None:
    """What is wrong with these arguments, in one line; None when they can run."""
    if any(n < 1 or math.ceil(n / GPUS_PER_RIG) > MAX_RIGS for n in [*sizes, args.compare_at]):
        return f"--workers: 1 to {GPUS_PER_RIG * MAX_RIGS} each ({MAX_RIGS} rigs of 5 GPUs)"
    if args.brains < 1:
        return "--brains: 1 or more"
    if args.brains > 1 and args.store != "postgres" and not args.compare:
        return ("--brains above 1 needs --store postgres: brains share a PostgreSQL store, "
                "a SQLite file has one brain")  # fmt: skip
    if args.kill_brain_at is not None:
        if not args.compare and (args.store != "postgres" or args.brains < 2):
            return ("--kill-brain-at needs --store postgres and --brains 2 or more: the "
                    "fleet must have another brain to move to")  # fmt: skip
        if not 0 <= args.kill_brain_at < args.step_s:
            return f"--kill-brain-at: 0 to below --step-s ({args.step_s:g} s)"
    if args.tail and (args.compare or args.store != "sqlite"):
        return "--tail measures the SQLite brain; leave out --store, --brains and --compare"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="10,50,100,500")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite",
                        help="the brain's store: its SQLite file, or a throwaway durable "
                        "PostgreSQL cluster in the state folder")  # fmt: skip
    parser.add_argument(
        "--brains",
        type=int,
        default=1,
        help="brain processes on the one store (above 1: postgres only)",
    )
    parser.add_argument(
        "--kill-brain-at",
        type=float,
        metavar="S",
        help="SIGKILL brain 0 S seconds into each step, then drain and count "
        "tasks lost and completed twice (postgres, --brains 2 or more)",
    )
    parser.add_argument(
        "--compare-at",
        type=int,
        default=500,
        metavar="N",
        help="with --compare: the step the stores are compared at",
    )
    parser.add_argument("--compare", action="store_true",
                        help="--compare-at workers on SQLite/1 brain, PostgreSQL/1, PostgreSQL/"
                        "--brains (2 unless more), with --kill-brain-at once more with a kill, "
                        "then every other step on PostgreSQL/--brains")  # fmt: skip
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
    try:
        sizes = [int(n) for n in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers: a comma-separated list of numbers, not {args.workers!r}")
    wrong = refusal(args, sizes)
    if wrong:
        parser.error(wrong)
    if args.tail:
        return tail(args, max(sizes))
    if args.compare:
        text, checks, rows = compare(args, sizes)
        extra = notes(rows, args)
    else:
        rows = [measure(n, args) for n in sizes]
        checks = verdicts(rows)
        if len(rows) > 1:
            checks.append(largest_fleet([r for r in rows if r.get("killed_at_s") is None]))
        extra = notes(rows, args)
        text = "\n\n".join([markdown(rows), phase_table(rows[-1])])
    bullets = [f"- {c}" for c in checks + extra]
    print(text)
    print("\n".join(bullets))
    if args.readme:
        # the SQLite sweep keeps its section; runs on PostgreSQL have their own beside it
        plain = args.store == "sqlite" and args.brains == 1 and not args.compare
        write_section(args.readme, "\n".join([text, "", *bullets]),
                      name=NAME if plain else f"{NAME}-postgres")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "verdicts": checks, "notes": extra},
                                        indent=1))  # fmt: skip
    return 0 if all(c.startswith("PASS") for c in checks if c[:4] in ("PASS", "FAIL")) else 1


def write_section(readme: Path, text: str, name: str = NAME) -> None:
    """Replace what stands between this benchmark's markers in ``readme``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    head, rest = readme.read_text().split(start, 1)
    _, tail = rest.split(end, 1)
    stamp = f"Measured {datetime.date.today().isoformat()} on {os.cpu_count()} cores."
    readme.write_text(f"{head}{start}\n{stamp}\n\n{text}\n{end}{tail}")


if __name__ == "__main__":
    sys.exit(main())
