"""`.ci/run` fails when tests/unit fails at the lower bounds (.ci/lower-bounds), not only
when the newest releases fail, so a range in pyproject.toml that stops being true fails CI;
and it fails when any job it ran in the background failed (test images, lint, lower
bounds), showing what each printed, and stops them all when it exits early.

The scripts run here for real, in a copy of the tree's `.ci/` with stand-ins for what they
call (the venv's python3, the media tools, the background jobs): nothing is installed and
no test suite runs. `.ci/run` is run from its last step ("Tests: python -m pytest") on,
the part that decides its exit status, with its own job functions."""

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


def run_tail(tree: Path, main_rc: int, images_rc: int, lint_rc: int, lower_rc: int):
    """`.ci/run` from its pytest step on, with its real background-job functions: python3
    exits `main_rc`, and the jobs started before it (debootstrap, images, lint, lower
    bounds) print a line and exit with theirs."""
    script = (ROOT / ".ci" / "run").read_text()
    jobs = script[script.index("declare -A job_pid") : script.index("trap stop_jobs EXIT")]
    tail = script[script.index('step "Tests: python -m pytest"') :]
    stand_in(tree / "tools" / "python3", f'echo "python3 $*" >>"$CALLS"; exit {main_rc}')
    stand_in(tree / ".ci" / "lower-bounds", 'echo "lower-bounds $*" >>"$CALLS"; exit 4')
    started = "".join(
        f'bg {name} \'echo "{name} log"; sleep 0.2; exit {rc}\'\n'
        for name, rc in [("debootstrap", 0), ("images", images_rc), ("lint", lint_rc),
                         ("lower", lower_rc)]
    )  # fmt: skip
    harness = "set -euo pipefail\nstep() { printf '\\n== %s\\n' \"$*\"; }\n"
    (tree / "tail.sh").write_text(harness + jobs + "trap stop_jobs EXIT\n" + started + tail)
    return run(tree, "tail.sh")


@pytest.mark.parametrize(
    ("main_rc", "images_rc", "lint_rc", "lower_rc", "expected"),
    [
        (0, 0, 0, 0, 4), (0, 0, 0, 1, 1), (1, 0, 0, 0, 1), (1, 0, 0, 5, 1),
        (0, 0, 1, 0, 1), (0, 2, 0, 0, 2), (5, 1, 1, 1, 5), (0, 0, 3, 4, 3),
    ],
)  # fmt: skip
def test_ci_fails_when_a_background_job_fails(tree, main_rc, images_rc, lint_rc, lower_rc,
                                              expected):  # fmt: skip
    done = run_tail(tree, main_rc, images_rc, lint_rc, lower_rc)
    assert done.returncode == expected, done.stdout + done.stderr
    ran = calls(tree)
    assert ran[0] == "python3 -m pytest -p no:cacheprovider"  # the newest releases first
    # the lower bounds' tests (a stand-in that fails) run once their venv was made, then
    # the brain's tests on PostgreSQL (the python3 stand-in: main_rc again)
    on_pg = "python3 -m pytest -p no:cacheprovider -q tests/unit/brain"
    assert ran[1:] == ([] if lower_rc else ["lower-bounds --test"]) + [on_pg]
    assert ("error: the brain's tests on PostgreSQL failed" in done.stdout) == bool(main_rc)
    for name in ("debootstrap", "images", "lint", "lower"):
        assert f"{name} log" in done.stdout  # what each background job printed is shown
    assert ("error: python -m pytest failed" in done.stdout) == bool(main_rc)
    assert ("error: building the test images failed" in done.stdout) == bool(images_rc)
    assert ("error: mypy or ruff failed" in done.stdout) == bool(lint_rc)
    assert ("the lower bounds' venv was not made" in done.stdout) == bool(lower_rc)
    assert "error: the lower bounds failed" in done.stdout  # the --test stand-in exits 4


def test_an_early_exit_stops_the_background_jobs(tree):
    """The run fails before pytest (a pip install that fails, say): no job it started goes on
    building images or running tests after it, each in its own process group."""
    script = (ROOT / ".ci" / "run").read_text()
    jobs = script[script.index("declare -A job_pid") : script.index("trap stop_jobs EXIT")]
    marker = tree / "survived"
    harness = (
        "set -euo pipefail\n" + jobs + "trap stop_jobs EXIT\n"
        f"bg slow 'sleep 3; touch {marker}'\n"
        f"bg nested 'bash -c \"sleep 3; touch {marker}\"'\n"
        "sleep 0.5; false\n"
    )
    (tree / "early.sh").write_text(harness)
    done = run(tree, "early.sh")
    assert done.returncode == 1
    import time

    time.sleep(4)
    assert not marker.exists()
