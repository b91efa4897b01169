"""`plans --prune [--older-than AGE] [--dry-run]` and the store in `status`, against the
in-process brain (the `brain` fixture); a bad age is one line and exit 2."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from support import one_error, run_cli
from typer.testing import CliRunner

from airig.launcher.cli.tasks import app, parse_age
from airig.launcher.settings import checkout_settings
from airig.launcher.views.status import brain_store, store_table

TOKEN = "admin-secret-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def checkout(monkeypatch, tmp_path):
    for name in ("BRAIN_URL", "BRAIN_PORT", "BRAIN_ADMIN_TOKEN", "AIRIG_BIND_ADDRESS",
                 "AIRIG_RETENTION_DAYS"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "01-infra").mkdir()
    (tmp_path / "01-infra" / "compose.yaml").write_text("services: {}\n")
    (tmp_path / ".env").write_text(f"BRAIN_ADMIN_TOKEN={TOKEN}\n")
    monkeypatch.setenv("AIRIG_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")


def cancelled_plan(brain) -> str:
    tasks = [{"id": "a", "type": "noop"}, {"id": "b", "type": "noop"}]
    plan = brain.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": tasks})
    plan_id = plan.json()["id"]
    assert brain.post(f"/v1/plans/{plan_id}/cancel", headers=ADMIN).status_code == 200
    return plan_id


@pytest.mark.parametrize(
    ("text", "seconds"), [("7d", 604_800), ("12h", 43_200), ("30m", 1800), ("90s", 90),
                          ("2w", 1_209_600), ("1.5d", 129_600), (" 0s ", 0)],
)  # fmt: skip
def test_ages(text, seconds):
    assert parse_age(text) == seconds


def test_prune_dry_run_then_for_real(brain, brain_calls):
    plan_id = cancelled_plan(brain)
    dry = CliRunner().invoke(app, ["plans", "--prune", "--older-than", "0s", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "would remove 1 plan(s), 2 task(s)" in dry.output and "nothing deleted" in dry.output
    assert brain.get(f"/v1/plans/{plan_id}", headers=ADMIN).status_code == 200
    done = CliRunner().invoke(app, ["plans", "--prune", "--older-than", "0s"])
    assert done.exit_code == 0, done.output
    assert "removed 1 plan(s), 2 task(s)" in done.output
    assert brain.get(f"/v1/plans/{plan_id}", headers=ADMIN).status_code == 404
    assert brain_calls[-1][0] == "POST" and brain_calls[-1][1].endswith("/v1/plans/prune")


def test_prune_defaults_to_the_retention_of_the_checkout(brain, tmp_path):
    cancelled_plan(brain)  # finished just now: younger than 30 days
    kept = CliRunner().invoke(app, ["plans", "--prune"])
    assert "removed 0 plan(s)" in kept.output
    (tmp_path / ".env").write_text(f"BRAIN_ADMIN_TOKEN={TOKEN}\nAIRIG_RETENTION_DAYS=0\n")
    forever = CliRunner().invoke(app, ["plans", "--prune"])
    assert forever.exit_code == 2 and "AIRIG_RETENTION_DAYS is 0" in forever.output


@pytest.mark.parametrize("age", ["7", "7x", "d", "-1d", "1e9w"])
def test_a_bad_age_is_one_line_and_exit_2(monkeypatch, capsys, age):
    code, _out, err = run_cli(monkeypatch, capsys, None, "plans", "--prune", "--older-than", age)
    assert code == 2
    one_error(code, err, "--older-than", "7d")


def test_older_than_without_prune_is_refused(monkeypatch, capsys):
    code, _out, err = run_cli(monkeypatch, capsys, None, "plans", "--dry-run")
    assert code == 2
    one_error(code, err, "--prune")


def test_status_shows_the_store(brain):
    brain.post(
        "/v1/plans", headers=ADMIN, json={"name": "p", "tasks": [{"id": "a", "type": "noop"}]}
    )
    store = brain_store(checkout_settings())
    assert store is not None and store["db_bytes"] > 0
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(store_table(store))
    text = out.getvalue()
    assert "kept 30 days" in text and "database" in text and "events log" in text


def test_status_without_a_brain_has_no_store(monkeypatch):
    monkeypatch.setenv("BRAIN_URL", "http://127.0.0.1:1")  # nothing listens there
    assert brain_store(checkout_settings()) is None
