"""`.ci/run` fails when tests/unit fails at the lower bounds (.ci/lower-bounds), not only
when the newest releases fail, so a range in pyproject.toml that stops being true fails CI.

The scripts run here for real, in a copy of the tree's `.ci/` with stand-ins for what they
call (the venv's python3, the media tools, the background install): nothing is installed
and no test suite runs. `.ci/run` is run from its last step ("Tests: python -m pytest")
on, the part that decides its exit status."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def stand_in(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def tree(tmp_path):
    """A repository root with the real `.ci/lower-bounds`, media tools on PATH, and a
    lower-bounds venv whose python3 logs its call and exits with $FAKE_RC."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "lower-bounds", tmp_path / ".ci" / "lower-bounds")
    tools = tmp_path / "tools"
    for tool in ("ffmpeg", "pdftoppm", "tesseract"):
        stand_in(tools / tool, "exit 0")
    venv = tmp_path / ".ci" / ".venv" / "lower"
    log = 'echo "AIRIG_STRICT_SKIPS=$AIRIG_STRICT_SKIPS $*" >>"$CALLS"'
    stand_in(venv / "bin" / "python3", f'{log}; exit "${{FAKE_RC:-0}}"')
    return tmp_path


def run(tree: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PATH": f"{tree / 'tools'}:{os.environ['PATH']}",
               "CALLS": str(tree / "calls"), **env}  # fmt: skip
    return subprocess.run(["bash", *args], cwd=tree, env=environ, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def calls(tree: Path) -> list[str]:
    log = tree / "calls"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("rc", ["0", "1", "5"])
def test_the_test_phase_runs_tests_unit_in_the_lower_venv_and_passes_on_its_status(tree, rc):
    (tree / ".ci" / ".venv" / "lower" / "installed").touch()
    done = run(tree, ".ci/lower-bounds", "--test", FAKE_RC=rc)
    assert done.returncode == int(rc), done.stdout + done.stderr
    assert calls(tree) == ["AIRIG_STRICT_SKIPS=1 -m pytest -p no:cacheprovider tests/unit"]


def test_the_test_phase_without_a_complete_venv_says_so_and_runs_nothing(tree):
    # a venv whose install stopped half-way has python3 but no `installed` mark
    done = run(tree, ".ci/lower-bounds", "--test")
    assert done.returncode == 1
    assert "error: no complete venv" in done.stdout and "fix: bash .ci/lower-bounds" in done.stdout
    assert calls(tree) == []


@pytest.mark.parametrize("option", ["--tests", "-t", "--install --test", "; rm -rf /", ""])
def test_an_unknown_option_is_one_line_and_a_fix(tree, option):
    if option == "":  # an empty argument is not "no argument"
        done = run(tree, ".ci/lower-bounds", "")
    else:
        done = run(tree, ".ci/lower-bounds", *option.split(" ", 1))
    assert done.returncode == 2
    assert done.stdout.startswith("error: unknown option") and done.stdout.count("\n") == 1
    assert calls(tree) == []


def run_tail(tree: Path, main_rc: int, install_rc: int, lower_rc: int):
    """`.ci/run` from its pytest step on, with python3 exiting `main_rc`, a background
    install exiting `install_rc` and `.ci/lower-bounds --test` exiting `lower_rc`."""
    script = (ROOT / ".ci" / "run").read_text()
    tail = script[script.index('step "Tests: python -m pytest"') :]
    stand_in(tree / "tools" / "python3", f'echo "python3 $*" >>"$CALLS"; exit {main_rc}')
    stand_in(tree / ".ci" / "lower-bounds", f'echo "lower-bounds $*" >>"$CALLS"; exit {lower_rc}')
    harness = (
        "set -euo pipefail\n"
        "step() { printf '\\n== %s\\n' \"$*\"; }\n"
        f'lower_log="$(mktemp)"; echo "install log" >"$lower_log"\n'
        f"(exit {install_rc}) & lower_pid=$!\n"
    )
    (tree / "tail.sh").write_text(harness + tail)
    return run(tree, "tail.sh")


@pytest.mark.parametrize(
    ("main_rc", "install_rc", "lower_rc", "expected"),
    [(0, 0, 0, 0), (0, 0, 1, 1), (0, 0, 5, 5), (1, 0, 0, 1), (1, 0, 5, 1), (0, 1, 0, 1)],
)
def test_ci_fails_when_the_lower_bounds_fail(tree, main_rc, install_rc, lower_rc, expected):
    done = run_tail(tree, main_rc, install_rc, lower_rc)
    assert done.returncode == expected, done.stdout + done.stderr
    ran = calls(tree)
    assert ran[0] == "python3 -m pytest -p no:cacheprovider"  # the newest releases first
    if install_rc == 0:
        assert ran[1:] == ["lower-bounds --test"]  # then tests/unit at the lower bounds
    else:
        assert ran[1:] == [] and "the lower bounds' venv was not made" in done.stdout
    assert "install log" in done.stdout  # what the background install printed is shown
    if lower_rc or install_rc:
        assert "error: the lower bounds failed" in done.stdout
    if main_rc:
        assert "error: python -m pytest failed" in done.stdout
