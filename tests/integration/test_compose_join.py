"""A joined rig as Compose itself resolves it (`docker compose config`, no engine needed):
no brain, workers pointed at the remote brain with the join token, and a second kit on
the same engine with its own projects, network and volumes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support import write_env

from airig.launcher.compose.plan import GpuSlot, build_plan
from airig.launcher.settings import load_settings

REMOTE = "https://brain.example.lan"

pytestmark = pytest.mark.skipif(
    shutil.which("docker") is None
    or subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0,
    reason="docker compose v2 plugin not installed",
)


def config(stack) -> dict:
    cmd = ["docker", "compose"]
    for f in stack.files:
        cmd += ["-f", str(f)]
    for e in stack.env_files:
        cmd += ["--env-file", str(e)]
    cmd += ["--profile", *stack.profiles, "-p", stack.project, "config", "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def kit(kit: Path) -> Path:
    """The shared kit copy with a .env: the example's, secrets filled in."""
    write_env(kit)
    return kit


def plan_for(kit, profile="cpu", gpus=(), **values):
    with (kit / ".env").open("a") as env:
        env.writelines(f"{k}={v}\n" for k, v in values.items())
    plan = build_plan(load_settings(kit), profile, list(gpus))
    for path, text in plan.generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return plan


@pytest.mark.parametrize("profile", ["cpu", "gpu-nvidia"])
def test_a_joined_rig_runs_workers_for_the_remote_brain_and_no_brain(kit, profile):
    gpus = [GpuSlot(0), GpuSlot(1)] if profile != "cpu" else []
    plan = plan_for(
        kit, profile, gpus, AIRIG_JOIN_BRAIN_URL=REMOTE, AIRIG_JOIN_TOKEN="join-tok-123456",
        AIRIG_RIG_NAME="rig-b",
    )  # fmt: skip
    svcs = config(plan.stack("03-agents"))["services"]
    assert "brain" not in svcs
    workers = {name: s for name, s in svcs.items() if name.startswith("worker-")}
    expected = {"worker-cpu"} | {f"worker-gpu{g.index}" for g in gpus}
    assert set(workers) == expected
    for worker in workers.values():
        env = worker["environment"]
        assert env["BRAIN_URL"] == REMOTE
        assert env["WORKER_BOOTSTRAP_TOKEN"] == "join-tok-123456"
        assert (env["WORKER_HOST"], env["WORKER_NAME_PREFIX"]) == ("rig-b", "rig-b-")
        # an optional dependency on a service that does not run: Compose skips it
        assert worker["depends_on"].get("brain", {"required": False})["required"] is False
    # the models this rig's workers use are its own, verified by its own 02-compute
    compute = config(plan.stack("02-compute"))["services"]
    assert {"ollama-init", "models-ready", f"ollama-{profile}"} <= set(compute)


def test_a_rig_with_its_own_brain_is_unchanged(kit):
    plan = plan_for(kit, AIRIG_RIG_NAME="rig-a")
    svcs = config(plan.stack("03-agents"))["services"]
    assert svcs["brain"]["ports"][0]["published"] == "8080"
    env = svcs["worker-cpu"]["environment"]
    assert (env["BRAIN_URL"], env["WORKER_BOOTSTRAP_TOKEN"]) == ("http://brain:8080", "s3cret")
    assert (env["WORKER_HOST"], env["WORKER_NAME_PREFIX"]) == ("rig-a", "")
    assert svcs["worker-cpu"]["depends_on"]["brain"]["condition"] == "service_healthy"


def test_a_second_kit_on_one_engine_shares_nothing_by_name(kit):
    plan = plan_for(kit, AIRIG_PROJECT_PREFIX="rigb", AIRIG_NETWORK="ai-network-b")
    infra = config(plan.stack("01-infra"))
    assert infra["name"] == "rigb-infra"
    assert infra["networks"]["ai"]["name"] == "ai-network-b"
    assert {v["name"] for v in infra["volumes"].values()} == {
        f"rigb-{v}" for v in ("data", "results", "brain-state", "ollama-models",
                              "comfyui-models", "comfyui-custom-nodes", "comfyui-input",
                              "comfyui-output", "comfyui-user", "whisper-models")
    }  # fmt: skip
    for stack in plan.stacks[1:]:
        model = config(stack)
        assert model["name"] == stack.project and stack.project.startswith("rigb-")
        assert all(v["name"].startswith("rigb-") for v in model.get("volumes", {}).values())
