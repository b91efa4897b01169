"""Template amplification: the brain's peak memory under hostile claims, before and after.

Usage: python benchmarks/templates.py [--readers 32] [--repeats 15,4]
                                      [--result-bytes 1000000] [--claims 4] [--plans N]
                                      [--max-tasks 32] [--wait-s 5] [--inflight BYTES]
                                      [--before REF | --no-before]
                                      [--json results/templates.json]

The attack (issue 15): a small plan, task ``a`` plus ``--readers`` tasks whose payload
names ``{{ tasks.a.output }}`` ``--repeats`` times each. A real brain
(``python -m airig.brain``: uvicorn on 127.0.0.1) takes ``--plans`` copies of it over HTTP
(default one per claiming worker, so no claim comes back empty because another took every
reader); one worker claims every ``a`` and completes each with a ``--result-bytes`` text;
then ``--claims`` workers, registered beforehand, claim at once through
``POST /v1/exchange``, each asking for ``--max-tasks`` (32, the most a claim may ask for)
and long-polling ``--wait-s`` as an idle worker does (5 s, ``BRAIN_CLAIM_WAIT_S``): a
claim the brain-wide bound (``BRAIN_MAX_INFLIGHT_BYTES``, ``--inflight`` sets it) turns
away waits in it for room, so "served" counts the claims that got a task.
Reported: the brain's peak resident memory over its whole life (``VmHWM``), what the
claims carried, and where the readers ended.

Each scenario runs twice, in the same run: against this checkout and against the code
before the bound (``--before``, default: the parent of the commit that added
``MAX_CLAIM_BYTES`` to ``airig/brain/store/results.py``, or ``HEAD`` while it is uncommitted),
extracted with ``git archive`` into a temporary tree. Repeats 15 is the issue's attack
(15 MB per reader: over the per-task bound); 4 renders 4 MB per reader, just under
``BRAIN_MAX_RENDERED_BYTES`` (4 MiB), so the claims themselves carry it; with
``--claims 64`` that is issue 23's case (64 such answers at once). Target: the brain's
peak < 300 MB under every scenario with this checkout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import requests  # noqa: E402
from procs import ADMIN, BOOTSTRAP, REPO, Brain  # noqa: E402

TARGET_MB = 300.0
# The character the upstream result repeats (--fill): "x", or a control character that
# JSON escapes to six bytes, so an answer is six times the text it carries.
FILL = {"fill": "x"}
MARKER = b'"task_id":'


def peak_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def before_ref() -> str:
    """The parent of the commit that bounded claims, or HEAD while it is uncommitted."""
    found = subprocess.run(
        ["git", "log", "--format=%H", "-S", "MAX_CLAIM_BYTES", "--",
         "airig/brain/store/results.py", "airig/brain/results.py"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return f"{found[-1]}^" if found else "HEAD"


def extract(ref: str, into: Path) -> Path:
    """The ``airig`` package as it was at ``ref``, under ``into``."""
    archive = subprocess.run(
        ["git", "archive", ref, "airig"], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def register(url: str, name: str) -> dict[str, str]:
    answer = requests.post(
        f"{url}/v1/workers/register", json={"name": name, "classes": ["cpu"]},
        headers={"Authorization": f"Bearer {BOOTSTRAP}"}, timeout=30,
    )  # fmt: skip
    answer.raise_for_status()
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def plan_body(readers: int, repeats: int) -> bytes:
    echo = " ".join(["{{ tasks.a.output }}"] * repeats)
    tasks = [{"id": "a", "type": "noop", "task_class": "cpu"}] + [
        {"id": f"r{i:02}", "type": "noop", "task_class": "cpu", "depends_on": ["a"],
         "payload": {"echo": f"reader {i}: {echo}"}}
        for i in range(readers)
    ]  # fmt: skip
    return json.dumps({"name": "template amplification", "tasks": tasks}).encode()


def claim(
    url: str, worker: dict[str, str], max_tasks: int, wait_s: float,
    start: threading.Barrier, out: dict,
) -> None:  # fmt: skip
    """One exchange asking for ``max_tasks``; the answer is streamed and counted, not kept."""
    body = {"reports": [], "claim": {"max_tasks": max_tasks, "wait_s": wait_s}}
    start.wait()
    began = time.perf_counter()
    size, tasks, tail = 0, 0, b""
    with requests.post(f"{url}/v1/exchange", json=body, headers=worker, stream=True,
                       timeout=900) as answer:  # fmt: skip
        out["status"] = answer.status_code
        for chunk in answer.iter_content(1 << 20):
            size += len(chunk)
            window = tail + chunk
            tasks += window.count(MARKER) - tail.count(MARKER)
            tail = window[-(len(MARKER) - 1) :]
    out.update(bytes=size, tasks=tasks, seconds=time.perf_counter() - began)


def attack(
    url: str, readers: int, repeats: int, result_bytes: int, claims: int, max_tasks: int,
    plans: int, wait_s: float, peak: Callable[[], float],
) -> dict:  # fmt: skip
    admin = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    workers = [register(url, f"hostile-{n}") for n in range(claims)]
    upstream = register(url, "upstream")
    body = plan_body(readers, repeats)
    exchange = f"{url}/v1/exchange"
    ids = []
    for _ in range(plans):  # every ``a`` first: the upstream worker must claim only those
        answer = requests.post(f"{url}/v1/plans", data=body, headers=admin, timeout=60)
        answer.raise_for_status()
        ids.append(answer.json()["id"])
    upstreams: list[dict] = []
    while len(upstreams) < plans:  # a claim asks for at most 32 tasks
        ask = {"max_tasks": min(plans - len(upstreams), 32), "wait_s": 0}
        got = requests.post(exchange, headers=upstream, json={"reports": [], "claim": ask},
                            timeout=60)  # fmt: skip
        got.raise_for_status()
        if not got.json()["assignments"]:
            break  # the assert below says what is missing
        upstreams += got.json()["assignments"]
    reports = [
        {"action": "complete", "task_id": task["task_id"], "attempt": task["attempt"],
         "lease_id": task["lease_id"], "output": {"text": FILL["fill"] * result_bytes}}
        for task in upstreams
    ]  # fmt: skip
    assert [task["key"] for task in upstreams] == ["a"] * plans
    complete_s = 0.0
    for report in reports:  # one per exchange: a request body holds at most 16 MiB
        began = time.perf_counter()
        done = requests.post(exchange, headers=upstream, timeout=300,
                             json={"reports": [report], "claim": None})  # fmt: skip
        done.raise_for_status()
        assert done.json()["results"][0]["status"] == 200, done.text
        complete_s = max(complete_s, time.perf_counter() - began)
    before_claims = peak()  # the results stored; what follows is the claims' alone
    start = threading.Barrier(claims)
    outs: list[dict] = [{} for _ in range(claims)]
    threads = [
        threading.Thread(target=claim, args=(url, worker, max_tasks, wait_s, start, out))
        for worker, out in zip(workers, outs, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    readers_by_state: dict[str, int] = {}
    for plan in ids:
        view = requests.get(f"{url}/v1/plans/{plan}", headers=admin, timeout=60).json()
        for row in view["tasks"]:
            if row["id"] != "a":
                readers_by_state[row["state"]] = readers_by_state.get(row["state"], 0) + 1
    return {
        "plan_kb": round(len(body) / 1024, 1),
        "before_claims_mb": round(before_claims, 1),
        "complete_s": round(complete_s, 2),
        "claimed": [out.get("tasks") for out in outs],
        "served": sum(bool(out.get("tasks")) for out in outs),
        "claim_mb": [round(out.get("bytes", 0) / 1e6, 1) for out in outs],
        "claim_s": round(max(out.get("seconds", 0.0) for out in outs), 2),
        "statuses": sorted({out.get("status") for out in outs}),
        "after": readers_by_state,
    }


def measure(code: Path, label: str, readers: int, repeats: int, result_bytes: int,
            claims: int, max_tasks: int, plans: int, wait_s: float,
            env: dict[str, str]) -> dict:  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="airig-templates-") as tmp:
        brain = Brain(Path(tmp), {"BRAIN_LEASE_S": "600", **env}, code=code)
        try:
            brain.start()
            idle = peak_mb(brain.pid)
            row = attack(brain.url, readers, repeats, result_bytes, claims, max_tasks, plans,
                         wait_s, lambda: peak_mb(brain.pid))  # fmt: skip
            row["peak_mb"] = round(peak_mb(brain.pid), 1)
        finally:
            brain.stop()
    return {"code": label, "repeats": repeats, "readers": readers,
            "result_mb": round(result_bytes / 1e6, 2), "idle_mb": round(idle, 1),
            **row}  # fmt: skip


def markdown(rows: list[dict]) -> str:
    lines = [
        "| code | readers x repeats | plan KB | result MB | peak RSS MB | claims served "
        "| tasks per claim | MB per claim | slowest claim s | readers after |",
        "|---|---|---:|---:|---:|---|---|---|---:|---|",
    ]
    for r in rows:
        after = ", ".join(f"{n} {state}" for state, n in sorted(r["after"].items()))
        lines.append(
            f"| {r['code']} | {r['readers']} x {r['repeats']} | {r['plan_kb']} "
            f"| {r['result_mb']} | {r['peak_mb']} | {r['served']}/{len(r['claimed'])} "
            f"| {r['claimed']} | {r['claim_mb']} | {r['claim_s']} | {after} |"
        )
    return "\n".join(lines)


def verdicts(rows: list[dict]) -> list[str]:
    checks = []
    for r in rows:
        if r["code"] != "this checkout":
            continue
        ok = r["peak_mb"] < TARGET_MB and r["statuses"] == [200]
        checks.append(
            f"{'PASS' if ok else 'FAIL'} {r['readers']} x {r['repeats']} references to a "
            f"{r['result_mb']} MB result, {len(r['claimed'])} concurrent claims "
            f"({r['served']} served): brain peak {r['peak_mb']} MB (target < {TARGET_MB:g} MB)"
        )
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=32)
    parser.add_argument("--repeats", default="15,4")
    parser.add_argument("--result-bytes", type=int, default=1_000_000)
    parser.add_argument("--claims", type=int, default=4)
    parser.add_argument("--max-tasks", type=int, default=32, help="tasks each claim asks for")
    parser.add_argument("--wait-s", type=float, default=5.0, help="each claim's long-poll")
    parser.add_argument("--inflight", type=int, help="BRAIN_MAX_INFLIGHT_BYTES (default: its)")
    parser.add_argument(
        "--plans", type=int, help="copies of the plan submitted (default: one per claim)"
    )
    parser.add_argument("--before", help="git ref of the code to compare with")
    parser.add_argument("--no-before", action="store_true", help="measure this checkout only")
    parser.add_argument("--fill", default="x", help="result character ('ctrl' = \\x01)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    FILL["fill"] = "\x01" if args.fill == "ctrl" else args.fill[:1]
    env = {"BRAIN_MAX_INFLIGHT_BYTES": str(args.inflight)} if args.inflight else {}
    rows, notes = [], []
    with tempfile.TemporaryDirectory(prefix="airig-before-") as tmp:
        trees = [("this checkout", REPO)]
        if not args.no_before:
            ref = args.before or before_ref()
            trees.append((f"before ({ref})", extract(ref, Path(tmp))))
            notes.append(f"before = `git archive {ref} airig`, run from a temporary tree")
        for repeats in (int(n) for n in args.repeats.split(",")):
            for label, code in trees:
                row = measure(code, label, args.readers, repeats, args.result_bytes,
                              args.claims, args.max_tasks, args.plans or args.claims,
                              args.wait_s, env)  # fmt: skip
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    checks = verdicts(rows)
    print(markdown(rows))
    print("\n".join([*checks, *notes]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "verdicts": checks, "notes": notes},
                                        indent=1))  # fmt: skip
    return 0 if checks and all(c.startswith("PASS") for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
