"""The brain's peak memory for each request issue 36 §1 names, against its target.

Usage: python benchmarks/brain_memory.py [--cases a,b,c,d] [--completion-mb 7.8]
                                         [--items-mb 1] [--from-items 4000000]
                                         [--group-items 120] [--item-output-mb 1]
                                         [--code DIR] [--label NAME] [--json PATH]

Each case starts its own brain (``python -m airig.brain`` on 127.0.0.1, a fresh store),
makes what the request needs (a worker, a plan, leases), then resets the brain's peak
resident memory to what it holds now (``5`` into ``/proc/<pid>/clear_refs``: VmHWM :=
VmRSS, that figure is "idle"), sends the request and reads the peak (``VmHWM`` in
``/proc/<pid>/status``). Cases:

- **a**: a worker's completion (``POST /v1/exchange``) whose output is a list of small
  numbers, ``--completion-mb`` of JSON (0-9, two bytes each: four million values);
- **b**: a plan (``POST /v1/plans``) whose ``items`` group lists ``--items-mb`` of small
  numbers (half a million items, far past ``AIRIG_PLAN_MAX_TASKS``);
- **c**: the completion of a ``from`` group's source task whose list holds
  ``--from-items`` small numbers (the group would expand to that many tasks);
- **d**: a group of ``--group-items`` items, each item's task completing with
  ``--item-output-mb`` of text (one completion per exchange), and a task reading
  ``{{ tasks.<group>.output }}``: **d1** is the completions (the group ends), **d2** a
  worker's claim when that reader is ready (its payload measured against the rendering
  bound), **d3** ``GET .../tasks/<group>/result``, read as a stream (the peak is reset
  before each).

Target: peak < 2 x the request + idle. The request is the body sent; for d1 the largest
(one item's completion); for d2 and d3, whose requests are tiny, one item's stored output:
what an answer built from the stored sizes, streamed or capped, holds at once.

``--code DIR`` runs the brain from another tree (an older commit checked out with ``git
worktree add``), this script unchanged, to measure the code before a change the same way;
``--label`` names it in the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import requests  # noqa: E402
from procs import ADMIN, BOOTSTRAP, REPO, Brain  # noqa: E402

MB = 1_000_000
JSON = {"Content-Type": "application/json"}
ADMIN_JSON = {"Authorization": f"Bearer {ADMIN}", **JSON}


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak(pid: int) -> float:
    """The brain's resident memory now, made its peak (VmHWM) from here on."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return status_mb(pid, "VmRSS")


def numbers(size: int) -> bytes:
    """A JSON list of about ``size`` bytes of one-digit numbers: ``[0,1,2,…]``."""
    count = max(1, size // 2)
    return b"[" + b",".join(b"%d" % (i % 10) for i in range(count)) + b"]"


class Rig:
    """One brain, its admin and one registered CPU worker."""

    def __init__(self, brain: Brain) -> None:
        self.url = brain.url
        self.session = requests.Session()
        answer = self.session.post(
            f"{self.url}/v1/workers/register", json={"name": "bench-1", "classes": ["cpu"]},
            headers={"Authorization": f"Bearer {BOOTSTRAP}"}, timeout=30,
        )  # fmt: skip
        answer.raise_for_status()
        self.worker = {"Authorization": f"Bearer {answer.json()['token']}", **JSON}

    def submit(self, tasks: list[dict[str, Any]]) -> str:
        body = json.dumps({"name": "memory benchmark", "tasks": tasks})
        answer = self.session.post(f"{self.url}/v1/plans", data=body, headers=ADMIN_JSON,
                                   timeout=600)  # fmt: skip
        if answer.status_code != 201:
            raise RuntimeError(f"submit answered {answer.status_code}: {answer.text[:300]}")
        return str(answer.json()["id"])

    def claim_all(self) -> list[dict[str, Any]]:
        """Every task ready now, leased to the worker (32 per exchange)."""
        leased: list[dict[str, Any]] = []
        while True:
            body = {"reports": [], "claim": {"max_tasks": 32, "wait_s": 0}}
            answer = self.exchange(json.dumps(body).encode())
            got = answer.json()["assignments"]
            if not got:
                return leased
            leased += got

    def exchange(self, body: bytes) -> requests.Response:
        answer = self.session.post(f"{self.url}/v1/exchange", data=body, headers=self.worker,
                                   timeout=900)  # fmt: skip
        if answer.status_code != 200:
            raise RuntimeError(f"exchange answered {answer.status_code}: {answer.text[:300]}")
        return answer

    def plan(self, plan_id: str) -> dict[str, Any]:
        answer = self.session.get(
            f"{self.url}/v1/plans/{plan_id}",
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=600,
        )
        answer.raise_for_status()
        return dict(answer.json())


def completion(task: dict[str, Any], output: bytes) -> bytes:
    """One exchange completing ``task`` with ``output`` (JSON bytes), no claim."""
    head = {"action": "complete", "task_id": task["task_id"], "attempt": task["attempt"],
            "lease_id": task["lease_id"]}  # fmt: skip
    return (
        b'{"reports": ['
        + json.dumps(head).encode()[:-1]
        + b', "output": '
        + output
        + (b'}], "claim": null}')
    )


def reported(answer: requests.Response) -> str:
    """The completion's own result: its status and the task's state."""
    result = answer.json()["results"][0]
    return f"{result['status']} {result.get('state') or result.get('detail', '')[:60]}"


def task_state(plan: dict[str, Any], key: str) -> str:
    return next((t["state"] for t in plan["tasks"] if t["id"] == key), "missing")


# Each case: its setup (not measured), then the measured part, which returns what to
# record; ``measure`` resets the peak between them.
Measured = Callable[[], dict[str, Any]]


def case_a(rig: Rig, args: argparse.Namespace) -> Measured:
    rig.submit([{"id": "a", "type": "noop", "task_class": "cpu"}])
    (task,) = rig.claim_all()
    body = completion(task, b'{"values": ' + numbers(int(args.completion_mb * MB) - 150) + b"}")

    def run() -> dict[str, Any]:
        return {"request": len(body), "answer": reported(rig.exchange(body))}

    return run


def case_b(rig: Rig, args: argparse.Namespace) -> Measured:
    head = {"name": "items", "tasks": [{"id": "g", "tasks": [
        {"id": "t", "type": "noop", "task_class": "cpu", "payload": {"echo": "{{ item }}"}}],
        "for_each": {"items": []}}]}  # fmt: skip
    text = json.dumps(head).encode()
    body = text.replace(b"[]", numbers(int(args.items_mb * MB) - len(text)))

    def run() -> dict[str, Any]:
        answer = rig.session.post(f"{rig.url}/v1/plans", data=body, headers=ADMIN_JSON,
                                  timeout=900)  # fmt: skip
        detail = answer.json().get("detail")
        if isinstance(detail, dict):  # a plan's refusal: its first error says why
            detail = (detail.get("errors") or [detail])[0].get("message")
        return {"request": len(body), "answer": f"{answer.status_code} {str(detail)[:80]}"}

    return run


def case_c(rig: Rig, args: argparse.Namespace) -> Measured:
    plan_id = rig.submit([
        {"id": "find", "type": "noop", "task_class": "cpu"},
        {"id": "g", "depends_on": ["find"],
         "for_each": {"from": "{{ tasks.find.output.files }}"},
         "tasks": [{"id": "t", "type": "noop", "task_class": "cpu"}]},
    ])  # fmt: skip
    (task,) = rig.claim_all()
    body = completion(task, b'{"files": ' + numbers(args.from_items * 2) + b"}")

    def run() -> dict[str, Any]:
        answer = reported(rig.exchange(body))
        return {"request": len(body), "answer": answer, "after": lambda: {
            "group": task_state(rig.plan(plan_id), "g")}}  # fmt: skip

    return run


def case_d(rig: Rig, args: argparse.Namespace) -> tuple[Measured, Measured, Measured]:
    plan_id = rig.submit([
        {"id": "g", "for_each": {"items": list(range(args.group_items))},
         "tasks": [{"id": "t", "type": "noop", "task_class": "cpu"}]},
        {"id": "report", "type": "noop", "task_class": "cpu", "depends_on": ["g"],
         "payload": {"echo": "{{ tasks.g.output }}"}},
    ])  # fmt: skip
    tasks = rig.claim_all()
    text = json.dumps({"text": "x" * int(args.item_output_mb * MB)}).encode()
    bodies = [completion(task, text) for task in tasks]

    def states() -> dict[str, str]:
        plan = rig.plan(plan_id)
        return {"group": task_state(plan, "g"), "reader": task_state(plan, "report")}

    def complete() -> dict[str, Any]:
        answers = {reported(rig.exchange(body)) for body in bodies}
        return {"request": max(map(len, bodies)), "answer": ", ".join(sorted(answers)),
                "after": states}  # fmt: skip

    def claim_reader() -> dict[str, Any]:
        body = {"reports": [], "claim": {"max_tasks": 1, "wait_s": 0}}
        got = rig.exchange(json.dumps(body).encode()).json()["assignments"]
        answer = f"{len(got)} task, {sum(len(json.dumps(t)) for t in got) / MB:.1f} MB"
        return {"request": len(text), "answer": answer, "after": states}

    def result() -> dict[str, Any]:
        url = f"{rig.url}/v1/plans/{plan_id}/tasks/g/result"
        size = 0
        with rig.session.get(url, headers={"Authorization": f"Bearer {ADMIN}"}, stream=True,
                             timeout=900) as answer:  # fmt: skip
            for chunk in answer.iter_content(1 << 20):
                size += len(chunk)
        return {"request": len(text), "answer": f"{answer.status_code}, {size / MB:.1f} MB"}

    return complete, claim_reader, result


CASES: dict[str, tuple[str, Callable[..., Any]]] = {
    "a": ("a worker's completion of small numbers", case_a),
    "b": ("a plan with an `items` group", case_b),
    "c": ("a `from` group's source completing", case_c),
    "d": ("a group's item completions, its reader's claim, its result", case_d),
}


def measure(code: Path, case: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="airig-memory-") as tmp:
        root = Path(tmp)
        (root / "data").mkdir()
        brain = Brain(root, {"BRAIN_DATA_DIR": str(root / "data"), "BRAIN_LEASE_S": "900"},
                      code=code)  # fmt: skip
        try:
            brain.start()
            prepared = CASES[case][1](Rig(brain), args)
            parts = prepared if isinstance(prepared, tuple) else (prepared,)
            for n, run in enumerate(parts, 1):
                idle = reset_peak(brain.pid)
                began = time.perf_counter()
                row = run()
                seconds = time.perf_counter() - began
                peak = status_mb(brain.pid, "VmHWM")
                after = row.pop("after", None)
                row.update(after() if after else {})
                name = case if len(parts) == 1 else f"{case}{n}"
                rows.append(
                    {
                        "case": name,
                        "idle_mb": round(idle, 1),
                        "request_mb": round(row.pop("request") / MB, 2),
                        "peak_mb": round(peak, 1),
                        "seconds": round(seconds, 1),
                        **row,
                    }
                )
        finally:
            brain.stop()
    for row in rows:
        row["target_mb"] = round(2 * row["request_mb"] + row["idle_mb"], 1)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| code | case | request MB | idle MB | peak RSS MB | target MB | s | answer | after |",
        "|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        after = ", ".join(f"{k} {r[k]}" for k in ("group", "reader") if k in r)
        lines.append(
            f"| {r['code']} | {r['case']} | {r['request_mb']} | {r['idle_mb']} | "
            f"{r['peak_mb']} | {r['target_mb']} | {r['seconds']} | {r['answer']} | {after} |"
        )
    return "\n".join(lines)


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    return [
        f"{'PASS' if r['peak_mb'] < r['target_mb'] else 'FAIL'} {r['case']}: peak "
        f"{r['peak_mb']} MB for a {r['request_mb']} MB request (target < 2 x request + idle "
        f"= {r['target_mb']} MB; {r['code']})"
        for r in rows
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="a,b,c,d")
    parser.add_argument("--completion-mb", type=float, default=7.8)
    parser.add_argument("--items-mb", type=float, default=1.0)
    parser.add_argument("--from-items", type=int, default=4_000_000)
    parser.add_argument("--group-items", type=int, default=120)
    parser.add_argument("--item-output-mb", type=float, default=1.0)
    parser.add_argument("--code", type=Path, default=REPO, help="tree the brain runs from")
    parser.add_argument("--label", help="the code's name in the table")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    label = args.label or ("this checkout" if args.code == REPO else str(args.code))
    rows = []
    for case in args.cases.split(","):
        for row in measure(args.code.resolve(), case, args):
            rows.append({"code": label, **row})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    checks = verdicts(rows)
    print(markdown(rows))
    print("\n".join(checks))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "verdicts": checks}, indent=1))
    return 0 if all(c.startswith("PASS") for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
