"""Plans left behind (issue 38, ``store/left_behind.py``): a brain told to use an empty
PostgreSQL store while the SQLite store on its state volume still holds plans refuses to
start, in one line naming `migrate-store` and ``AIRIG_BRAIN_START_EMPTY``; it starts when
the PostgreSQL store holds rows, when the SQLite file is absent, empty or holds no plan,
and with the knob. The PostgreSQL cases run on ``pg_cluster``'s throwaway server; the
check itself also runs against the engine ``AIRIG_TEST_STORE`` picks (``pg_stores.py``)."""

from __future__ import annotations

import io
import json
import logging
import sqlite3
from pathlib import Path

import brain_helpers as h
import pytest

from airig.brain import __main__ as brain_main
from airig.brain.store import engines, left_behind
from airig.brain.store.db import Database
from airig.brain.store.left_behind import PlansLeftBehind
from airig.common.jsonlog import JsonFormatter

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

MIGRATE = "python start_services.py migrate-store"


def sqlite_store(tmp: Path, plans: int) -> Path:
    """The SQLite store of a kit that ran on SQLite, with ``plans`` plans in it."""
    brain = h.make_brain(tmp / "old", BRAIN_DATABASE_URL="")
    try:
        for n in range(plans):
            h.submit(brain, [h.noop(f"t{n}")], now=1000.0 + n)
    finally:
        brain.stop()
    path = tmp / "old" / "state" / "brain.db"
    assert left_behind.sqlite_plans(path) == plans
    return path


def refusal(call) -> str:
    with pytest.raises(PlansLeftBehind) as refused:
        call()
    line = str(refused.value)
    assert "\n" not in line and MIGRATE in refused.value.hint
    assert "AIRIG_BRAIN_START_EMPTY=1" in refused.value.hint
    return line


# ------------------------------------------------------------------ on a real PostgreSQL
def test_an_empty_postgres_store_beside_sqlite_plans_is_refused(tmp_path, pg_url):
    old = sqlite_store(tmp_path, plans=2)
    line = refusal(lambda: engines.open_store(old, pg_url))
    assert "holds 2 plans" in line and str(old) in line
    assert "secret" not in line.lower() or "****" in line  # the URL is the masked one
    # nothing was written: the next start is refused the same way, and the file is as it was
    refusal(lambda: engines.open_store(old, pg_url))
    assert left_behind.sqlite_plans(old) == 2
    # the brain as the container starts it: the same refusal, before it serves
    refusal(lambda: h.make_brain(tmp_path / "new", BRAIN_DB=str(old), BRAIN_DATABASE_URL=pg_url))


def test_the_knob_starts_empty_once_and_a_served_store_needs_it_no_more(tmp_path, pg_url):
    old = sqlite_store(tmp_path, plans=1)
    brain = h.make_brain(tmp_path / "new", BRAIN_DB=str(old), BRAIN_DATABASE_URL=pg_url,
                         AIRIG_BRAIN_START_EMPTY="1")  # fmt: skip
    try:
        h.submit(brain, [h.noop("a")])  # the store now holds rows
    finally:
        brain.stop()
    engines.open_store(old, pg_url).close()  # no knob: a store that holds rows starts


def test_a_postgres_store_with_rows_but_no_plan_starts(tmp_path, pg_url):
    """Retention may delete every finished plan of a quiet month: the store a brain served
    still holds its other rows, and is not taken for a forgotten migrate-store."""
    old = sqlite_store(tmp_path, plans=1)
    brain = h.make_brain(tmp_path / "new", BRAIN_DB=str(old), BRAIN_DATABASE_URL=pg_url,
                         AIRIG_BRAIN_START_EMPTY="1")  # fmt: skip
    try:
        plan = h.submit(brain, [h.noop("a")])
        brain.write(lambda conn, outbox, _: (
            conn.execute("DELETE FROM tasks WHERE plan_id = ?", (plan,)),
            conn.execute("DELETE FROM plans WHERE id = ?", (plan,)),
        ))  # fmt: skip
    finally:
        brain.stop()
    engines.open_store(old, pg_url).close()


@pytest.mark.parametrize("old", ["absent", "zero bytes", "no plan", "not a brain's store"])
def test_no_sqlite_plans_no_refusal(tmp_path, pg_url, old):
    path = tmp_path / "state" / "brain.db"
    path.parent.mkdir()
    if old == "zero bytes":
        path.write_bytes(b"")
    elif old == "no plan":
        path = sqlite_store(tmp_path, plans=0)
    elif old == "not a brain's store":
        sqlite3.connect(path).execute("CREATE TABLE other (x)").connection.commit()
    engines.open_store(path, pg_url).close()


@pytest.mark.parametrize(
    "damage",
    [
        b"this is not a database at all" * 10,
        b"SQLite format 3\x00" + b"\xff" * 4000,  # the header, then garbage
    ],
)
def test_a_sqlite_file_that_cannot_be_read_is_refused_too(tmp_path, pg_url, damage):
    """It may hold plans: only the person can say, so the line says what to do either way."""
    path = tmp_path / "brain.db"
    path.write_bytes(damage)
    line = refusal(lambda: engines.open_store(path, pg_url))
    assert "cannot be read" in line and "it may hold plans" in line
    engines.open_store(path, pg_url, start_empty=True).close()


def test_a_truncated_sqlite_store_is_refused(tmp_path, pg_url):
    old = sqlite_store(tmp_path, plans=3)
    data = old.read_bytes()
    old.write_bytes(data[: len(data) // 3])
    refusal(lambda: engines.open_store(old, pg_url))


# ------------------------------------------------------------------ either engine
def test_the_check_on_the_engine_under_test(tmp_path):
    """Against whichever engine AIRIG_TEST_STORE picks: an empty store beside plans is
    refused, one that holds a plan is not."""
    old = sqlite_store(tmp_path, plans=1)
    brain = h.make_brain(tmp_path / "new")  # its own BRAIN_DB: absent, so it starts
    try:
        line = refusal(lambda: left_behind.check(brain.db, old, start_empty=False))
        assert "holds 1 plan " in line + " "
        left_behind.check(brain.db, old, start_empty=True)
        h.submit(brain, [h.noop("a")])
        left_behind.check(brain.db, old, start_empty=False)
    finally:
        brain.stop()


def test_a_sqlite_store_is_read_without_being_written(tmp_path):
    old = sqlite_store(tmp_path, plans=2)
    before = (old.read_bytes(), sorted(p.name for p in old.parent.iterdir()))
    assert left_behind.sqlite_plans(old) == 2
    assert (old.read_bytes(), sorted(p.name for p in old.parent.iterdir())) == before


def test_the_refusal_is_the_brain_s_one_log_line(tmp_path, monkeypatch):
    """What the container prints (and `up` shows from its last log lines): one JSON line
    with the message and the hint, exit 2, no traceback. The brain's JSON formatter on a
    handler of the test's own: setup_json_logging would rewire the process's logging."""
    old = sqlite_store(tmp_path, plans=4)
    empty = Database(tmp_path / "empty.db")

    def refused(settings):
        left_behind.check(empty, old, start_empty=False)

    monkeypatch.setattr(brain_main, "serve", refused)
    monkeypatch.setattr(brain_main, "setup_json_logging", lambda: None)
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", "admin-secret-token")
    monkeypatch.setenv("WORKER_BOOTSTRAP_TOKEN", "bootstrap-secret-token")
    printed = io.StringIO()
    handler = logging.StreamHandler(printed)
    handler.setFormatter(JsonFormatter())
    brain_main.log.addHandler(handler)
    try:
        assert brain_main.main([]) == 2
    finally:
        brain_main.log.removeHandler(handler)
        empty.close()
    (line,) = printed.getvalue().splitlines()
    assert "Traceback" not in line
    logged = json.loads(line)
    assert "holds 4 plans" in logged["message"] and MIGRATE in logged["hint"]
