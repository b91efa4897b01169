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


def _partial_plan(group_state="SUCCEEDED"):
    """A photos group of 4 whose item 2 failed: the brain's group task SUCCEEDED."""
    items = [{"index": i, "label": f"p{i}.jpg", "state": "succeeded", "error": None}
             for i in range(4)]  # fmt: skip
    items[2].update(state="failed", error="vision model: cannot identify image file")
    fan = {"id": "photos", "total": 4, "done": 3, "running": 0, "failed": 1, "pending": 0,
           "items": items}  # fmt: skip
    tasks = [task("photos", group_state, type_="group"),
             *(task(f"photos__{i}__caption", "SUCCEEDED", group="photos") for i in (0, 1, 3)),
             task("photos__2__caption", "FAILED", group="photos")]  # fmt: skip
    return {"id": "p9", "name": "photos", "status": "partial", "fanouts": [fan], "tasks": tasks}


def group_row(text: str, key: str) -> str:
    return next(line for line in text.splitlines() if f"│ {key} " in line)


def test_a_group_with_failed_items_reads_partial_not_succeeded():
    row = group_row(rendered(tasks_table(_partial_plan())), "photos")
    assert "PARTIAL" in row and "SUCCEEDED" not in row and "1 failed of 4" in row


def test_a_group_whose_items_run_reads_running_not_pending():
    fan = {"id": "talks", "total": 3, "done": 1, "running": 1, "failed": 0, "pending": 1,
           "items": []}  # fmt: skip
    items = [
        task("talks__0__t", "SUCCEEDED", group="talks"),
        task("talks__1__t", "RUNNING", group="talks"),
        task("talks__2__t", group="talks"),
    ]
    plan = {"id": "p1", "name": "n", "status": "running", "fanouts": [fan],
            "tasks": [task("talks", type_="group"), *items]}  # fmt: skip
    assert "RUNNING" in group_row(rendered(tasks_table(plan)), "talks")
    # queued, none claimed yet: still running (its upstream is done, it is in the queue)
    fan.update(done=0, running=0, pending=3)
    for item in items:
        item["state"] = "READY"
    assert "RUNNING" in group_row(rendered(tasks_table(plan)), "talks")
    # waiting for its upstream: pending
    for item in items:
        item["state"] = "PENDING"
    assert "PENDING" in group_row(rendered(tasks_table(plan)), "talks")


def test_plan_id_lists_the_failed_items_with_their_errors(monkeypatch):
    from typer.testing import CliRunner

    import airig.launcher.console
    from airig.launcher.cli import tasks

    class Brain:
        def plan(self, plan_id):
            assert plan_id == "p9"
            return _partial_plan()

    monkeypatch.setattr(tasks, "brain", Brain)
    monkeypatch.setattr(airig.launcher.console.console, "_width", 200)
    shown = CliRunner().invoke(tasks.app, ["plan", "p9"])
    assert shown.exit_code == 0, shown.output
    assert "PARTIAL" in shown.output
    failed = [line for line in shown.output.splitlines() if line.startswith("✘")]
    assert failed == ["✘ photos[2] p2.jpg: vision model: cannot identify image file"]
