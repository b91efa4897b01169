"""A goal that fails for want of a model says which model and how to provision it; `up`
says so first; a host path for --inputs-dir gets the way onto the data volume (issue 22
§5)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from airig.common.shared_settings import PLANNER_MODEL
from airig.launcher.brain_client import BrainClient
from airig.launcher.cli import goal_flow
from airig.launcher.cli.tasks import app
from airig.launcher.lifecycle.up import planner_warning
from airig.launcher.settings import load_settings

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

TOKEN = "admin-secret-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
PLANNER = PLANNER_MODEL.default


@pytest.fixture(autouse=True)
def checkout(monkeypatch, tmp_path):
    for name in ("BRAIN_URL", "BRAIN_PORT", "AIRIG_BIND_ADDRESS", "AIRIG_OLLAMA_MODELS",
                 "AIRIG_PLANNER_MODEL"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "01-infra").mkdir()
    (tmp_path / "01-infra" / "compose.yaml").write_text("services: {}\n")
    monkeypatch.setenv("AIRIG_HOME", str(tmp_path))
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", TOKEN)


@pytest.mark.parametrize(
    ("models", "warned"),
    [
        ("llama3.2:3b,nomic-embed-text", True),
        (f"{PLANNER},nomic-embed-text", False),
        (f"library/{PLANNER}", False),  # the same model, spelt out
    ],
)
def test_up_says_when_the_planner_model_is_not_pulled(tmp_path, models, warned):
    (tmp_path / ".env").write_text(f"AIRIG_OLLAMA_MODELS={models}\n")
    warning = planner_warning(load_settings(tmp_path))
    assert (warning is not None) == warned
    if warned:
        assert f"AIRIG_PLANNER_MODEL {PLANNER} is not in AIRIG_OLLAMA_MODELS" in warning


def test_a_goal_whose_model_is_not_pulled_names_it_and_the_fix(brain):
    goal = brain.post("/v1/goals", headers=ADMIN, json={"goal": "summarise inputs"}).json()
    token = brain.post("/v1/workers/register", headers=BOOT, json={
        "name": "gpu0", "classes": ["llm", "cpu"],
    }).json()["token"]  # fmt: skip
    worker = {"Authorization": f"Bearer {token}"}
    task = brain.post("/v1/claims", headers=worker, json={"wait_s": 0, "start": True}).json()
    brain.post(f"/v1/tasks/{task['task_id']}/fail", headers=worker, json={
        "attempt": task["attempt"], "lease_id": task["lease_id"],
        "error_type": "model_not_found", "retryable": False,
        "message": f"model {task['model']!r} is not on the Ollama server: not found",
    })  # fmt: skip
    failed = BrainClient("http://127.0.0.1:8080", TOKEN).goal(goal["id"])
    assert failed["state"] == "failed"
    error = goal_flow.failure(failed, "unused-when-the-brain-says")
    assert f"the brain's model {task['model']} is not on its Ollama" in error.message
    assert f"add {task['model']} to AIRIG_OLLAMA_MODELS" in error.hint
    assert "reword" not in error.hint


def test_an_invalid_draft_still_asks_to_reword():
    goal = {"id": "g1", "state": "failed", "drafting_task": {"error_type": "invalid_plan"},
            "errors": [{"task": "a", "field": "type", "message": "unknown type"}]}  # fmt: skip
    assert "reword the goal" in goal_flow.failure(goal).hint


def test_a_host_path_for_inputs_dir_is_uploaded_first_and_a_down_service_is_one_line(
    tmp_path, brain, brain_calls, monkeypatch
):
    # a port nothing listens on, not the default 8090: a kit may be up on this machine (the
    # e2e tests' kit, on another xdist worker of the same run)
    monkeypatch.setenv("FILES_PORT", "9")
    talks = tmp_path / "talks"
    talks.mkdir()
    (talks / "a.wav").write_bytes(b"RIFF")
    result = CliRunner().invoke(app, ["submit", "--goal", "x", "--inputs-dir", str(talks)])
    error = result.exception
    assert error.message.startswith("cannot reach the file service at http://127.0.0.1:")
    # nothing is asked of the brain before the inputs are there
    assert [url for _, url in brain_calls if "/v1/" in url] == []
