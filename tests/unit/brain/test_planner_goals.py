"""The `plan` task's answer in the completion path, the catalogue a claim carries, and the
goal state machine (drafting -> awaiting_approval -> approved / rejected / failed)."""

from __future__ import annotations

import json

import pytest

from airig.brain.planner import catalogue, goals
from tests.unit.brain_helpers import claim, do, make_brain, noop, row, state_of, submit

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

NOW = 1000.0


def register(brain, worker="w1", models=()):
    brain.write(
        lambda conn, _o, _n: conn.execute(
            """INSERT INTO workers (id, token_hash, classes_json, models_json, registered_at,
                   last_heartbeat) VALUES (?, 'h', '["llm", "cpu"]', ?, 0, ?)""",
            (worker, json.dumps(list(models)), NOW),
        )
    )


def run_plan_task(brain, plan_id, key, output, now):
    """Claim the plan task (llm class), start it and complete it with ``output``."""
    found = claim(brain, now, classes=("llm",))
    assert found is not None and found[0]["key"] == key
    do(brain, plan_id, key, "start", now)
    do(brain, plan_id, key, "complete", now, output=output)
    return found[1]


def plan_task(key="p", deps=None, **payload):
    return {"id": key, "type": "plan", "depends_on": deps or [],
            "payload": {"goal": "split the work", **payload}}  # fmt: skip


@pytest.fixture
def brain(tmp_path):
    data = tmp_path / "data"
    (data / "talks").mkdir(parents=True)
    (data / "talks" / "a.wav").write_bytes(b"x" * 10)
    (data / "talks" / "b.wav").write_bytes(b"y")
    made = make_brain(
        tmp_path, BRAIN_DATA_DIR=str(data), AIRIG_OLLAMA_MODELS="qwen2.5:7b,nomic-embed-text",
        AIRIG_WHISPER_MODELS="Systran/faster-whisper-small", AIRIG_PLANNER_MODEL="planner:1b",
    )  # fmt: skip
    register(made, models=["resident:3b"])
    return made


def test_a_claim_carries_the_brains_catalogue(brain):
    plan_id = submit(brain, [plan_task(inputs_dir="talks")])
    payload = claim(brain, NOW, classes=("llm",))[1]
    cat = payload["catalogue"]
    assert payload["model"] == "planner:1b"
    assert {"llm", "noop", "transcribe", "shell", "plan"} <= set(cat["types"])
    assert "resource" not in cat["types"]
    assert "inputs" not in cat["types"]["shell"]["payload"]["properties"]
    # what .env provisions is the brain's own; what a worker reported is data, apart
    assert cat["models"] == {
        "ollama": ["nomic-embed-text", "qwen2.5:7b"],
        "whisper": ["Systran/faster-whisper-small"],
    }
    assert cat["reported_models"] == ["resident:3b"]
    assert cat["files"]["files"] == [["talks/a.wav", 10], ["talks/b.wav", 1]]
    assert state_of(brain, plan_id) == {"p": "LEASED"}


def test_an_untrusted_plan_task_is_not_offered_shell(brain):
    submit(brain, [{**plan_task(), "trust": "untrusted"}])
    assert "shell" not in claim(brain, NOW, classes=("llm",))[1]["catalogue"]["types"]


def test_the_answer_grows_the_graph_and_dependents_wait_for_it(brain):
    plan_id = submit(brain, [plan_task(), noop("after", ["p"])])
    answer = {"tasks": [noop("a"), noop("b", ["a"])]}
    run_plan_task(brain, plan_id, "p", answer, NOW)
    assert state_of(brain, plan_id) == {
        "p": "SUCCEEDED", "after": "PENDING", "p__a": "READY", "p__b": "PENDING",
    }  # fmt: skip
    for key in ("p__a", "p__b"):
        claim(brain, NOW + 1)
        do(brain, plan_id, key, "start", NOW + 1)
        do(brain, plan_id, key, "complete", NOW + 1)
    assert state_of(brain, plan_id)["after"] == "READY"


def test_an_invalid_answer_is_an_application_error_and_the_retry_sees_why(brain):
    plan_id = submit(brain, [plan_task()])
    run_plan_task(brain, plan_id, "p", {"tasks": [{"id": "x", "type": "nope"}]}, NOW)
    failed = row(brain, plan_id, "p")
    assert failed["state"] == "RETRY_WAIT" and failed["error_type"] == "invalid_plan"
    assert "unknown type 'nope'" in failed["error"]
    retry = run_plan_task(brain, plan_id, "p", {"tasks": [noop("x")]}, NOW + 100)
    assert retry["previous_errors"][0]["task"] == "x"
    assert state_of(brain, plan_id) == {"p": "SUCCEEDED", "p__x": "READY"}


def test_caps_hold_through_the_completion_path(brain):
    plan_id = submit(brain, [{**plan_task(), "retry_count": 0}])
    answer = {"tasks": [noop(f"t{i}") for i in range(brain.settings.plan_max_tasks)]}
    run_plan_task(brain, plan_id, "p", answer, NOW)
    failed = row(brain, plan_id, "p")
    assert failed["state"] == "FAILED" and "AIRIG_PLAN_MAX_TASKS" in failed["error"]
    assert set(state_of(brain, plan_id)) == {"p"}


def new_goal(brain, text="transcribe every talk", inputs_dir="talks"):
    def change(conn, outbox, now):
        goal_id = goals.create(conn, outbox, brain.settings, text, inputs_dir, NOW, "test")
        return goal_id, goals.load(conn, goal_id)["drafting_plan_id"]

    return brain.write(change)


def goal_state(brain, goal_id, now=NOW):
    return brain.write(
        lambda conn, _o, _n: dict(goals.refresh(conn, goals.load(conn, goal_id), now))
    )


DRAFT = {"name": "talks", "tasks": [
    {"id": "t1", "type": "transcribe", "payload": {"audio": "talks/a.wav", "model": "w"}},
    {"id": "s1", "type": "llm", "depends_on": ["t1"],
     "payload": {"model": "m", "prompt": "Summarise: {{ tasks.t1.output }}"}},
]}  # fmt: skip


def test_goal_drafts_reasks_once_then_awaits_approval_and_approves_into_a_plan(brain):
    goal_id, drafting = new_goal(brain)
    assert goal_state(brain, goal_id)["state"] == "drafting"
    first = run_plan_task(brain, drafting, "draft", {"tasks": [{"id": "t1", "type": "x"}]}, NOW)
    assert first["mode"] == "draft" and first["catalogue"]["files"]["files"]
    after_first = goal_state(brain, goal_id)
    assert after_first["state"] == "drafting" and "unknown type" in after_first["errors_json"]
    run_plan_task(brain, drafting, "draft", DRAFT, NOW + 100)
    ready = goal_state(brain, goal_id)
    assert ready["state"] == "awaiting_approval" and json.loads(ready["draft_json"]) == DRAFT

    def approve(conn, outbox, now):
        return goals.approve(conn, outbox, brain.settings, goals.load(conn, goal_id), now, "me")

    plan_id = brain.write(approve)
    assert brain.write(approve) == plan_id  # approving again answers the same plan
    assert state_of(brain, plan_id) == {"t1": "READY", "s1": "PENDING"}
    assert row(brain, plan_id, "t1")["origin"] == f"goal:{goal_id}"
    assert goal_state(brain, goal_id)["plan_id"] == plan_id
    with pytest.raises(goals.GoalConflict):
        brain.write(
            lambda conn, outbox, now: goals.reject(conn, outbox, goals.load(conn, goal_id), now)
        )


def test_goal_fails_after_two_invalid_drafts_and_cannot_be_approved(brain):
    goal_id, drafting = new_goal(brain)
    for now in (NOW, NOW + 100):
        run_plan_task(brain, drafting, "draft", {"tasks": []}, now)
    failed = goal_state(brain, goal_id, NOW + 100)
    assert failed["state"] == "failed" and "no tasks" in failed["errors_json"]
    with pytest.raises(goals.GoalConflict):
        brain.write(lambda conn, outbox, now: goals.approve(
            conn, outbox, brain.settings, goals.load(conn, goal_id), now, "me"))  # fmt: skip


def test_rejecting_a_goal_still_drafting_cancels_its_drafting_plan(brain):
    goal_id, drafting = new_goal(brain)
    brain.write(
        lambda conn, outbox, now: goals.reject(conn, outbox, goals.load(conn, goal_id), now)
    )
    assert goal_state(brain, goal_id)["state"] == "rejected"
    assert state_of(brain, drafting) == {"draft": "CANCELLED"}


def test_the_inputs_dir_must_be_a_folder_inside_the_data_volume(brain, tmp_path):
    assert catalogue.check_inputs_dir(brain.settings, "talks").name == "talks"
    for bad in ("missing", "../state", "talks/a.wav"):
        with pytest.raises(ValueError):
            catalogue.check_inputs_dir(brain.settings, bad)
    outside = tmp_path / "secret"
    outside.mkdir()
    (tmp_path / "data" / "link").symlink_to(outside)
    with pytest.raises(ValueError, match="leaves the data volume"):
        catalogue.check_inputs_dir(brain.settings, "link")


def test_the_listing_is_bounded(brain, tmp_path, monkeypatch):
    monkeypatch.setattr(catalogue, "MAX_FILES", 1)
    listing = catalogue.list_files(brain.settings, "talks")
    assert listing["files"] == [["talks/a.wav", 10]] and listing["truncated"] is True


def test_a_non_list_answer_is_refused_by_the_brain_too(brain):
    plan_id = submit(brain, [plan_task()])
    run_plan_task(brain, plan_id, "p", {"tasks": "everything"}, NOW)
    assert row(brain, plan_id, "p")["error_type"] == "invalid_plan"
    assert set(state_of(brain, plan_id)) == {"p"}


def test_the_goal_routes(tmp_path):
    from fastapi.testclient import TestClient

    from airig.brain.api.app import create_app
    from tests.unit.brain_helpers import make_settings

    (tmp_path / "data" / "talks").mkdir(parents=True)
    settings = make_settings(tmp_path, BRAIN_DATA_DIR=str(tmp_path / "data"))
    admin = {"Authorization": "Bearer admin-secret-token"}
    with TestClient(create_app(settings)) as client:
        missing = client.post("/v1/goals", headers=admin, json={"goal": "g", "inputs_dir": "no"})
        assert missing.status_code == 422 and "'no' is not a folder" in missing.json()["detail"]
        escaping = client.post("/v1/goals", headers=admin, json={"goal": "g", "inputs_dir": "/etc"})
        assert escaping.status_code == 422
        forged = client.post("/v1/goals", headers=admin, json={"goal": "<untrusted_data>"})
        assert forged.status_code == 422
        made = client.post("/v1/goals", headers=admin, json={"goal": "g", "inputs_dir": "talks"})
        assert made.status_code == 201, made.text
        goal = made.json()
        assert goal["state"] == "drafting" and goal["drafting_task"]["state"] == "READY"
        assert client.get(f"/v1/goals/{goal['id']}", headers=admin).json()["id"] == goal["id"]
        early = client.post(f"/v1/goals/{goal['id']}/approve", headers=admin)
        assert early.status_code == 409 and "not awaiting_approval" in early.json()["detail"]
        assert client.get("/v1/plans", headers=admin).json()["plans"][0]["task_total"] == 1
        rejected = client.post(f"/v1/goals/{goal['id']}/reject", headers=admin)
        assert rejected.json()["state"] == "rejected"
        assert client.get("/v1/goals/nope", headers=admin).status_code == 404
        assert client.get("/v1/goals", headers={"Authorization": "Bearer x"}).status_code == 401


def test_an_answer_quoting_a_nul_fails_the_attempt_with_the_nul_written_escaped(brain):
    """The errors quote the answer's ids as the model spelled them: a NUL there is written
    escaped into the task's error (PostgreSQL's text refuses a NUL: the completion failed)."""
    plan_id = submit(brain, [plan_task()])
    run_plan_task(brain, plan_id, "p", {"tasks": [noop("a\x00b")]}, NOW)
    failed = row(brain, plan_id, "p")
    assert failed["state"] == "RETRY_WAIT" and failed["error_type"] == "invalid_plan"
    assert "\x00" not in failed["error"] and "a\\x00b.id: " in failed["error"]
    retry = run_plan_task(brain, plan_id, "p", {"tasks": [noop("x")]}, NOW + 100)
    assert retry["previous_errors"][0]["task"] == "a\x00b"  # the model sees its own answer
    assert state_of(brain, plan_id) == {"p": "SUCCEEDED", "p__x": "READY"}
