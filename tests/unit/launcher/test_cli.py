"""The command line's edge: bad input gives one red line and a hint, exit ≠ 0, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support import ROOT, one_error


def run(kit: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRIG_")}
    env.update(AIRIG_HOME=str(kit), COLUMNS="200", DOCKER_HOST="unix:///nonexistent.sock")
    return subprocess.run(
        [sys.executable, str(ROOT / "start_services.py"), *args],
        capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip


def assert_clean_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert "Traceback" not in done.stdout
    one_error(done.returncode, done.stderr, *words)


def test_unknown_profile_flag(kit):
    assert_clean_error(run(kit, "--dry-run", "--profile", "gpu-apple"), "gpu-apple")


def test_bad_port_in_env(kit):
    (kit / ".env").write_text("OLLAMA_PORT=99999\n")
    assert_clean_error(run(kit, "status"), "OLLAMA_PORT")


def test_down_volumes_needs_confirmation_without_a_terminal(kit):
    assert_clean_error(run(kit, "down", "--volumes"), "--volumes")


def test_unreachable_docker_is_one_line_and_starts_nothing(kit):
    done = run(kit, "--profile", "cpu")
    assert_clean_error(done, "daemon")
    assert (kit / ".env").is_file()  # .env was created and completed, nothing else


def test_dry_run_prints_compose_commands_per_profile(kit):
    for profile in ("cpu", "gpu-nvidia", "gpu-amd"):
        done = run(kit, "--dry-run", "--profile", profile)
        assert done.returncode == 0, done.stderr
        ups = [line for line in done.stdout.splitlines() if " up --detach --wait" in line]
        assert [u.split("--project-name ")[1].split()[0] for u in ups] == [
            "airig-infra", "airig-compute", "airig-agents",
        ]  # fmt: skip
        assert all(f"--profile {profile}" in u for u in ups)
        assert "worker layout" in done.stdout and "worker-cpu (x" in done.stdout


def test_detect_json_on_this_host_says_cpu(kit):
    done = run(kit, "detect", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["profile"] == "cpu" and data["reasons"]
