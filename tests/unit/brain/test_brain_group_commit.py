"""Group commit (airig/brain/store/groupcommit.py): writes that share a commit still behave as
if each had its own transaction."""

from __future__ import annotations

import threading

import pytest

from airig.brain.store import dialect
from airig.brain.store.groupcommit import GroupCommit, Pending
from airig.brain.store.unwritable import StoreUnwritable
from tests.unit.brain_helpers import make_brain

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store


def _kv(brain) -> None:
    with brain.db.tx() as conn:
        conn.execute("CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER NOT NULL)")


def _rows(brain) -> dict[str, int]:
    with brain.db.read() as conn:
        return {r["k"]: r["v"] for r in conn.execute("SELECT k, v FROM kv")}


def test_a_failing_write_in_a_batch_is_rolled_back_alone(tmp_path):
    brain = make_brain(tmp_path)
    _kv(brain)
    published = []
    group = GroupCommit(brain.db, published.append)

    def put(key: str, fail: bool = False):
        def change(conn, outbox, now):
            conn.execute("INSERT INTO kv VALUES (?, 1)", (key,))
            outbox.events.append(key)
            if fail:
                raise ValueError(f"{key} refused")
            return key

        return Pending(change)

    batch = [put("a"), put("b", fail=True), put("c")]
    group._commit(batch)  # one transaction, as a leader runs a queued batch

    assert _rows(brain) == {"a": 1, "c": 1}  # b's insert undone, a's and c's kept
    assert [p.result for p in batch] == ["a", None, "c"]
    assert isinstance(batch[1].error, ValueError)
    assert all(p.done for p in batch)
    assert [o.events for o in published] == [["a"], ["c"]]  # a failed write publishes nothing


def test_concurrent_writes_all_commit_and_each_caller_gets_its_own_answer(tmp_path):
    brain = make_brain(tmp_path)
    _kv(brain)
    answers: dict[int, object] = {}

    def writer(n: int) -> None:
        def change(conn, outbox, now):
            conn.execute("INSERT INTO kv VALUES (?, ?)", (f"k{n}", n))
            conn.execute("UPDATE kv SET v = v + 1 WHERE k = 'total'")
            if n % 7 == 0:
                raise KeyError(n)
            return n * 10

        try:
            answers[n] = brain.write(change)
        except KeyError as exc:
            answers[n] = exc

    with brain.db.tx() as conn:
        conn.execute("INSERT INTO kv VALUES ('total', 0)")
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(1, 61)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    rows = _rows(brain)
    kept = [n for n in range(1, 61) if n % 7]
    assert rows.pop("total") == len(kept)  # the failed writes' updates were undone too
    assert rows == {f"k{n}": n for n in kept}
    for n in range(1, 61):
        assert isinstance(answers[n], KeyError) if n % 7 == 0 else answers[n] == n * 10, n


def test_a_write_inside_a_write_is_refused_not_a_deadlock(tmp_path):
    brain = make_brain(tmp_path)

    def outer(conn, outbox, now):
        return brain.write(lambda c, o, t: 1)

    with pytest.raises(RuntimeError, match="inside another write"):
        brain.write(outer)
    assert brain.write(lambda c, o, t: 2) == 2  # the group is free again


def test_a_non_durable_write_commits_and_leaves_the_store_durable(tmp_path):
    brain = make_brain(tmp_path)
    _kv(brain)
    pg = dialect.is_pg(brain.db)
    if pg:  # the test cluster runs with it off (tests/pg_cluster.py): a server's default
        with brain.db.writer() as conn:
            conn.execute("SET synchronous_commit = on")
    brain.write(lambda conn, o, t: conn.execute("INSERT INTO kv VALUES ('beat', 1)"), False)
    assert _rows(brain) == {"beat": 1}
    if pg:  # SET LOCAL synchronous_commit = off ended with its commit
        with brain.db.writer() as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        return
    with brain.db.read() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL again


def _fill(brain, over: int = 0) -> None:
    """SQLITE_FULL for any write that needs a new page, as on a full disk: SQLite rolls
    the whole transaction back itself. On PostgreSQL the server's disk_full (53100) for
    every row of kv whose v is over ``over``: the statement fails, not the transaction."""
    with brain.db.writer() as conn:
        if dialect.is_pg(conn):
            conn.execute(f"""CREATE FUNCTION kv_full() RETURNS trigger AS $$
                BEGIN IF NEW.v > {int(over)} THEN RAISE EXCEPTION 'No space left on device'
                USING ERRCODE = 'disk_full'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql""")
            conn.execute("CREATE TRIGGER kv_full BEFORE INSERT ON kv FOR EACH ROW"
                         " EXECUTE FUNCTION kv_full()")  # fmt: skip
            return
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")


def _room(brain) -> None:
    with brain.db.writer() as conn:
        if dialect.is_pg(conn):
            conn.execute("DROP TRIGGER kv_full ON kv")
        else:
            conn.execute("PRAGMA max_page_count = 1073741823")


def test_a_write_that_committed_is_answered_even_if_publishing_it_fails(tmp_path):
    brain = make_brain(tmp_path)
    _kv(brain)

    def broken(outbox):
        raise OSError(28, "No space left on device")

    group = GroupCommit(brain.db, broken)

    def put(key: str):
        return Pending(lambda conn, outbox, now: conn.execute(
            "INSERT INTO kv VALUES (?, 1)", (key,)).rowcount)  # fmt: skip

    batch = [put("a"), put("b")]
    group._commit(batch)
    # Both committed, so both are answered as committed: a 500 here made clients retry.
    assert [(p.result, p.error, p.done) for p in batch] == [(1, None, True), (1, None, True)]
    assert _rows(brain) == {"a": 1, "b": 1}


def test_a_full_store_fails_the_whole_batch_with_sqlite_full_and_recovers(tmp_path):
    # SQLite's store whatever AIRIG_TEST_STORE says: SQLite rolls the whole transaction
    # back on SQLITE_FULL; PostgreSQL fails the statement (the next test)
    brain = make_brain(tmp_path, BRAIN_DATABASE_URL="")
    _kv(brain)
    _fill(brain)
    group = GroupCommit(brain.db, lambda outbox: None)
    big = "x" * 50_000

    def put(key: str, value: str):
        return Pending(lambda conn, outbox, now: conn.execute(
            "INSERT INTO kv VALUES (?, ?)", (key, value or 1)).rowcount)  # fmt: skip

    batch = [put("small", ""), put("big", big), put("after", "")]
    group._commit(batch)
    # The small write ran first, but SQLite rolled it back with the batch: every writer
    # hears why (not "cannot rollback"), and nothing was stored.
    assert [getattr(p.error, "sqlite_errorname", p.error) for p in batch] == ["SQLITE_FULL"] * 3
    assert all(p.done for p in batch)
    assert _rows(brain) == {}
    with brain.db.writer() as conn:
        assert not conn.in_transaction
        conn.execute("PRAGMA max_page_count = 1073741823")
    assert brain.write(lambda conn, o, t: conn.execute("INSERT INTO kv VALUES ('z', 1)").rowcount)
    assert _rows(brain) == {"z": 1}


def test_a_full_postgresql_store_fails_only_the_write_that_met_it(tmp_path, pg_url):
    """On a real server whatever AIRIG_TEST_STORE says: disk_full fails one statement, and
    the write's savepoint takes it back alone; the batch's others commit."""
    brain = make_brain(tmp_path, BRAIN_DATABASE_URL=pg_url)
    _kv(brain)
    _fill(brain, over=1000)
    group = GroupCommit(brain.db, lambda outbox: None)

    def put(key: str, value: int):
        return Pending(lambda conn, outbox, now: conn.execute(
            "INSERT INTO kv VALUES (?, ?)", (key, value)).rowcount)  # fmt: skip

    batch = [put("small", 1), put("big", 50_000), put("after", 2)]
    group._commit(batch)
    assert [getattr(p.error, "sqlstate", p.error) for p in batch] == [None, "53100", None]
    assert all(p.done for p in batch)
    assert _rows(brain) == {"small": 1, "after": 2}
    with brain.db.writer() as conn:
        assert not conn.in_transaction
    with pytest.raises(StoreUnwritable) as failed:  # 507 through the brain's write
        brain.write(lambda conn, o, t: conn.execute("INSERT INTO kv VALUES ('z', 5000)"))
    assert failed.value.kind == "full" and failed.value.status == 507
    _room(brain)
    assert brain.write(
        lambda conn, o, t: conn.execute("INSERT INTO kv VALUES ('z', 5000)").rowcount
    )
    assert _rows(brain) == {"small": 1, "after": 2, "z": 5000}
    brain.db.close()


def test_a_non_durable_write_on_a_full_store_leaves_no_transaction_open(tmp_path):
    brain = make_brain(tmp_path)
    _kv(brain)
    _fill(brain)
    # an integer on PostgreSQL, whose kv.v takes no text; the page-filling text on SQLite
    value = 50_000 if dialect.is_pg(brain.db) else "x" * 50_000
    with pytest.raises(StoreUnwritable) as failed:  # 507, with the fix (store/unwritable.py)
        brain.write(lambda c, o, t: c.execute("INSERT INTO kv VALUES ('x', ?)", (value,)), False)
    assert failed.value.kind == "full" and failed.value.status == 507
    with brain.db.writer() as conn:
        assert not conn.in_transaction
    _room(brain)
    brain.write(lambda conn, o, t: conn.execute("INSERT INTO kv VALUES ('beat', 1)"), False)
    assert _rows(brain) == {"beat": 1}
