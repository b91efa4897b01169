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


def _reused_plan():
    """A pdfs group of 5: 4 items unchanged since plan p1, one runs."""
    fan = {"id": "pdfs", "total": 5, "done": 4, "running": 1, "failed": 0, "pending": 0,
           "reused": 4, "reused_from": {"p1": 4}, "items": []}  # fmt: skip
    tasks = [task("pdfs", type_="group"),
             *(task(f"pdfs__{i}__text", "SUCCEEDED", group="pdfs") for i in range(4)),
             task("pdfs__4__text", "RUNNING", group="pdfs")]  # fmt: skip
    return {"id": "p2", "name": "pdf-text", "status": "running", "fanouts": [fan],
            "tasks": tasks, "task_total": 6}  # fmt: skip


def test_a_group_row_says_how_many_items_were_unchanged():
    row = group_row(rendered(tasks_table(_reused_plan())), "pdfs")
    assert "4 done / 1 running / 0 failed of 5 · 4 unchanged since plan p1" in row
    plan = _reused_plan()
    plan["fanouts"][0].update(reused=0, reused_from={})
    assert "unchanged" not in group_row(rendered(tasks_table(plan)), "pdfs")


def test_submit_says_what_was_skipped_and_rerun_asks_for_every_item(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import airig.launcher.console
    from airig.launcher.brain_client import BrainClient
    from airig.launcher.cli import tasks

    (tmp_path / "01-infra").mkdir()
    (tmp_path / "01-infra" / "compose.yaml").write_text("services: {}\n")
    monkeypatch.setenv("AIRIG_HOME", str(tmp_path))
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", "t" * 24)
    monkeypatch.setattr(airig.launcher.console.console, "_width", 200)
    sent = []

    def submit_body(self, body, suffix, key=None, rerun=False):
        sent.append(rerun)
        return _reused_plan()

    monkeypatch.setattr(BrainClient, "submit_body", submit_body)
    plan = tmp_path / "p.yaml"
    plan.write_text("tasks: [{id: a, type: noop}]\n")
    shown = CliRunner().invoke(tasks.app, ["submit", str(plan)])
    assert shown.exit_code == 0, shown.output
    assert ("= pdfs: 4 of 5 items unchanged since plan p1: skipped; 1 to run "
            "(--rerun runs every item)") in shown.output  # fmt: skip
    assert CliRunner().invoke(tasks.app, ["submit", str(plan), "--rerun"]).exit_code == 0
    assert sent == [False, True]
    refused = CliRunner().invoke(tasks.app, ["submit", "--goal", "x", "--rerun"])
    assert refused.exit_code != 0 and "--rerun goes with a plan file" in refused.output


def test_submit_rerun_reaches_the_brain_as_a_query(monkeypatch):
    from airig.launcher.brain_client import BrainClient

    calls = []
    client = BrainClient("http://brain:8000", "t" * 24)
    monkeypatch.setattr(client, "_object", lambda *a, **kw: calls.append((a, kw)) or {})
    client.submit_body(b"tasks: []", ".yaml", None, True)
    client.submit_body(b"tasks: []", ".yaml")
    assert calls[0][1]["params"] == {"rerun": "true"} and calls[1][1]["params"] is None
    assert client.timeout_s == 30.0  # the longer wait was for the submit only


def test_plan_id_task_names_the_run_it_was_reused_from(monkeypatch):
    import airig.launcher.console
    from airig.launcher.cli import task_view

    monkeypatch.setattr(airig.launcher.console.console, "_width", 200)
    printed = []
    monkeypatch.setattr(task_view.console, "print", lambda *a, **kw: printed.append(str(a[0])))
    one = {**task("pdfs__0__text", "SUCCEEDED", group="pdfs"),
           "reused_from": "p1/pdfs__0__text"}  # fmt: skip
    task_view.show(one, {"output": {"path": "outputs/a.txt"}, "files": []})
    assert "  reused_from: p1/pdfs__0__text" in printed
