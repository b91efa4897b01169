"""The bound retention promises: 90 days of a busy rig (benchmarks/retention.py's
simulation, fewer tasks a day) on a fake clock, retention 30 days run daily. The store,
the result files and the logs stop growing once the window is full, and the plan that ran
all along keeps every row. Sizes only: how fast claims are is the benchmark's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "retention.py"
RETENTION_DAYS = 30
TASKS_PER_DAY = 36


def load_bench():
    spec = importlib.util.spec_from_file_location("retention_bench", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["retention_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_ninety_days_level_off_and_the_running_plan_keeps_every_row(tmp_path):
    bench = load_bench()
    rows, before, after = bench.simulate(
        tmp_path, days=90, tasks_per_day=TASKS_PER_DAY, retention_days=RETENTION_DAYS,
        log_max_mb=0.25, log_keep=50, sync_full=False, scale=0.3,
    )  # fmt: skip
    by_day = {row.day: row for row in rows}
    early, full, last = by_day[5], by_day[RETENTION_DAYS + 5], by_day[90]

    def parts(row):
        return {
            "database": row.db_mb + row.wal_mb,
            "results": row.results_mb,
            "logs": row.events_log_mb + row.training_log_mb,
        }

    # It did grow while the window filled (so leveling off below is not a flat line)...
    assert all(parts(full)[k] > 2 * parts(early)[k] for k in ("results", "logs"))
    assert full.tasks > 4 * early.tasks
    # ...and stopped once it was full.
    for name, size in parts(last).items():
        assert size <= 1.3 * parts(full)[name], (name, size, parts(full)[name])
    assert last.tasks <= (RETENTION_DAYS + 2) * TASKS_PER_DAY
    assert all(row.pruned_plans > 0 for row in rows[RETENTION_DAYS + 1 :])
    # The plan running since day 1 (created 90 days ago) lost nothing.
    assert after["plan"] and after["tasks"] == before["tasks"] and after["deps"] == 1
    assert after["events"] == before["events"] > 0
    assert [t["state"] for t in after["tasks"]] == ["RUNNING", "PENDING"]
