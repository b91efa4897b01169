"""At 80 columns the CLI wraps what the brain and Docker say, never cuts it (issue 22 §5):
a task's error in `plan ID`, one task whole with its output in `plan ID TASK`, the
services' URLs in `status`, the `tune --log` table."""

from __future__ import annotations

import pytest
from rich.console import Console
from typer.testing import CliRunner

import airig.launcher.console
from airig.launcher.cli.runbook import _show_log
from airig.launcher.cli.tasks import app
from airig.launcher.views.status import services_table

TOKEN = "admin-secret-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
# 40 words, then one long path without a space: a real error's shape
ERROR = " ".join(f"word{i}" for i in range(40)) + " /very/long/path/" + "x" * 70 + "/END"


@pytest.fixture(autouse=True)
def narrow(monkeypatch, tmp_path):
    for name in ("BRAIN_URL", "BRAIN_PORT", "AIRIG_BIND_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "01-infra").mkdir()
    (tmp_path / "01-infra" / "compose.yaml").write_text("services: {}\n")
    monkeypatch.setenv("AIRIG_HOME", str(tmp_path))
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", TOKEN)
    monkeypatch.setattr(airig.launcher.console.console, "_width", 80)


def run_tasks(brain) -> str:
    """A plan whose task `a` failed with ERROR and whose task `b` answered text."""
    made = brain.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": [
        {"id": "a", "type": "noop"}, {"id": "b", "type": "noop"},
    ]})  # fmt: skip
    plan_id = made.json()["id"]
    token = brain.post("/v1/workers/register", headers=BOOT, json={
        "name": "cpu-1", "classes": ["cpu"],
    }).json()["token"]  # fmt: skip
    worker = {"Authorization": f"Bearer {token}"}
    for _ in range(2):
        task = brain.post("/v1/claims", headers=worker, json={"wait_s": 0, "start": True}).json()
        lease = {"attempt": task["attempt"], "lease_id": task["lease_id"]}
        if task["key"] == "a":
            body = {**lease, "error_type": "bad_input", "message": ERROR, "retryable": False}
            brain.post(f"/v1/tasks/{task['task_id']}/fail", headers=worker, json=body)
        else:
            body = {**lease, "output": {"text": "line one\nline two", "tokens": 7}}
            brain.post(f"/v1/tasks/{task['task_id']}/complete", headers=worker, json=body)
    return plan_id


def column(output: str, index: int) -> str:
    """One column of a rendered table, its wrapped lines joined (spaces dropped)."""
    cells = [line.split("│")[index + 1] for line in output.splitlines() if line.count("│") > index]
    return "".join(cell.replace(" ", "") for cell in cells)


def test_plan_wraps_a_long_error_instead_of_cutting_it(brain):
    plan_id = run_tasks(brain)
    shown = CliRunner().invoke(app, ["plan", plan_id])
    assert shown.exit_code == 0, shown.output
    assert max(len(line) for line in shown.output.splitlines()) <= 80
    assert "…" not in shown.output
    assert ERROR.replace(" ", "") in column(shown.output, 6)


def test_plan_task_shows_one_task_whole_and_its_output(brain):
    plan_id = run_tasks(brain)
    failed = CliRunner().invoke(app, ["plan", plan_id, "a"])
    assert failed.exit_code == 0, failed.output
    assert ERROR.replace(" ", "") in failed.output.replace("\n", "").replace(" ", "")
    assert "no output: the task is FAILED" in failed.output
    done = CliRunner().invoke(app, ["plan", plan_id, "b"])
    assert done.exit_code == 0, done.output
    assert "line one\nline two" in done.output and "── tokens\n7" in done.output
    missing = CliRunner().invoke(app, ["plan", plan_id, "zz"])
    assert missing.exit_code == 2 and "has no task 'zz'" in missing.output


def render(table) -> str:
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


def test_status_urls_wrap_at_80_columns():
    urls = ["http://192.168.178.254:18080", "http://192.168.178.254:18080/dashboard"]
    row = {"stack": "03-agents", "service": "brain", "state": "running", "health": "healthy",
           "exit_code": None, "urls": urls}  # fmt: skip
    text = render(services_table([row] * 2))
    assert "…" not in text
    assert "http://192.168.178.254:18080/dashboard" in column(text, 4)


def test_the_tuning_log_wraps_at_80_columns(monkeypatch):
    entry = {"id": 1, "time": "2025-01-02T03:04:05Z", "knob": "OLLAMA_CONTEXT_LENGTH",
             "before": "8192", "after": "4096", "why": "the 14B model ran out of VRAM on gpu0",
             "healthy": True, "triage_before": "1: gpu_oom (ollama-gpu0)",
             "triage_after": "no findings"}  # fmt: skip
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    monkeypatch.setattr("airig.launcher.cli.runbook.console", console)
    _show_log([entry], as_json=False)
    text = console.export_text()
    assert "…" not in text
    assert "OLLAMA_CONTEXT_LENGTH" in column(text, 2)
    assert "1:gpu_oom(ollama-gpu0)→nofindings" in column(text, 7)
