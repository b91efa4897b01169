"""The brain CLI commands and client: exact requests out, one-line errors back."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from airig.common.errors import AirigError, ConfigError
from airig.launcher.brain_client import UP_HINT, BrainClient, PlanRefused, brain_url
from airig.launcher.cli.tasks import app
from airig.launcher.settings import load_settings

TOKEN = "admin-secret-token"  # the admin token of the `brain` fixture (tests/conftest.py)
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


def submitted(brain, tasks: list[dict]) -> str:
    """A plan put straight into the brain; nothing runs it (no worker)."""
    answer = brain.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": tasks})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """tmp_path is the checkout the commands find (AIRIG_HOME): its .env is theirs."""
    for name in ("BRAIN_URL", "BRAIN_PORT", "BRAIN_ADMIN_TOKEN", "AIRIG_BIND_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "01-infra").mkdir()
    (tmp_path / "01-infra" / "compose.yaml").write_text("services: {}\n")
    monkeypatch.setenv("AIRIG_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "160")


def test_submit_sends_the_file_with_its_content_type(tmp_path, brain, brain_calls):
    (tmp_path / ".env").write_text(f"BRAIN_ADMIN_TOKEN={TOKEN}\nBRAIN_PORT=18123\n")
    plan = tmp_path / "plan.md"
    plan.write_text("# Plan: p\n\n## a\n- type: noop\n")
    result = CliRunner().invoke(app, ["submit", str(plan), "--idempotency-key", "k1"])
    assert result.exit_code == 0, result.output
    assert brain_calls == [("POST", "http://127.0.0.1:18123/v1/plans")]
    [stored] = brain.get("/v1/plans", headers=ADMIN).json()["plans"]
    assert stored["name"] == "p"  # read as Markdown: as YAML the file is no plan at all
    assert f"plan {stored['id']} submitted with 1 tasks" in result.output
    assert "fixed a.task_class: inferred 'cpu'" in result.output
    assert TOKEN not in result.output
    again = CliRunner().invoke(app, ["submit", str(plan), "--idempotency-key", "k1"])
    assert f"plan {stored['id']} submitted" in again.output  # the key went along
    assert len(brain.get("/v1/plans", headers=ADMIN).json()["plans"]) == 1


def test_a_refused_plan_shows_each_problem(tmp_path, monkeypatch, brain):
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", TOKEN)
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: p\ntasks:\n  - id: b\n    type: noop\n    depends_on: [x]\n")
    result = CliRunner().invoke(app, ["submit", str(plan)])
    assert isinstance(result.exception, PlanRefused)
    assert result.exception.message == "the brain refused the plan: plan refused (1 problem(s))"
    assert result.exception.errors == [
        {"task": "b", "field": "depends_on", "message": "unknown task 'x'"}
    ]
    assert "unknown task 'x'" in result.output
    assert brain.get("/v1/plans", headers=ADMIN).json()["plans"] == []


def test_plan_and_cancel_commands(monkeypatch, brain, brain_calls):
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", TOKEN)
    monkeypatch.setenv("BRAIN_URL", "http://brain.example.lan:9000/")
    plan_id = submitted(brain, [{"id": "a", "type": "noop"}, {"id": "b", "type": "noop"}])
    shown = CliRunner().invoke(app, ["plan", plan_id])
    assert shown.exit_code == 0 and "READY" in shown.output, shown.output
    cancelled = CliRunner().invoke(app, ["cancel", plan_id])
    assert "cancelled 2 unfinished task(s)" in cancelled.output
    assert brain_calls == [
        ("GET", f"http://brain.example.lan:9000/v1/plans/{plan_id}"),
        ("POST", f"http://brain.example.lan:9000/v1/plans/{plan_id}/cancel"),
    ]
    tasks = brain.get(f"/v1/plans/{plan_id}", headers=ADMIN).json()["tasks"]
    assert {t["id"]: t["state"] for t in tasks} == {"a": "CANCELLED", "b": "CANCELLED"}


def test_cancel_one_task(monkeypatch, brain, brain_calls):
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", TOKEN)
    plan_id = submitted(brain, [{"id": "a", "type": "noop"}, {"id": "b", "type": "noop"}])
    assert "task cancelled" in CliRunner().invoke(app, ["cancel", f"{plan_id}/a"]).output
    assert brain_calls == [("POST", f"http://127.0.0.1:8080/v1/plans/{plan_id}/tasks/a/cancel")]
    tasks = brain.get(f"/v1/plans/{plan_id}", headers=ADMIN).json()["tasks"]
    assert {t["id"]: t["state"] for t in tasks} == {"a": "CANCELLED", "b": "READY"}


def test_missing_token_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="BRAIN_ADMIN_TOKEN"):
        BrainClient.from_settings(load_settings(tmp_path))
    (tmp_path / ".env").write_text("BRAIN_ADMIN_TOKEN=change-me\n")
    result = CliRunner().invoke(app, ["plans"])
    assert isinstance(result.exception, ConfigError) and "up` once" in result.exception.hint


def test_unreachable_brain_is_one_line_with_a_hint():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(AirigError) as caught:
        BrainClient(f"http://127.0.0.1:{port}", TOKEN).plans()
    assert caught.value.message == (
        f"cannot reach the brain at http://127.0.0.1:{port} (ConnectionError)"
    )
    assert caught.value.hint == UP_HINT


def test_a_wrong_token_is_reported_without_showing_it(brain):
    wrong = "not-the-admin-token"
    with pytest.raises(ConfigError) as caught:
        BrainClient("http://brain.example.lan", wrong).plans()
    assert caught.value.message == "the brain refused the admin token"
    assert wrong not in str(caught.value) and wrong not in caught.value.hint


def test_brain_url_defaults(tmp_path, monkeypatch):
    assert brain_url(load_settings(tmp_path)) == "http://127.0.0.1:8080"
    (tmp_path / ".env").write_text("BRAIN_URL=http://from-env-file:1/\nBRAIN_PORT=9\n")
    monkeypatch.setenv("BRAIN_URL", "http://from-environment:2/")
    assert brain_url(load_settings(tmp_path)) == "http://from-environment:2"


def test_commands_read_the_checkouts_env_not_the_working_directorys(
    tmp_path, monkeypatch, brain, brain_calls
):
    """The brain commands find .env the way every other command does (repo_root)."""
    (tmp_path / ".env").write_text(f"BRAIN_ADMIN_TOKEN={TOKEN}\nBRAIN_PORT=18124\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ".env").write_text("BRAIN_ADMIN_TOKEN=wrong\nBRAIN_PORT=1\n")
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(app, ["plans"])
    assert result.exit_code == 0, result.output  # the brain took the checkout's token
    assert brain_calls == [("GET", "http://127.0.0.1:18124/v1/plans")]
