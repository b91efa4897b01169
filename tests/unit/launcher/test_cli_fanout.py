"""`submit --watch` / `plan`: a fan-out is one line with its items' progress, not N x k rows."""

from __future__ import annotations

import io

from rich.console import Console

from airig.launcher.cli.tasks import fanout_progress, tasks_table


def rendered(table) -> str:
    out = io.StringIO()
    Console(file=out, width=300, color_system=None).print(table)
    return out.getvalue()


def task(key, state="PENDING", group=None, type_="noop"):
    return {"id": key, "type": type_, "task_class": "cpu", "state": state, "attempt": 0,
            "worker_id": None, "error": None, "reason": None, "group": group}  # fmt: skip


def test_a_group_is_one_line_with_done_running_failed_of_n():
    fan = {"id": "talks", "total": 10, "done": 3, "running": 2, "failed": 1, "pending": 4,
           "items": []}  # fmt: skip
    items = [task(f"talks__{i}__t", "SUCCEEDED", group="talks") for i in range(10)]
    plan = {"id": "p1", "name": "n", "status": "running", "fanouts": [fan],
            "tasks": [task("talks", type_="group"), *items, task("report")]}  # fmt: skip
    text = rendered(tasks_table(plan))
    assert "3 done / 2 running / 1 failed of 10" in text
    assert "talks__0__t" not in text and "report" in text
    assert fanout_progress(fan) == "3 done / 2 running / 1 failed of 10"
