"""`AIRIG_CI_REST_DONE=<file>` (.ci/run): the run's controller touches the file once every
test outside tests/e2e/ has finished, never before, so the repeated passes waiting for it
(the lower bounds, the store on PostgreSQL) start while the lanes' kits still run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from e2e_lanes import Spans

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


def test_the_lanes_spans_are_from_first_setup_to_last_teardown() -> None:
    spans = Spans()

    def report(nodeid: str, when: str, start: float, stop: float):  # noqa: ANN202
        import pytest

        return pytest.TestReport(nodeid, ("", 0, ""), {}, "passed", None, when, [],
                                 start=start, stop=stop)  # fmt: skip

    base = 1_700_000_000.0
    tests = [(0, "tests/e2e/test_kit_watch.py::t"), (600, "tests/e2e/test_kit_pull.py::t"),
             (5, "tests/unit/test_x.py::t")]  # fmt: skip
    for at, nodeid in tests:
        for offset, when in enumerate(("setup", "call", "teardown")):
            spans.note(report(nodeid, when, base + at + offset * 10, base + at + offset * 10 + 9))
    spans.note(report("tests/e2e/test_kit_watch.py::u", "call", base + 900, base + 960))
    lines = spans.lines()
    assert [line.split(":", 1)[0] for line in lines] == ["lane a", "lane b", "the rest"]
    assert lines[0].endswith("(16.0 min, 2 tests)")  # 0 to 960 s, two calls
    assert lines[1].endswith("(0.5 min, 1 tests)")  # 600 to 629 s
    assert lines[2].endswith("(0.5 min, 1 tests)")
