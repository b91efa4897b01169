"""Group commit (airig/brain/store/groupcommit.py): writes that share a commit still behave as
if each had its own transaction."""

from __future__ import annotations

import threading

import pytest

from airig.brain.store.groupcommit import GroupCommit, Pending
from airig.brain.store.unwritable import StoreUnwritable
from tests.unit.brain_helpers import make_brain


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
    brain.write(lambda conn, o, t: conn.execute("INSERT INTO kv VALUES ('beat', 1)"), False)
    assert _rows(brain) == {"beat": 1}
    with brain.db.read() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL again


def _fill(brain) -> None:
    """SQLITE_FULL for any write that needs a new page, as on a full disk: SQLite rolls
    the whole transaction back itself."""
    with brain.db.writer() as conn:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")


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
    brain = make_brain(tmp_path)
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


def test_a_non_durable_write_on_a_full_store_leaves_no_transaction_open(tmp_path):
    brain = make_brain(tmp_path)
    _kv(brain)
    _fill(brain)
    with pytest.raises(StoreUnwritable) as failed:  # 507, with the fix (store/unwritable.py)
        brain.write(
            lambda c, o, t: c.execute("INSERT INTO kv VALUES ('x', ?)", ("x" * 50_000,)), False
        )
    assert failed.value.kind == "full" and failed.value.status == 507
    with brain.db.writer() as conn:
        assert not conn.in_transaction
        conn.execute("PRAGMA max_page_count = 1073741823")
    brain.write(lambda conn, o, t: conn.execute("INSERT INTO kv VALUES ('beat', 1)"), False)
    assert _rows(brain) == {"beat": 1}
