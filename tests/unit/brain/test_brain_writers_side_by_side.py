"""One brain's shared durable writes on several write connections at once (issue 38,
``store/pg_writers.py``, ``groupcommit.py``'s lanes); SQLite keeps its one writer.

A worker's hot writes (claims, reports) are safe beside other brains' by row locks, so on
PostgreSQL one brain runs batches of them side by side too. Each task is still handed out
once, no state move is lost, a deadlock between two batches is run again, and a write
that is not shared still runs alone.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter

import brain_helpers as h
import psycopg
import pydantic
import pytest

from airig.brain import leases
from airig.brain.scheduling.workers import WorkerView
from airig.brain.store import dialect, states
from airig.brain.store.groupcommit import MOVED_TRIES, retrying
from airig.brain.store.pg import WRITE_LOCK
from airig.common.protocol import CompleteRequest, LeaseRef

pytestmark = pytest.mark.store  # its brains run on either engine (tests/pg_stores.py)
VIEW = WorkerView(("cpu",), frozenset())
HELD_S = 1.0  # how long a write that should not wait may take before the test says it did


@pytest.fixture
def brain(tmp_path):
    # three batches at once on PostgreSQL (one is the default there): the path under test
    made = h.make_brain(tmp_path, BRAIN_PG_WRITERS=3)
    yield made
    made.db.close()


def claim(brain, worker):
    found = brain.write(
        lambda conn, outbox, _: leases.claim(
            conn, outbox, worker, VIEW, 1000.0, brain.settings, brain.scheduling
        ),
        shared=True,
    )
    return found[0] if found else None


def complete(brain, task, worker):
    ref = LeaseRef(attempt=task["attempt"], lease_id=task["lease_id"])

    def change(conn, outbox, _):
        current = states.get_task(conn, task["id"])
        body = CompleteRequest(**ref.model_dump(), output={"text": worker})
        return leases.complete(conn, outbox, current, worker, body, 1001.0, brain.settings)

    return brain.write(change, shared=True)


def counted(brain, plan_id, event_type):
    with brain.db.read() as conn:
        rows = conn.execute(
            "SELECT task_id FROM events WHERE plan_id = ? AND event_type = ?",
            (plan_id, event_type),
        ).fetchall()
    return Counter(row[0] for row in rows)


def run_workers(brain, count):
    """``count`` threads claiming and completing until the queue is empty; what each got."""
    handed: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(worker):
        try:
            while (task := claim(brain, worker)) is not None:
                with lock:
                    handed.append(task["id"])
                complete(brain, task, worker)
        except BaseException as exc:  # noqa: BLE001 - the test's failure
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors[:3]
    work("drain")  # a claim that met only heads another claim held found nothing: ended
    assert not errors, errors[:3]
    return handed


class Held:
    """A write held open inside its transaction until ``release``: the batch it leads
    keeps its connection (and, exclusive, the store-wide lock) meanwhile."""

    def __init__(self, brain, shared):
        self.entered, self.released = threading.Event(), threading.Event()
        self.errors: list[BaseException] = []

        def change(conn, outbox, now):
            conn.execute("SELECT 1").fetchone()
            self.entered.set()
            assert self.released.wait(60), "the test never released its write"

        def run():
            try:
                brain.write(change, shared=shared)
            except BaseException as exc:  # noqa: BLE001
                self.errors.append(exc)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert self.entered.wait(30)

    def release(self):
        self.released.set()
        self.thread.join(timeout=30)
        assert not self.errors, self.errors


def started(target):
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(target()), daemon=True)
    thread.start()
    return thread, done


def test_many_claims_in_one_brain_hand_each_task_out_once(brain):
    plan = h.submit(brain, [h.noop(f"t{n}") for n in range(120)])
    handed = run_workers(brain, 12)
    assert len(handed) == 120 and len(set(handed)) == 120, Counter(handed).most_common(3)
    assert set(h.state_of(brain, plan).values()) == {"SUCCEEDED"}
    done = counted(brain, plan, "task_completed")
    assert len(done) == 120 and set(done.values()) == {1}


def test_reports_and_claims_at_once_never_lose_a_state_move(brain):
    """Each child waits on two parents, whose completions run in different batches at
    once: it becomes READY once, after both, and every task ends SUCCEEDED once."""
    parents = [h.noop(f"p{n}") for n in range(30)]
    children = [h.noop(f"c{n}", deps=[f"p{n}", f"p{(n + 1) % 30}"]) for n in range(30)]
    plan = h.submit(brain, parents + children)
    handed = run_workers(brain, 10)
    assert len(handed) == 60 and len(set(handed)) == 60, Counter(handed).most_common(3)
    assert set(h.state_of(brain, plan).values()) == {"SUCCEEDED"}
    done = counted(brain, plan, "task_completed")
    assert len(done) == 60 and set(done.values()) == {1}
    ready = counted(brain, plan, "task_ready")  # the parents were READY from the submit
    assert len(ready) == 30 and set(ready.values()) == {1}


def test_a_shared_write_runs_beside_another_shared_batch_on_postgresql_only(brain):
    """The old brain had one leader: every claim waited for the batch before it."""
    h.submit(brain, [h.noop("t")])
    held = Held(brain, shared=True)
    try:
        thread, got = started(lambda: claim(brain, "w1"))
        thread.join(timeout=HELD_S if not dialect.is_pg(brain.db) else 30)
        if dialect.is_pg(brain.db):
            assert not thread.is_alive(), "a claim waited for another shared batch"
            assert got[0]["state"] == "LEASED"
        else:
            assert thread.is_alive(), "SQLite has one writer: the claim waits"
    finally:
        held.release()
    thread.join(timeout=30)
    assert got and got[0]["state"] == "LEASED"


def test_an_exclusive_write_still_runs_alone(brain):
    """While an exclusive write is open, another exclusive write of the brain waits for
    its commit (on PostgreSQL the shared ones go on meanwhile)."""
    h.submit(brain, [h.noop("t")])
    held = Held(brain, shared=False)
    order: list[str] = []
    try:
        second, _ = started(lambda: brain.write(lambda conn, outbox, now: order.append("second")))
        shared, got = started(lambda: claim(brain, "w1"))
        second.join(timeout=HELD_S)
        assert second.is_alive(), "an exclusive write ran beside another"
        shared.join(timeout=30 if dialect.is_pg(brain.db) else HELD_S)
        assert shared.is_alive() is not dialect.is_pg(brain.db)
        order.append("first")
    finally:
        held.release()
    second.join(timeout=30)
    shared.join(timeout=30)
    assert order == ["first", "second"]
    assert got and got[0]["state"] == "LEASED"


def test_an_exclusive_write_waits_for_the_store_wide_lock_and_a_shared_one_does_not(
    tmp_path, pg_cluster, pg_url
):
    """Another brain's exclusive transaction holds the lock: this brain's exclusive write
    waits for it, its shared durable writes (on their own connections) do not."""
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL=pg_url)
    h.submit(brain, [h.noop("t")])
    name = pg_url.split("@/", 1)[1].split("?", 1)[0]
    other = psycopg.connect(pg_cluster.dsn(name), autocommit=True)
    try:
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        exclusive, _ = started(lambda: brain.write(lambda conn, outbox, now: None))
        shared, got = started(lambda: claim(brain, "w1"))
        shared.join(timeout=30)
        assert not shared.is_alive() and got[0]["state"] == "LEASED"
        exclusive.join(timeout=HELD_S)
        assert exclusive.is_alive(), "an exclusive write ran beside the lock's holder"
    finally:
        other.execute("ROLLBACK")
        other.close()
    exclusive.join(timeout=30)
    assert not exclusive.is_alive()
    brain.db.close()


def test_two_batches_that_deadlock_are_run_again_and_both_commit(brain):
    """Two shared writes lock two tasks in opposite orders, each in its own batch at once
    on PostgreSQL: the server breaks the deadlock (40P01) and the loser's batch runs
    again. SQLite runs them one after the other."""
    plan = h.submit(brain, [h.noop("x"), h.noop("y")])
    ids = [h.row(brain, plan, key)["id"] for key in ("x", "y")]
    meet = threading.Barrier(2, timeout=2)
    tries: Counter[str] = Counter()

    def write(name, first, second):
        def change(conn, outbox, now):
            tries[name] += 1
            conn.execute("UPDATE tasks SET reason = ? WHERE id = ?", (name, first))
            if tries[name] == 1:
                # both hold their first row before either takes its second; one writer
                # (SQLite): the wait runs out and the other write runs after this one
                with contextlib.suppress(threading.BrokenBarrierError):
                    meet.wait()
            conn.execute("UPDATE tasks SET reason = ? WHERE id = ?", (name, second))
            return name

        return lambda: brain.write(change, shared=True)

    one, got_one = started(write("a", *ids))
    two, got_two = started(write("b", *reversed(ids)))
    for thread in (one, two):
        thread.join(timeout=60)
    assert got_one == ["a"] and got_two == ["b"]  # both committed, neither failed
    if dialect.is_pg(brain.db):
        assert sum(tries.values()) >= 3, tries  # the loser's batch ran again
    with brain.db.read() as conn:
        reasons = {row[0] for row in conn.execute(
            "SELECT reason FROM tasks WHERE id IN (?, ?)", ids)}  # fmt: skip
    assert len(reasons) == 1  # one write's both updates, the other's before or after


@pytest.mark.parametrize("durable", [True, False])
def test_a_write_whose_row_moved_runs_again_from_fresh_reads(brain, durable):
    plan = h.submit(brain, [h.noop("t")])
    task_id = h.row(brain, plan, "t")["id"]
    tries: list[int] = []

    def change(conn, outbox, now):
        tries.append(1)
        conn.execute("UPDATE tasks SET reason = ? WHERE id = ?", (f"try {len(tries)}", task_id))
        if len(tries) == 1:
            raise states.RowMoved("another write moved it first")
        return len(tries)

    assert brain.write(change, durable=durable, shared=True) == 2
    assert h.row(brain, plan, "t")["reason"] == "try 2"


@pytest.mark.parametrize("durable", [True, False])
def test_a_row_that_keeps_moving_fails_the_write_after_its_tries(brain, durable):
    plan = h.submit(brain, [h.noop("t")])
    task_id = h.row(brain, plan, "t")["id"]
    tries: list[int] = []

    def change(conn, outbox, now):
        tries.append(1)
        conn.execute("UPDATE tasks SET reason = 'moved' WHERE id = ?", (task_id,))
        raise states.RowMoved("moved again")

    with pytest.raises(states.RowMoved):
        brain.write(change, durable=durable, shared=True)
    assert len(tries) == MOVED_TRIES
    assert h.row(brain, plan, "t")["reason"] is None  # nothing of any try stands


def test_retrying_runs_again_only_what_it_is_told_and_only_so_often():
    calls: list[int] = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise TimeoutError("again")
        return "done"

    assert retrying(flaky, lambda exc: isinstance(exc, TimeoutError), 3) == "done"
    calls.clear()
    with pytest.raises(TimeoutError):
        retrying(flaky, lambda exc: isinstance(exc, TimeoutError), 2)
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(TimeoutError):
        retrying(flaky, lambda exc: False, 5)  # an error it refuses: raised at once
    assert len(calls) == 1


@pytest.mark.parametrize("value", ["0", "17", "-1", "three", ""])
def test_a_writers_count_out_of_its_range_is_refused(tmp_path, value):
    with pytest.raises(pydantic.ValidationError, match="BRAIN_PG_WRITERS"):
        h.make_settings(tmp_path, BRAIN_PG_WRITERS=value)


def test_one_writer_by_default_and_the_setting_on_postgresql_only(tmp_path, pg_url):
    assert h.make_settings(tmp_path / "a").pg_writers == 1
    on_pg = h.make_brain(tmp_path / "b", BRAIN_DATABASE_URL=pg_url, BRAIN_PG_WRITERS="2")
    try:
        assert on_pg.db.shared_writers == 2
    finally:
        on_pg.db.close()
    on_sqlite = h.make_brain(tmp_path / "c", BRAIN_DATABASE_URL="", BRAIN_PG_WRITERS="5")
    try:
        assert on_sqlite.db.shared_writers == 1  # one writer: SQLite's rule
    finally:
        on_sqlite.db.close()
