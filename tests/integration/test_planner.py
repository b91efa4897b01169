"""The brain's model plans: real brain and worker processes, an Ollama stand-in that
answers with scripted drafts (``STANDIN_SCRIPT``), the CLI as a user runs it.

- a goal becomes a valid draft, approved with `submit --goal --yes --watch`, and runs;
- a broken draft goes back to the model once with the validator's errors, the fixed one
  is shown, and answering "n" rejects it: nothing of it runs;
- a `plan` task grows its plan's graph, the tasks that depended on it wait for the new
  ones, and the caps (tasks per plan, levels of growth) hold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import pytest
import requests
from brain_procs import ADMIN, ADMIN_TOKEN, Cluster
from standins.conftest_helpers import start_standin
from support import ROOT, copy_kit

PLANNER, WHISPER = "qwen2.5:0.5b", "Systran/faster-whisper-tiny"


@pytest.fixture
def services(tmp_path):
    script = tmp_path / "script.json"
    script.write_text("[]")
    ollama = start_standin(
        "ollama",
        tmp_path / "ollama",
        {"STANDIN_MODEL_BYTES": "4096", "STANDIN_SCRIPT": str(script)},
    )
    whisper = start_standin("whisper", tmp_path / "hub", {"STANDIN_MODEL_BYTES": "1024"})
    try:
        body = {"model": PLANNER, "stream": False}
        requests.post(f"{ollama.url}/api/pull", json=body, timeout=30).raise_for_status()
        requests.post(f"{whisper.url}/v1/models/{WHISPER}", timeout=30).raise_for_status()
        yield {"OLLAMA_URL": ollama.url, "WHISPER_URL": whisper.url}, script
    finally:
        ollama.stop()
        whisper.stop()


@pytest.fixture
def cluster(tmp_path, services):
    env, script = services
    made = Cluster(tmp_path / "cluster", services=env)
    made.script = script  # type: ignore[attr-defined]
    made.root.mkdir()
    for name in ("a.wav", "b.wav"):
        write_wav(made.root / "data" / "talks" / name)
    made.brain_env = {
        "BRAIN_DATA_DIR": str(made.root / "data"), "AIRIG_PLANNER_MODEL": PLANNER,
        "AIRIG_OLLAMA_MODELS": PLANNER, "AIRIG_WHISPER_MODELS": WHISPER,
        "AIRIG_PLAN_MAX_TASKS": "8", "AIRIG_PLAN_MAX_DEPTH": "1",
    }  # fmt: skip
    try:
        made.start_brain()
        made.start_worker("llm0", "llm,script,cpu")
        yield made
    finally:
        made.stop()


def write_wav(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(16000)
        audio.writeframes(b"\0\0" * 8000)


def script(cluster, *answers: dict) -> None:
    cluster.script.write_text(json.dumps([json.dumps(answer) for answer in answers]))


def asked(cluster) -> list[dict]:
    """The requests the scripted answers went to, in order."""
    path = cluster.script.with_name(cluster.script.name + ".requests")
    return [json.loads(line) for line in path.read_text().splitlines()]


def cli(cluster, tmp_path, *args: str, answer: str = "") -> subprocess.CompletedProcess:
    kit = tmp_path / "kit"
    if not kit.exists():
        copy_kit(kit)
        (kit / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRIG_", "BRAIN_"))}
    env.update(AIRIG_HOME=str(kit), AIRIG_NO_BOOTSTRAP="1", HOME=str(kit / "home"),
               BRAIN_URL=cluster.url, BRAIN_ADMIN_TOKEN=ADMIN_TOKEN, COLUMNS="200")  # fmt: skip
    return subprocess.run(
        [sys.executable, str(ROOT / "start_services.py"), *args], input=answer,
        capture_output=True, text=True, env=env, timeout=120, cwd=kit,
    )  # fmt: skip


GOAL = "transcribe every file in talks and summarise each"
DRAFT = {"name": "talks", "tasks": [
    {"id": "t_a", "type": "transcribe", "payload": {"audio": "talks/a.wav", "model": WHISPER}},
    {"id": "t_b", "type": "transcribe", "payload": {"audio": "talks/b.wav", "model": WHISPER}},
    {"id": "s_a", "type": "llm", "depends_on": ["t_a"],
     "payload": {"model": PLANNER, "prompt": "Summarise: {{ tasks.t_a.output }}"}},
    {"id": "s_b", "type": "llm", "depends_on": ["t_b"],
     "payload": {"model": PLANNER, "prompt": "Summarise: {{ tasks.t_b.output }}"}},
]}  # fmt: skip
BROKEN = {"name": "talks", "tasks": [
    {"id": "t_a", "type": "transcribe", "payload": {"file": "talks/a.wav"}},
    {"id": "s_a", "type": "llm", "depends_on": ["t_x"], "payload": {"model": PLANNER}},
]}  # fmt: skip


def test_a_goal_is_drafted_approved_with_yes_and_runs(cluster, tmp_path):
    script(cluster, DRAFT)
    done = cli(cluster, tmp_path, "submit", "--goal", GOAL, "--inputs-dir", "talks", "--yes",
               "--watch")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr + cluster.logs()
    assert "s_b" in done.stdout and "t_b" in done.stdout  # the draft's table was shown
    (request,) = asked(cluster)
    prompt = "\n".join(m["content"] for m in request["messages"])
    # the brain's catalogue: the files that exist (wrapped as outside data) and the models
    assert "<untrusted_data>" in prompt and "talks/a.wav" in prompt and "talks/b.wav" in prompt
    assert PLANNER in prompt and WHISPER in prompt and GOAL in prompt
    assert request["format"]["properties"]["tasks"]["type"] == "array"
    goal = cluster.get("/v1/goals")["goals"][0]
    assert goal["state"] == "approved"
    plan = cluster.get(f"/v1/plans/{goal['plan_id']}")
    assert plan["status"] == "succeeded"
    assert {t["id"]: t["origin"] for t in plan["tasks"]} == dict.fromkeys(
        ("t_a", "t_b", "s_a", "s_b"), f"goal:{goal['id']}"
    )


def test_a_broken_draft_is_asked_again_and_a_no_runs_nothing(cluster, tmp_path):
    script(cluster, BROKEN, DRAFT)
    done = cli(cluster, tmp_path, "submit", "--goal", GOAL, "--inputs-dir", "talks", answer="n\n")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Run this plan?" in done.stdout and "rejected; nothing ran" in done.stdout
    first, second = asked(cluster)
    retry_prompt = second["messages"][-1]["content"]
    assert "previous answer was refused" in retry_prompt and "t_x" in retry_prompt
    assert "previous answer" not in first["messages"][-1]["content"]
    (goal,) = cluster.get("/v1/goals")["goals"]
    assert goal["state"] == "rejected" and goal["plan_id"] is None
    assert goal["draft"] == DRAFT and goal["drafting_task"]["attempt"] == 2
    plans = cluster.get("/v1/plans")["plans"]
    assert [p["id"] for p in plans] == [goal["drafting_plan_id"]]  # only the drafting plan
    refused = requests.post(
        f"{cluster.url}/v1/goals/{goal['id']}/approve", headers=ADMIN, timeout=5
    )
    assert refused.status_code == 409


def test_a_goal_with_a_missing_folder_is_refused_in_one_line(cluster, tmp_path):
    done = cli(cluster, tmp_path, "submit", "--goal", GOAL, "--inputs-dir", "nowhere", "--yes")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "nowhere" in done.stderr and "inputs-dir" in done.stderr
    assert cluster.get("/v1/goals")["goals"] == []


def noop(key: str, deps: list[str] | None = None) -> dict:
    return {"id": key, "type": "noop", "depends_on": deps or []}


def test_a_plan_task_grows_the_graph_within_the_caps(cluster):
    nested = {"id": "more", "type": "plan", "retry_count": 0, "payload": {"goal": "go deeper"}}
    script(cluster, {"tasks": [noop("x"), noop("y", ["x"]), nested]},
           {"tasks": [noop("z")]})  # fmt: skip
    plan = cluster.submit({"name": "grow", "tasks": [
        {"id": "p", "type": "plan", "payload": {"goal": "split the work", "inputs_dir": "talks"}},
        noop("report", ["p"]),
    ]})  # fmt: skip
    view = cluster.wait_plan(plan["id"], 60)
    tasks = {t["id"]: t for t in view["tasks"]}
    assert set(tasks) == {"p", "report", "p__x", "p__y", "p__more"}, cluster.logs()
    assert tasks["p__x"]["origin"] == "plan:p" and tasks["p__x"]["depth"] == 1
    assert tasks["p__y"]["depends_on"] == ["p__x"]
    assert tasks["p__y"]["state"] == "SUCCEEDED"
    # depth: `more` is one growth deep already (AIRIG_PLAN_MAX_DEPTH=1); its answer is refused
    assert tasks["p__more"]["state"] == "FAILED"
    assert "AIRIG_PLAN_MAX_DEPTH" in tasks["p__more"]["error"]
    # `report` waited for the grown leaves, so the failed `more` held it back for good
    assert tasks["report"]["state"] == "UPSTREAM_FAILED"
    assert sorted(tasks["report"]["depends_on"]) == ["p", "p__more", "p__y"]
    events = cluster.get(f"/v1/plans/{plan['id']}/events")["events"]
    added = [e for e in events if e["event_type"] == "tasks_added"]
    assert [(e["task_id"], e["origin"], e["added"]) for e in added] == [
        ("p", "plan:p", ["p__x", "p__y", "p__more"])
    ]


def test_the_task_cap_fails_the_plan_task_and_adds_nothing(cluster):
    too_many = {"tasks": [noop(f"t{i}") for i in range(8)]}
    script(cluster, too_many, too_many)
    plan = cluster.submit({"name": "cap", "tasks": [
        {"id": "p", "type": "plan", "retry_count": 1, "payload": {"goal": "split it"}},
    ]})  # fmt: skip
    view = cluster.wait_plan(plan["id"], 60)
    (task,) = view["tasks"]
    assert task["state"] == "FAILED" and task["error_type"] == "invalid_plan"
    assert "AIRIG_PLAN_MAX_TASKS" in task["error"] and task["attempt"] == 2
    second = asked(cluster)[1]["messages"][-1]["content"]
    assert "AIRIG_PLAN_MAX_TASKS" in second  # the retry told the model why
    assert len(cluster.get(f"/v1/plans/{plan['id']}")["tasks"]) == 1
