"""Compose parses a stopped kit's stacks (no .airig/host.env) as `down` and `status` pass
them: only the env files that exist (docker.py, Docker.client). Needs only the compose
binary."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from support import write_env

from airig.launcher.compose.plan import plan_for_running
from airig.launcher.settings import load_settings


def compose_available() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(
    not compose_available(), reason="docker compose v2 plugin not installed"
)


@pytest.mark.parametrize("escalation", ["off", "on"])
def test_every_stack_of_a_stopped_kit_parses(kit, escalation):
    write_env(kit, AIRIG_ESCALATION=escalation)
    plan = plan_for_running(load_settings(kit))
    assert not (kit / ".airig" / "host.env").exists()
    for stack in plan.stacks:
        cmd = ["docker", "compose", "-p", stack.project]
        cmd += [arg for f in stack.files for arg in ("-f", str(f))]
        cmd += [arg for e in stack.env_files if e.exists() for arg in ("--env-file", str(e))]
        cmd += [arg for p in stack.profiles for arg in ("--profile", p)]
        done = subprocess.run([*cmd, "config", "--quiet"], capture_output=True, text=True)
        assert done.returncode == 0, f"{stack.name}: {done.stderr}"
