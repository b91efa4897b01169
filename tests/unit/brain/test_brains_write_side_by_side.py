"""Brains on one PostgreSQL store writing side by side (issue 38, ``store/pg.py``).

A worker's hot writes (claims, reports, renewals) take no store-wide lock there: each
task row they change is locked instead. So two brains claim at once and neither waits
for the other, yet no task is handed out twice, a report with a stale lease is refused
whatever the other brain did first, and a child whose two upstreams complete at once in
two brains becomes READY exactly once.
"""

from __future__ import annotations

import threading
from collections import Counter

import brain_helpers as h
import psycopg
import pytest

from airig.brain import leases
from airig.brain.scheduling.workers import WorkerView
from airig.brain.store import states
from airig.brain.store.pg import WRITE_LOCK
from airig.common.protocol import CompleteRequest, LeaseRef

VIEW = WorkerView(("cpu",), frozenset())


@pytest.fixture
def brains(tmp_path, pg_url):
    made = [h.make_brain(tmp_path / name, BRAIN_DATABASE_URL=pg_url) for name in "ab"]
    yield made
    for brain in made:
        brain.db.close()


def claim(brain, worker, now=1000.0):
    """The exchange's claim: a shared write (no store-wide lock)."""
    found = brain.write(
        lambda conn, outbox, _: leases.claim(
            conn, outbox, worker, VIEW, now, brain.settings, brain.scheduling
        ),
        shared=True,
    )
    return found[0] if found else None


def complete(brain, task, worker, lease=None, now=1001.0):
    """A completion report as the exchange applies it: fenced, shared."""
    ref = lease or LeaseRef(attempt=task["attempt"], lease_id=task["lease_id"])

    def change(conn, outbox, _):
        current = states.get_task(conn, task["id"])
        body = CompleteRequest(**ref.model_dump(), output={"text": worker})
        return leases.complete(conn, outbox, current, worker, body, now, brain.settings)

    return brain.write(change, shared=True)


def completed_events(brain, plan_id):
    with brain.db.read() as conn:
        rows = conn.execute(
            "SELECT task_id FROM events WHERE plan_id = ? AND event_type = 'task_completed'",
            (plan_id,),
        ).fetchall()
    return Counter(row[0] for row in rows)


def test_claims_run_while_another_brain_holds_the_store_wide_lock(brains, pg_cluster, pg_url):
    """The old store took the write lock in every transaction: this claim would wait."""
    a, _ = brains
    h.submit(a, [h.noop("t")])
    name = pg_url.split("@/", 1)[1].split("?", 1)[0]
    lock = psycopg.connect(pg_cluster.dsn(name), autocommit=True)
    got: list = []
    try:
        lock.execute("BEGIN")
        lock.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        worker = threading.Thread(target=lambda: got.append(claim(a, "w1")), daemon=True)
        worker.start()
        worker.join(timeout=30)
        claimed_while_held = not worker.is_alive()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    worker.join(timeout=30)
    assert claimed_while_held, "a claim waited for the store-wide write lock"
    assert got and got[0]["state"] == "LEASED"


def test_many_claims_from_two_brains_hand_each_task_out_once(brains):
    a, b = brains
    plan = h.submit(a, [h.noop(f"t{n}") for n in range(120)])
    handed: list[tuple[int, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(brain, worker):
        try:
            while (task := claim(brain, worker)) is not None:
                with lock:
                    handed.append((task["id"], worker))
                complete(brain, task, worker)
        except BaseException as exc:  # noqa: BLE001 - the test's failure, below
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=(brain, f"{name}{n}"))
        for name, brain in (("a", a), ("b", b))
        for n in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors[:3]
    ids = [task_id for task_id, _ in handed]
    assert len(ids) == 120 and len(set(ids)) == 120, Counter(ids).most_common(3)
    assert set(h.state_of(a, plan).values()) == {"SUCCEEDED"}
    done = completed_events(a, plan)
    assert len(done) == 120 and set(done.values()) == {1}
    assert {worker[0] for _, worker in handed} == {"a", "b"}  # both brains claimed


def test_a_completion_with_a_stale_lease_is_refused_after_the_other_brain_expired_it(brains):
    a, b = brains
    plan = h.submit(a, [h.noop("t")])
    task = claim(a, "w1")
    old = LeaseRef(attempt=task["attempt"], lease_id=task["lease_id"])
    # brain b's reaper expires the lease; brain a then hears the completion
    b.write(lambda conn, outbox, now: states.retry_or_fail(
        conn, outbox, states.get_task(conn, task["id"]), now, b.retry, "infra",
        "lease_expired", "test"))  # fmt: skip
    with pytest.raises(leases.StaleLease):
        complete(a, task, "w1", lease=old)
    assert h.state_of(a, plan) == {"t": "RETRY_WAIT"}


def test_siblings_completing_at_once_in_two_brains_make_their_child_ready_once(brains):
    a, b = brains
    for _ in range(10):
        plan = h.submit(a, [h.noop("x"), h.noop("y"), h.noop("child", deps=["x", "y"])])
        first, second = claim(a, "wa"), claim(b, "wb")
        assert {first["key"], second["key"]} == {"x", "y"}
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def finish(brain, task, worker, start=start, errors=errors):
            try:
                start.wait()
                complete(brain, task, worker)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        pair = [
            threading.Thread(target=finish, args=(a, first, "wa")),
            threading.Thread(target=finish, args=(b, second, "wb")),
        ]
        for thread in pair:
            thread.start()
        for thread in pair:
            thread.join(timeout=60)
        assert not errors, errors
        assert h.state_of(a, plan)["child"] == "READY"
        with a.db.read() as conn:
            ready = conn.execute(
                """SELECT count(*) FROM events e JOIN tasks t ON t.id = e.task_id
                   WHERE t.plan_id = ? AND t.key = 'child' AND e.event_type = 'task_ready'""",
                (plan,),
            ).fetchone()[0]
        assert ready == 1
        child = claim(a, "wa")
        assert child is not None and child["key"] == "child"
        complete(a, child, "wa")
