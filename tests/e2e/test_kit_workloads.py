"""With the kit up for real: models verified and repaired, and plans run by the brain and
workers across a worker kill and a brain restart; the operator dashboard at the end, and
the report over what this kit ran (issue 40 §2), from the CLI and on its dashboard page."""

from __future__ import annotations

import json
import subprocess
import time
import wave
from collections import Counter
from pathlib import Path

import pytest
import requests
from e2e_lanes import lane_for

pytestmark = pytest.mark.docker
LANE = lane_for(__file__)
BRAIN = LANE.url("BRAIN_PORT")


@pytest.fixture(scope="module")
def up_kit(tmp_path_factory, test_images):
    from conftest import Kit, copy_kit, force_clean, write_test_env

    force_clean()
    root = copy_kit(tmp_path_factory.mktemp("kit") / "airig")
    write_test_env(
        root,
        AIRIG_OLLAMA_MODELS="qwen2.5:0.5b,nomic-embed-text",
        AIRIG_WHISPER_MODELS="Systran/faster-whisper-tiny",
    )
    kit = Kit(root)
    done = kit.run("--profile", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    kit.up_output = done.stdout
    yield kit
    kit.run("down", "--volumes", "--yes")
    force_clean()


def auth(kit) -> dict:
    return {"Authorization": f"Bearer {kit.env()['BRAIN_ADMIN_TOKEN']}"}


def test_up_showed_every_model_verified(up_kit):
    # `up` drew the init containers' progress and then one verified row per model
    rows = [line for line in up_kit.up_output.splitlines() if "✔" in line]
    for model in ("qwen2.5:0.5b", "nomic-embed-text", "Systran/faster-whisper-tiny"):
        assert any(model in row for row in rows), up_kit.up_output
    out = up_kit.run("models", "verify")
    assert out.returncode == 0, out.stdout + out.stderr
    for model in ("qwen2.5:0.5b", "nomic-embed-text", "Systran/faster-whisper-tiny"):
        assert model in out.stdout


def test_flipped_byte_fails_verify_and_pull_repairs(up_kit):
    # flip one byte in the model layer of qwen2.5:0.5b, found through its manifest
    flip = (
        "import json;"
        "m=json.load(open('/v/models/manifests/registry.ollama.ai/library/qwen2.5/0.5b'));"
        "b='/v/models/blobs/'+m['layers'][0]['digest'].replace(':','-');"
        "f=open(b,'r+b');f.seek(1000);c=f.read(1);f.seek(1000);f.write(bytes([c[0]^1]));f.close()"
    )
    image = up_kit.env()["AIRIG_IMAGE"]
    done = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--user",
            "0",
            "-v",
            f"{LANE.prefix}-ollama-models:/v",
            "--entrypoint",
            "python",
            image,
            "-c",
            flip,
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    bad = up_kit.run("models", "verify")
    assert bad.returncode != 0, bad.stdout
    assert "qwen2.5:0.5b" in bad.stdout + bad.stderr
    assert "Traceback" not in bad.stdout + bad.stderr
    fixed = up_kit.run("models", "pull", "--service", "ollama")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    again = up_kit.run("models", "verify")
    assert again.returncode == 0, again.stdout + again.stderr


def upload_audio(kit, tmp_path: Path) -> None:
    path = tmp_path / "talk.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(b"\x00\x01" * 16000 * 2)  # two seconds
    r = requests.put(
        f"{LANE.url('FILES_PORT')}/files/inputs/talk.wav",
        data=path.read_bytes(),
        headers=auth(kit),
        timeout=30,
    )
    assert r.status_code == 201, r.text


PLAN = """
name: e2e mixed plan
tasks:
  - id: transcribe
    type: transcribe
    model: Systran/faster-whisper-tiny
    payload: {audio: inputs/talk.wav}
  - id: summarise
    type: llm
    model: qwen2.5:0.5b
    depends_on: [transcribe]
    payload: {prompt: "Summarise: {{ tasks.transcribe.output }}"}
  - id: embed
    type: embed
    model: nomic-embed-text
    depends_on: [summarise]
    payload: {input: "{{ tasks.summarise.output }}"}
  - id: size
    type: shell
    payload: {command: "wc -c inputs/talk.wav"}
  - id: unload
    type: resource
    depends_on: [embed]
    payload: {action: unload, service: ollama, model: qwen2.5:0.5b}
"""


def wait_plan(kit, plan_id: str, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            plan = requests.get(f"{BRAIN}/v1/plans/{plan_id}", headers=auth(kit), timeout=10).json()
        except requests.ConnectionError:  # the brain is restarting
            time.sleep(1)
            continue
        if plan["status"] != "running":
            return plan
        time.sleep(1)
    raise AssertionError(f"plan {plan_id} still running after {timeout}s")


def test_mixed_plan_submitted_through_the_cli_succeeds(up_kit, tmp_path):
    upload_audio(up_kit, tmp_path)
    (tmp_path / "plan.yaml").write_text(PLAN)
    done = up_kit.run("submit", str(tmp_path / "plan.yaml"), "--watch", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    plans = requests.get(f"{BRAIN}/v1/plans", headers=auth(up_kit), timeout=10).json()
    plans = plans["plans"] if isinstance(plans, dict) else plans
    plan = wait_plan(up_kit, plans[0]["id"])
    states = {t["id"]: t["state"] for t in plan["tasks"]}
    assert set(states.values()) == {"SUCCEEDED"}, states


def running_worker(kit, plan_id: str, timeout: float = 60) -> str:
    """The name of the worker running the plan's only task."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = requests.get(f"{BRAIN}/v1/plans/{plan_id}", headers=auth(kit), timeout=10).json()[
            "tasks"
        ][0]
        if task["state"] == "RUNNING" and task["worker_id"]:
            return task["worker_id"]
        time.sleep(0.3)
    raise AssertionError("the task never started")


def submit(kit, body: str) -> str:
    r = requests.post(
        f"{BRAIN}/v1/plans",
        data=body,
        timeout=10,
        headers={**auth(kit), "Content-Type": "application/yaml"},
    )
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


def test_worker_killed_mid_task_completes_once_elsewhere(up_kit):
    plan_id = submit(
        up_kit, "tasks:\n  - {id: long, type: noop, payload: {sleep_s: 20, echo: x}}\n"
    )
    from conftest import worker_container

    worker = running_worker(up_kit, plan_id)
    # a CPU worker's name is its Compose slot (cpu-1): its container is that slot's
    killed = subprocess.run(
        ["docker", "kill", worker_container(worker)], capture_output=True, text=True
    )
    assert killed.returncode == 0, killed.stderr
    plan = wait_plan(up_kit, plan_id, timeout=180)
    task = plan["tasks"][0]
    assert task["state"] == "SUCCEEDED", task
    # a second attempt after the lease lapsed, on the other worker or on the killed one's
    # slot restarted under the same name (names are stable across restarts)
    assert task["attempt"] >= 2, task


def test_brain_restarted_mid_plan_completes(up_kit):
    body = "tasks:\n" + "".join(
        f"  - {{id: t{i}, type: noop, payload: {{sleep_s: 2, echo: '{i}'}}}}\n" for i in range(8)
    )
    plan_id = submit(up_kit, body)
    time.sleep(3)
    restarted = subprocess.run(
        ["docker", "restart", LANE.container("agents", "brain")], capture_output=True, text=True
    )
    assert restarted.returncode == 0, restarted.stderr
    plan = wait_plan(up_kit, plan_id, timeout=180)
    assert {t["state"] for t in plan["tasks"]} == {"SUCCEEDED"}


# ============================================================================ dashboard
# The operator dashboard (airig/brain/dashboard) in a real headless Chromium, against the
# kit's own brain and workers. It runs on this module's stack (up_kit): no second kit.


def test_dashboard_shows_the_kits_workers_and_a_plan_succeeding(up_kit):
    from integration.dashboard_browser import Dashboard, browser_missing, chromium

    if why := browser_missing():
        pytest.skip(why)
    token = up_kit.env()["BRAIN_ADMIN_TOKEN"]
    workers = requests.get(f"{BRAIN}/v1/workers", headers=auth(up_kit), timeout=10).json()
    alive = [w["name"] for w in workers["workers"] if w["alive"]]
    assert alive, workers
    with chromium() as driver:
        page = Dashboard(driver, BRAIN)
        page.open()
        page.sign_in(token)
        for name in alive:
            page.wait_css(f'[data-worker="{name}"][data-alive="true"]', timeout=30)
        plan_id = submit(up_kit, (
            "name: dashboard e2e\ntasks:\n"
            "  - {id: fetch, type: noop, payload: {sleep_s: 1}}\n"
            "  - {id: left, type: noop, depends_on: [fetch]}\n"
            "  - {id: right, type: noop, depends_on: [fetch]}\n"
            "  - {id: join, type: noop, depends_on: [left, right]}\n"
        ))  # fmt: skip
        page.go("plans")
        page.click(f'tr[data-plan="{plan_id}"]')
        page.wait(
            lambda _: set(page.attrs(".dag [data-task]", "data-state")) == {"SUCCEEDED"},
            120, "every task of the plan SUCCEEDED on the page",
        )  # fmt: skip
        page.wait_css('[data-plan-status="succeeded"]')
        page.screenshot("dashboard-e2e-plan.png")
        # The brain reaches 02-compute's models-ready gate over ai-network.
        page.go("models")
        assert "qwen2.5" in page.wait_css('[data-models="available"]', timeout=30)
        assert page.session_token() == token
        assert not [url for url in page.requested_urls() if token in url]


def test_the_report_counts_what_this_kit_ran_and_its_page_plots_it(up_kit):
    """`report --json` on the kit that ran this module's plans (issue 40 §2): its tasks done
    and failed per type are what the brain's plans say, the killed worker's task shows as
    a retry, and the dashboard's Report page plots the same total."""
    listed = requests.get(f"{BRAIN}/v1/plans", headers=auth(up_kit), timeout=10).json()
    listed = listed["plans"] if isinstance(listed, dict) else listed
    assert listed
    done_by_type: Counter[str] = Counter()
    failed_by_type: Counter[str] = Counter()
    for entry in listed:
        plan = wait_plan(up_kit, entry["id"], timeout=120)
        for task in plan["tasks"]:
            if task["state"] == "SUCCEEDED":
                done_by_type[task["type"]] += 1
            elif task["state"] == "FAILED":
                failed_by_type[task["type"]] += 1
    ran = up_kit.run("report", "--since", "1d", "--json", timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    report = json.loads(ran.stdout)
    rows = [row for bucket in report["buckets"] for row in bucket["tasks"]]
    reported_done: Counter[str] = Counter()
    reported_failed: Counter[str] = Counter()
    for row in rows:
        reported_done[row["type"]] += row["done"]
        reported_failed[row["type"]] += row["failed"]
    assert reported_done == done_by_type, (rows, done_by_type)
    assert +reported_failed == +failed_by_type, (rows, failed_by_type)
    assert report["truncated"] == []
    # the task whose worker was killed mid-run was retried once at least (its lease lapsed)
    assert sum(row["retries"] for row in rows if row["type"] == "noop") >= 1, rows
    noop = [row for row in rows if row["type"] == "noop" and row["done"]]
    assert all(row["run_p50_s"] is not None and row["run_p50_s"] >= 0 for row in noop), noop

    from integration.dashboard_browser import Dashboard, browser_missing, chromium

    if why := browser_missing():
        pytest.skip(why)
    total = sum(done_by_type.values())
    with chromium() as driver:
        page = Dashboard(driver, BRAIN)
        page.open()
        page.sign_in(up_kit.env()["BRAIN_ADMIN_TOKEN"])
        page.go("report")
        page.wait(lambda d: d.execute_script(
            "const s = document.querySelector('[data-plot=tasks]');"
            "return !!window.Plotly && !!s && !!s.data"
            " && s.data.find((t) => t.name === 'done').y.reduce((a, b) => a + b, 0)"
            f" === {total}"
        ), 60, f"the Report page's tasks plot summing to {total} done")  # fmt: skip
        page.screenshot("dashboard-e2e-report.png")
        errors = [e for e in page.console_errors() if "Applying inline style" not in e]
        assert errors == [], errors
