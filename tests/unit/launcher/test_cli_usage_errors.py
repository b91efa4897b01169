"""Command-line mistakes are one line and a hint, exit 2, whichever click typer parses with.

typer 0.26 and later parse with their own copy of click, whose errors are not `click`'s:
each case runs the real `python start_services.py …` in a subprocess, so the edge
(`airig.launcher.cli.app.main`) is tested against the typer actually installed. Usage errors happen
while parsing, before any command body: a `docker` on PATH that only leaves a mark, and an
unreachable DOCKER_HOST, show that none of them reach the engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, copy_kit

PROG = "python start_services.py"

# (argv, a word the error line must name, the command whose --help the hint points at)
USAGE_ERRORS = [
    (["bogus"], "bogus", ""),
    (["--nope"], "--nope", ""),
    (["--profile"], "--profile", ""),
    (["up", "--profile"], "--profile", "up"),
    (["up", "extra"], "extra", "up"),
    (["logs", "-n", "abc"], "--tail", "logs"),
    (["down", "--nope"], "--nope", "down"),
    (["status", "--json", "extra"], "extra", "status"),
    (["join"], "--brain", "join"),
    (["detect", "--profile"], "--profile", "detect"),
    (["submit"], "plan_file", "submit"),
    (["plan"], "plan_id", "plan"),
    (["cancel"], "target", "cancel"),
    (["plans", "extra"], "extra", "plans"),
    (["token"], "command", "token"),
    (["token", "bogus"], "bogus", "token"),
    (["token", "revoke"], "token_id", "token revoke"),
    (["token", "create", "--scope"], "--scope", "token create"),
    (["--profile", "cpu", "token", "create", "--nope"], "--nope", "token create"),
    (["models", "bogus"], "bogus", "models"),
    (["models", "pull", "--nope"], "--nope", "models pull"),
    (["models", "list", "--service"], "--service", "models list"),
]


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """A kit layout of our own: its .env, HOME and docker are the test's, not the machine's."""
    root = copy_kit(tmp_path_factory.mktemp("kit"))
    (root / "home").mkdir()
    bin_dir = root / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(f'#!/bin/sh\necho "$@" >> "{root / "docker-called"}"\nexit 1\n')
    docker.chmod(0o755)
    return root


def run(kit: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRIG_", "DOCKER_"))}
    env.update(
        AIRIG_HOME=str(kit),
        AIRIG_NO_BOOTSTRAP="1",
        HOME=str(kit / "home"),
        PATH=f"{kit / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        DOCKER_HOST=f"unix://{kit / 'no-engine.sock'}",
        COLUMNS="200",
    )
    return subprocess.run(
        [sys.executable, str(ROOT / "start_services.py"), *args],
        capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=60, cwd=kit,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "word", "command"),
    USAGE_ERRORS,
    ids=[" ".join(argv) for argv, _, _ in USAGE_ERRORS],
)
def test_usage_error_is_one_line_and_a_hint(kit, argv, word, command):
    done = run(kit, *argv)
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) <= 2, output
    assert done.returncode == 2, output
    assert not done.stdout.strip(), "usage errors go to stderr"
    error, hint = lines
    assert error.startswith("✘") and word.lower() in error.lower(), output
    assert hint.strip() == f"→ try: {' '.join(filter(None, [PROG, command]))} --help", output
    assert not any(box in output for box in "╭╰│"), "no rich box"
    assert not (kit / "docker-called").exists(), "a usage error reached docker"
    assert not (kit / ".env").exists(), "a usage error ran a command body"


def test_help_still_prints_and_exits_zero(kit):
    done = run(kit, "token", "create", "--help")
    assert done.returncode == 0, done.stderr
    assert "--scope" in done.stdout and "Traceback" not in done.stderr
