"""The brain CLI commands and client: exact requests out, one-line errors back."""

from __future__ import annotations

import pytest
import requests
from typer.testing import CliRunner

from airig.common.errors import AirigError, ConfigError
from airig.launcher import brain_client as client_module
from airig.launcher.brain_client import BrainClient, PlanRefused, brain_url
from airig.launcher.cli.tasks import app

TOKEN = "cli-admin-token-value"
PLAN_VIEW = {
    "id": "abc123", "name": "p", "status": "succeeded", "task_total": 1, "counts": {},
    "created_at": 0, "fixes": [{"task": "a", "field": "task_class", "fix": "inferred 'cpu'",
                                "reason": "no GPU or LLM keyword"}],
    "tasks": [{"id": "a", "type": "noop", "task_class": "cpu", "state": "SUCCEEDED",
               "attempt": 1, "worker_id": "w1", "error": None, "reason": None}],
}  # fmt: skip


class FakeResponse:
    def __init__(self, status, body):
        self.status_code, self._body, self.text = status, body, str(body)

    def json(self):
        return self._body


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in ("BRAIN_URL", "BRAIN_PORT", "BRAIN_ADMIN_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRIG_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "160")


@pytest.fixture
def outbound(monkeypatch):
    calls, answers = [], []

    def fake_request(method, url, **kwargs):
        calls.append((method, url, kwargs))
        return answers.pop(0)

    monkeypatch.setattr(client_module.requests, "request", fake_request)
    return calls, answers


def test_submit_sends_the_file_with_its_content_type(tmp_path, monkeypatch, outbound):
    calls, answers = outbound
    (tmp_path / ".env").write_text(f"BRAIN_ADMIN_TOKEN={TOKEN}\nBRAIN_PORT=18123\n")
    plan = tmp_path / "plan.md"
    plan.write_text("# Plan: p\n\n## a\n- type: noop\n")
    answers.append(FakeResponse(201, PLAN_VIEW))
    result = CliRunner().invoke(app, ["submit", str(plan), "--idempotency-key", "k1"])
    assert result.exit_code == 0, result.output
    method, url, kwargs = calls[0]
    assert (method, url) == ("POST", "http://127.0.0.1:18123/v1/plans")
    assert kwargs["data"] == plan.read_bytes()
    assert kwargs["headers"] == {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "text/markdown",
        "Idempotency-Key": "k1",
    }
    assert "abc123" in result.output and "inferred 'cpu'" in result.output
    assert TOKEN not in result.output


def test_a_refused_plan_shows_each_problem(tmp_path, monkeypatch, outbound):
    _, answers = outbound
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", TOKEN)
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: p\n")
    errors = [{"task": "b", "field": "depends_on", "message": "unknown task 'x'"}]
    answers.append(FakeResponse(422, {"detail": {"message": "plan refused", "errors": errors}}))
    result = CliRunner().invoke(app, ["submit", str(plan)])
    assert isinstance(result.exception, PlanRefused)
    assert "unknown task 'x'" in result.output and "1 problem" in result.exception.message


def test_plan_and_cancel_commands(monkeypatch, outbound):
    calls, answers = outbound
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", TOKEN)
    monkeypatch.setenv("BRAIN_URL", "http://brain.test:9000/")
    answers += [FakeResponse(200, PLAN_VIEW), FakeResponse(200, {"cancelled": 2})]
    shown = CliRunner().invoke(app, ["plan", "abc123"])
    assert shown.exit_code == 0 and "SUCCEEDED" in shown.output
    cancelled = CliRunner().invoke(app, ["cancel", "abc123"])
    assert "cancelled 2 unfinished task(s)" in cancelled.output
    assert [c[:2] for c in calls] == [
        ("GET", "http://brain.test:9000/v1/plans/abc123"),
        ("POST", "http://brain.test:9000/v1/plans/abc123/cancel"),
    ]


def test_cancel_one_task(monkeypatch, outbound):
    calls, answers = outbound
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", TOKEN)
    answers.append(FakeResponse(200, {"cancelled": True}))
    assert "task cancelled" in CliRunner().invoke(app, ["cancel", "abc123/a"]).output
    assert calls[0][1].endswith("/v1/plans/abc123/tasks/a/cancel")


def test_missing_token_is_a_config_error():
    with pytest.raises(ConfigError, match="BRAIN_ADMIN_TOKEN"):
        BrainClient.from_env()


def test_unreachable_brain_is_one_line_with_a_hint(monkeypatch):
    def refuse(*args, **kwargs):
        raise requests.ConnectionError("refused")

    monkeypatch.setattr(client_module.requests, "request", refuse)
    with pytest.raises(AirigError) as caught:
        BrainClient("http://127.0.0.1:9", TOKEN).plans()
    assert "cannot reach the brain" in caught.value.message and caught.value.hint


def test_a_wrong_token_is_reported_without_showing_it(outbound):
    _, answers = outbound
    answers.append(FakeResponse(401, {"detail": "unknown token"}))
    with pytest.raises(ConfigError) as caught:
        BrainClient("http://x", TOKEN).plans()
    assert TOKEN not in str(caught.value)


def test_brain_url_defaults(tmp_path):
    assert brain_url(tmp_path / ".env") == "http://127.0.0.1:8080"
