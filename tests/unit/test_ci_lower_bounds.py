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


def run_tail(tree: Path, main_rc: int, images_rc: int, lint_rc: int, lower_rc: int,
             pg_rc: int):  # fmt: skip
    """`.ci/run` from its pytest step on, with its real background-job functions: python3
    exits `main_rc`, and the jobs started before it (the early images, images, lint, and the two
    repeated passes, which wait for pytest's rest as the real ones do) print a line and
    exit with theirs."""
    script = (ROOT / ".ci" / "run").read_text()
    jobs = script[script.index("declare -A job_pid") : script.index("trap stop_jobs EXIT")]
    tail = script[script.index('step "Tests: python -m pytest"') :]
    stand_in(tree / "tools" / "python3", f'echo "python3 $*" >>"$CALLS"; exit {main_rc}')
    rest_done = tree / "rest-done"
    started = ""
    for name, rc in [("early", 0), ("images", images_rc), ("lint", lint_rc),
                     ("lower", lower_rc), ("pg", pg_rc)]:  # fmt: skip
        body = f'echo "{name} log"; sleep 0.2; exit {rc}'
        if name in ("lower", "pg"):
            # as the real passes: nothing before the file; a lost touch gives up after
            # 10 s with 99, and fails the test
            body = (
                f"for _ in $(seq 100); do [ -e {rest_done} ] && break; sleep 0.1; done\n"
                f"[ -e {rest_done} ] || exit 99\n"
                f'echo "{name} after the rest" >>"$CALLS"\n{body}'
            )
        stand_in(tree / "jobs" / name, body)
        started += f"bg {name} {tree / 'jobs' / name}\n"
    harness = "set -euo pipefail\nstep() { printf '\\n== %s\\n' \"$*\"; }\n"
    harness += f"rest_done={rest_done}\n"
    (tree / "tail.sh").write_text(harness + jobs + "trap stop_jobs EXIT\n" + started + tail)
    return run(tree, "tail.sh")


@pytest.mark.parametrize(
    ("main_rc", "images_rc", "lint_rc", "lower_rc", "pg_rc", "expected"),
    [
        (0, 0, 0, 0, 0, 0), (0, 0, 0, 4, 0, 4), (0, 0, 0, 0, 1, 1), (1, 0, 0, 0, 0, 1),
        (1, 0, 0, 5, 0, 1), (0, 0, 1, 0, 0, 1), (0, 2, 0, 0, 0, 2), (5, 1, 1, 1, 1, 5),
        (0, 0, 3, 4, 6, 3),
    ],
)  # fmt: skip
def test_ci_fails_when_a_background_job_fails(tree, main_rc, images_rc, lint_rc, lower_rc,
                                              pg_rc, expected):  # fmt: skip
    done = run_tail(tree, main_rc, images_rc, lint_rc, lower_rc, pg_rc)
    assert done.returncode == expected, done.stdout + done.stderr
    ran = calls(tree)
    assert ran[0] == "python3 -m pytest -p no:cacheprovider"  # the newest releases
    # pytest's end touches the file the repeated passes wait for, however it ended
    assert sorted(ran[1:]) == ["lower after the rest", "pg after the rest"]
    assert not (tree / "rest-done").exists()  # removed once the passes are done
    for name in ("early", "images", "lint", "lower", "pg"):
        assert f"{name} log" in done.stdout  # what each background job printed is shown
    assert ("error: python -m pytest failed" in done.stdout) == bool(main_rc)
    assert ("error: building the test images failed" in done.stdout) == bool(images_rc)
    assert ("error: mypy or ruff failed" in done.stdout) == bool(lint_rc)
    assert ("error: the lower bounds failed" in done.stdout) == bool(lower_rc)
    assert ("error: the brain's tests on PostgreSQL failed" in done.stdout) == bool(pg_rc)


def test_the_repeated_passes_wait_for_pytests_rest_then_run_niced(tree):
    """The real commands .ci/run starts for the lower bounds and the store on PostgreSQL:
    the venv is made at once, no test runs before the file pytest's rest touches exists,
    then both passes run, below the kits' priority, the PostgreSQL one on the marked tests."""
    script = (ROOT / ".ci" / "run").read_text()
    jobs = script[script.index("declare -A job_pid") : script.index("trap stop_jobs EXIT")]
    block = script[script.index('rest_done="$(mktemp') : script.index('step "Tests: python')]
    log = 'echo "$(basename "$0") $* [nice=$(nice)] [store=${AIRIG_TEST_STORE-}]" >>"$CALLS"'
    stand_in(tree / "tools" / "python3", log)
    stand_in(tree / ".ci" / "lower-bounds", log)
    harness = (
        "set -euo pipefail\n" + jobs + block
        + 'echo "$rest_done" >rest-path\nsleep 1.5\necho checkpoint >>"$CALLS"\n'
        + 'touch "$rest_done"\nwait "${job_pid[lower]}" "${job_pid[pg]}"\nrm -f "$rest_done"\n'
    )  # fmt: skip
    (tree / "passes.sh").write_text(harness)
    done = run(tree, "passes.sh", machine_path=f"{tree / 'tools'}:{os.environ['PATH']}")
    assert done.returncode == 0, done.stdout + done.stderr
    ran = calls(tree)
    base = os.nice(0)  # nice adds to the niceness this test runs at, up to 19

    def niced(by: int) -> str:
        return f"[nice={min(base + by, 19)}]"

    # only the venv's install before the file; both passes after it
    assert ran[0] == f"lower-bounds --install {niced(15)} [store=]"
    assert ran[1] == "checkpoint"
    assert sorted(ran[2:]) == [
        f"lower-bounds --test {niced(10)} [store=]",
        f"python3 -m pytest -p no:cacheprovider -q -m store tests/unit/brain {niced(10)}"
        " [store=postgresql]",
    ]


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
