"""Piped or redirected output is plain and unwrapped, as Compose's is (issue 35 §5):
`logs` writes JSON lines whole, `status` keeps a URL on one line, and `submit --watch`'s
last table ends with a newline."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import airig.launcher.views.logs
from airig.launcher.cli.tasks import watch
from airig.launcher.console import console
from airig.launcher.views.logs import show_logs
from airig.launcher.views.status import services_table

LONG_JSON = json.dumps({"level": "info", "message": "x" * 200, "path": "/a/" + "b" * 60})


@pytest.fixture(autouse=True)
def piped(monkeypatch):
    """pytest's captured stdout is no terminal; nobody asked for a width."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(console, "_width", None)  # no width another test left chosen
    assert not console.is_terminal


class FakeDocker:
    def logs(self, stack, service, tail):
        return f"{LONG_JSON}\n{LONG_JSON}\n"

    def follow_logs(self, stack, service, tail):
        yield f"{LONG_JSON}\n"
        yield f"{LONG_JSON}\n"


@pytest.mark.parametrize("follow", [False, True])
def test_logs_writes_json_lines_whole(monkeypatch, capsys, follow):
    plan = SimpleNamespace(stacks=[SimpleNamespace(name="01-infra")])
    monkeypatch.setattr(airig.launcher.views.logs, "plan_for_running", lambda settings: plan)
    show_logs(None, FakeDocker(), None, 40, follow)  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert out == f"{LONG_JSON}\n{LONG_JSON}\n"
    assert [json.loads(line) for line in out.splitlines()]


def test_status_keeps_a_url_on_one_line(capsys):
    url = "http://" + "a-long-host-name-" * 6 + ".example:8080"
    rows = [{"stack": "01-infra", "service": "brain", "state": "running", "health": "healthy",
             "exit_code": 0, "urls": [url, url + "/dashboard"]}]  # fmt: skip
    console.print(services_table(rows))
    out = capsys.readouterr().out
    assert url + "/dashboard" in out
    assert max(len(line) for line in out.splitlines()) > 200


def test_an_explicit_columns_still_wraps(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    console.print("word " * 40)
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 80


def test_watch_ends_its_last_table_with_a_newline(capsys):
    task = {"id": "a", "type": "noop", "task_class": "cpu", "state": "SUCCEEDED", "attempt": 1,
            "worker_id": None, "error": None, "reason": None, "group": None}  # fmt: skip
    plan = {"id": "p1", "name": "p", "status": "succeeded", "tasks": [task]}
    client = SimpleNamespace(plan=lambda plan_id: plan)
    assert watch(client, "p1", interval_s=0) == plan  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert out.endswith("\n"), repr(out[-20:])
