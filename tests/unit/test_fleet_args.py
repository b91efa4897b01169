"""benchmarks/fleet.py's arguments for several brains (issue 38): what cannot run is
refused in one line before anything starts (no cluster, no brain); what can run passes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "fleet.py"


@pytest.fixture(scope="module")
def fleet():
    spec = importlib.util.spec_from_file_location("fleet_bench", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["fleet_bench"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def refused(fleet, monkeypatch, capsys):
    """Runs main with these arguments, expecting a refusal: its one error line."""

    def started(*args, **kwargs):
        raise AssertionError("a refused run started something")

    monkeypatch.setattr(fleet, "measure", started)
    monkeypatch.setattr(fleet, "compare", started)

    def run(*argv: str) -> str:
        with pytest.raises(SystemExit) as exit_:
            fleet.main(list(argv))
        assert exit_.value.code == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
        assert len(errors) == 1, errors
        assert "Traceback" not in errors[0]
        return errors[0]

    return run


def test_two_brains_on_sqlite_are_refused(refused):
    line = refused("--brains", "2")
    assert "--brains above 1 needs --store postgres" in line
    assert "needs --store postgres" in refused("--store", "sqlite", "--brains", "3")


def test_a_kill_without_postgres_or_without_a_second_brain_is_refused(refused):
    assert "--kill-brain-at needs --store postgres" in refused("--kill-brain-at", "20")
    one_brain = refused("--store", "postgres", "--kill-brain-at", "20")
    assert "--brains 2 or more" in one_brain


def test_a_kill_outside_the_step_is_refused(refused):
    late = refused("--store", "postgres", "--brains", "2", "--step-s", "40",
                   "--kill-brain-at", "40")  # fmt: skip
    assert "below --step-s (40 s)" in late
    assert "--kill-brain-at: 0 to" in refused(
        "--store", "postgres", "--brains", "2", "--kill-brain-at", "-1"
    )


def test_hostile_sizes_are_one_line_not_a_traceback(refused):
    assert "--workers: 1 to 1000 each" in refused("--workers", "100,1000000000000")
    assert "--workers: 1 to" in refused("--workers", "0")
    assert "comma-separated list of numbers" in refused("--workers", "500,abc")
    assert "--brains: 1 or more" in refused("--store", "postgres", "--brains", "0")
    assert "--tail measures the SQLite brain" in refused("--tail", "--store", "postgres")


def test_what_can_run_is_not_refused(fleet):
    def args(*argv: str):
        parsed = fleet.argparse.Namespace(
            store="sqlite", brains=1, kill_brain_at=None, compare=False, tail=False,
            step_s=40.0, compare_at=500,
        )  # fmt: skip
        for key, value in zip(argv[::2], argv[1::2], strict=True):
            setattr(parsed, key, value)
        return parsed

    sizes = [100, 250, 500, 750]
    assert fleet.refusal(args(), [10, 500]) is None
    assert fleet.refusal(args("store", "postgres", "brains", 2), sizes) is None
    killed = args("store", "postgres", "brains", 2, "kill_brain_at", 20.0)
    assert fleet.refusal(killed, [500]) is None
    # --compare runs SQLite, PostgreSQL/1 and PostgreSQL/2 itself: no --store needed
    assert fleet.refusal(args("compare", True, "kill_brain_at", 0.0), sizes) is None
