"""The whole kit for real: `python start_services.py --profile cpu`, then `down`."""

from __future__ import annotations

import json
import subprocess

import pytest
import requests
from e2e_lanes import lane_for

LANE = lane_for(__file__)

pytestmark = pytest.mark.docker


def docker_json(*cmd: str):
    out = subprocess.run(["docker", *cmd], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def container_ids() -> set[str]:
    """This kit's containers (its lane's projects): the other lane and test_two_rigs.py run
    their own meanwhile."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", "label=com.docker.compose.project",
         "--format", '{{.ID}} {{.Label "com.docker.compose.project"}}'],
        capture_output=True,
        text=True,
    ).stdout  # fmt: skip
    return {line.split()[0] for line in out.splitlines() if f" {LANE.prefix}-" in line}


def test_up_runs_every_service_healthy_and_down_removes_everything(kit):
    from conftest import airig_leftovers

    done = kit.run("--profile", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Profile cpu (from --profile flag)" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr

    rows = kit.status()
    services = {r["service"] for r in rows}
    expected = {
        "volumes-init",
        "files",
        "ollama-cpu",
        "comfyui-cpu",
        "whisper-cpu",
        "ollama-init",
        "comfyui-init",
        "whisper-init",
        "models-ready",
        "brain",
        "worker-cpu",
    }
    assert expected <= services
    for r in rows:
        if r["service"].endswith("-init"):
            assert (r["state"], r["exit_code"]) == ("exited", 0), r
        else:
            assert (r["state"], r["health"]) == ("running", "healthy"), r

    # every long-running container is on the shared network
    network = docker_json("network", "inspect", LANE.network)[0]
    attached = {c["Name"] for c in network["Containers"].values()}
    running = {r["container"] for r in rows if r["state"] == "running"}
    assert running <= attached

    # ComfyUI on 127.0.0.1:COMFYUI_PORT, by default bound to loopback only
    stats = requests.get(f"{LANE.url('COMFYUI_PORT')}/system_stats", timeout=10).json()
    assert stats["devices"][0]["type"] == "cpu"
    comfy = next(r for r in rows if r["service"] == "comfyui-cpu")
    assert comfy["urls"] == [LANE.url("COMFYUI_PORT")]

    # workers reached the brain by its name on ai-network and registered
    token = kit.env()["BRAIN_ADMIN_TOKEN"]
    assert token and token != "change-me" and token not in done.stdout
    workers = requests.get(
        f"{LANE.url('BRAIN_PORT')}/v1/workers",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ).json()
    listed = workers["workers"] if isinstance(workers, dict) else workers
    assert len(listed) >= 2
    worker = next(r["container"] for r in rows if r["service"] == "worker-cpu")
    probe = subprocess.run(
        [
            "docker",
            "exec",
            worker,
            "python",
            "-c",
            "import urllib.request as u; print(u.urlopen('http://brain:8080/health').status)",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "200", probe.stderr

    # a second up changes nothing
    before = container_ids()
    again = kit.run()
    assert again.returncode == 0, again.stdout + again.stderr
    assert container_ids() == before

    # down --volumes without --yes and without a terminal refuses to delete models
    refused = kit.run("down", "--volumes")
    assert refused.returncode == 1 and "--yes" in refused.stderr
    done = kit.run("down", "--volumes", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert airig_leftovers() == {"containers": [], "networks": [], "volumes": []}


def test_forced_gpu_profile_on_a_host_without_gpu_fails_cleanly(kit):
    from conftest import airig_leftovers

    before = airig_leftovers()
    done = kit.run("--profile", "gpu-nvidia", timeout=300)
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    error_lines = [line for line in done.stderr.splitlines() if line.startswith("✘")]
    assert len(error_lines) == 1 and "gpu-nvidia" in error_lines[0], done.stderr
    assert "→" in done.stderr  # the fix
    assert airig_leftovers() == before  # nothing started, no network created


def test_failed_provisioning_names_the_model_and_leaves_nothing(kit):
    from conftest import airig_leftovers, write_test_env

    # one unknown model, one whose pull sends an error line halfway through its blob
    models = "nonexistent-model:7b,midstream-fail:1b"
    write_test_env(kit.root, AIRIG_OLLAMA_MODELS=models, AIRIG_WAIT_TIMEOUT="240")
    done = kit.run("--profile", "cpu")
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "ollama-init" in out, out
    failed = [line for line in out.splitlines() if "failed" in line or "✘" in line]
    for model in ("nonexistent-model:7b", "midstream-fail:1b"):
        assert any(model in line for line in failed), out
    assert "Traceback" not in out
    left = airig_leftovers()
    assert left["containers"] == [], left
