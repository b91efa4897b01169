"""Invariants that the type fixes rely on (casts and narrowing that mypy cannot see)."""

from __future__ import annotations

import inspect
import sqlite3
import typing

import pytest

from airig.brain.scheduling.residency import ReadyTask, ResidentModel, WorkerState, choose
from airig.brain.store import states
from airig.common.task_types import PAYLOAD_SCHEMAS
from airig.executors.base import EXECUTORS

NOW = 100_000.0


def test_each_executor_takes_the_model_its_type_schema_validates():
    """``base._executor`` casts each entry to take any payload; it is sound because
    ``run_task`` only hands it what ``PAYLOAD_SCHEMAS[task_type]`` validated."""
    assert set(EXECUTORS) == set(PAYLOAD_SCHEMAS)
    for task_type, execute in EXECUTORS.items():
        first = next(iter(inspect.signature(execute).parameters))
        assert typing.get_type_hints(execute)[first] is PAYLOAD_SCHEMAS[task_type], task_type


def test_one_unknown_resident_size_treats_the_gpu_as_exclusive():
    """Sizes known for the task, the card and one resident but not the other: evict all."""
    worker = WorkerState(
        classes=("llm",),
        resident=(ResidentModel("a", NOW - 3600, 1000), ResidentModel("b", NOW - 3600)),
        vram_total_mb=8000,
    )
    decision = choose(worker, [ReadyTask(1, "llm", 5, NOW, "c", vram_mb=500)], NOW)
    assert decision is not None
    assert (decision.load, decision.evict) == ("c", ("a", "b"))


def test_require_task_raises_lookup_error_for_a_missing_task():
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.execute("CREATE TABLE tasks (id INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO tasks (id) VALUES (7)")
    assert states.require_task(conn, 7)["id"] == 7
    with pytest.raises(LookupError, match="task 8"):
        states.require_task(conn, 8)
