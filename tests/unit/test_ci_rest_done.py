"""`AIRIG_CI_REST_DONE=<file>` (.ci/run): the run's controller touches the file once every
test outside tests/e2e/ has finished, never before, so the repeated passes waiting for it
(the lower bounds, the store on PostgreSQL) start while the lanes' kits still run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = "AIRIG_REST_DONE_PROBE"


def test_the_file_is_not_there_while_a_test_outside_e2e_runs() -> None:
    # the child run below runs this with PROBE set: its file must not exist yet
    # (in the suite itself, PROBE is unset and this checks nothing more)
    if os.environ.get(PROBE):
        assert not Path(os.environ["AIRIG_CI_REST_DONE"]).exists()
        Path(os.environ[PROBE]).write_text("ran")


def test_a_parallel_run_touches_the_file_when_its_rest_is_done(tmp_path: Path) -> None:
    done, ran = tmp_path / "rest-done", tmp_path / "probe-ran"
    env = {**os.environ, "AIRIG_CI_REST_DONE": str(done), PROBE: str(ran)}
    env.pop("PYTEST_XDIST_WORKER", None)
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2",
         f"{Path(__file__).relative_to(ROOT)}::test_the_file_is_not_there_while_a_test_outside_e2e_runs",
         "tests/unit/test_pg_stores_mark.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert child.returncode == 0, child.stdout + child.stderr
    assert ran.read_text() == "ran"  # the probe ran, and saw no file
    assert done.exists()
