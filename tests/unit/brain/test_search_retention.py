"""The search index follows retention (issue 39 §4): the entries of the plans retention
removes go with them, in bounded batches, except those a reused task still stands on;
whatever a pass leaves (a crash at any commit point, an index that could not be written)
the next pass removes; and a file indexed again replaces its entries.
(airig/brain/store/retention.py, airig/brain/store/vectors.py.)"""

from __future__ import annotations

import logging
import math
import os
import shutil
import statistics
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import apsw
import brain_helpers as h
import pytest
import sqlite_vec
from support import NOBODY, unprivileged

from airig.brain.store import retention, vectors

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

DAY = 86_400.0
T0 = 1_000_000.0
EMBED = "nomic-embed-text"
ADMIN = vectors.Writer()  # an admin's plan (no owner recorded), a trusted rig


class Crash(BaseException):
    """The brain's process dying: nothing in retention may catch it."""


def unit(*values: float) -> list[float]:
    norm = math.hypot(*values)
    return [v / norm for v in values]


def entry(text: str, source: str = "in/a.pdf", locator: str | None = None, angle: float = 0.0):
    vector = [math.cos(angle), math.sin(angle), 0.5]
    return vectors.Entry(vector=vector, snippet=text, source=source, locator=locator)


def make_brain(tmp_path: Path):
    return h.make_brain(tmp_path, BRAIN_DATA_DIR=str(tmp_path / "data"))


def index_of(brain) -> Path:
    return vectors.index_path(brain.settings.data_dir)


def finished_plan(brain, keys: list[str], now: float) -> str:
    """A plan of noop tasks, every one SUCCEEDED at ``now``."""
    plan_id = h.submit(brain, [h.noop(k) for k in keys], now=now)
    with brain.db.tx() as conn:
        conn.execute(
            "UPDATE tasks SET state = 'SUCCEEDED', finished_at = ? WHERE plan_id = ?",
            (now, plan_id),
        )
    return plan_id


def reuse(brain, plan_id: str, key: str, origin: str) -> None:
    """Task ``key`` of ``plan_id`` reused from ``origin`` ("<plan>/<key>"), as
    plans/reuse.py stores an unchanged item: its search entries are the origin's."""
    with brain.db.tx() as conn:
        conn.execute(
            "UPDATE tasks SET reused_from = ? WHERE plan_id = ? AND key = ?",
            (origin, plan_id, key),
        )


def index(brain, plan_id: str, key: str, n: int, now: float, source: str | None = None) -> None:
    """``n`` entries of task ``key`` of ``plan_id`` in the index "docs" (created at ``now``)."""
    source = source or f"in/{plan_id}-{key}.pdf"
    entries = [entry(f"{plan_id}/{key} chunk {i}", source, f"page {i}", i / 7) for i in range(n)]
    vectors.replace_task(index_of(brain), "docs", EMBED, plan_id, key, entries, ADMIN, now)


def stored(path: Path) -> dict[str, int]:
    """Entries per plan, after checking that each entry has its vector and each vector its
    entry (what a search answers is what is stored)."""
    if not path.exists():
        return {}
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    try:
        by_plan: dict[str, int] = {}
        for index_id, name in conn.execute("SELECT id, name FROM indexes").fetchall():
            ids = {r[0] for r in conn.execute("SELECT id FROM entries WHERE index_id = ?",
                                              (index_id,))}  # fmt: skip
            vecs = {r[0] for r in conn.execute(f"SELECT rowid FROM vec_{index_id}")}
            assert ids == vecs, f"index {name}: entries and vectors differ"
            for plan_id, count in conn.execute(
                "SELECT plan_id, COUNT(*) FROM entries WHERE index_id = ? GROUP BY plan_id",
                (index_id,),
            ):
                by_plan[plan_id] = by_plan.get(plan_id, 0) + count
        return by_plan
    finally:
        conn.close()


def hits(brain, k: int = 1000) -> list[dict]:
    return vectors.nearest(index_of(brain), "docs", [1.0, 0.1, 0.5], k)


def plans_in_store(brain) -> set[str]:
    with brain.db.read() as conn:
        return {row[0] for row in conn.execute("SELECT id FROM plans")}


# ---- what a pass removes and keeps ----------------------------------------------------


def test_retention_removes_a_plans_entries_and_vectors_and_keeps_a_recent_plans(tmp_path):
    brain = make_brain(tmp_path)
    old = finished_plan(brain, ["a", "b"], T0)
    recent = finished_plan(brain, ["a"], T0 + 25 * DAY)
    index(brain, old, "a", 3, T0)
    index(brain, old, "b", 2, T0)
    index(brain, recent, "a", 4, T0 + 25 * DAY)
    assert stored(index_of(brain)) == {old: 5, recent: 4}

    dry = brain.retention.run(older_than_s=10 * DAY, dry_run=True, now=T0 + 31 * DAY)
    assert dry.index_entries == 5 and stored(index_of(brain)) == {old: 5, recent: 4}
    done = brain.retention.run(older_than_s=10 * DAY, now=T0 + 31 * DAY)

    assert (done.plans, done.index_entries, done.index_error) == (1, 5, None)
    assert stored(index_of(brain)) == {recent: 4}  # entries and their vectors went
    assert {hit["plan_id"] for hit in hits(brain)} == {recent} and len(hits(brain)) == 4
    assert vectors.indexes(index_of(brain)) == [vectors.IndexInfo("docs", EMBED, 3, 4)]
    # the next pass finds nothing more to remove
    assert brain.retention.run(older_than_s=10 * DAY, now=T0 + 31 * DAY).index_entries == 0


def test_a_plan_without_entries_or_without_an_index_file_is_removed_as_before(tmp_path):
    brain = make_brain(tmp_path)
    old = finished_plan(brain, ["a"], T0)
    done = brain.retention.run(older_than_s=DAY, now=T0 + 2 * DAY)
    assert (done.plans, done.index_entries, done.index_error) == (1, 0, None)
    assert not (tmp_path / "data" / "index").exists()  # retention never creates the index
    assert old not in plans_in_store(brain)


def test_entries_a_reused_task_stands_on_stay_until_it_goes_too(tmp_path):
    brain = make_brain(tmp_path)
    first = finished_plan(brain, ["item__0__index", "item__1__index"], T0)
    index(brain, first, "item__0__index", 3, T0)
    index(brain, first, "item__1__index", 2, T0)
    # a later run reused item 0 (unchanged), so its hits are the first plan's entries
    later = finished_plan(brain, ["item__0__index", "item__1__index"], T0 + 5 * DAY)
    reuse(brain, later, "item__0__index", f"{first}/item__0__index")
    index(brain, later, "item__1__index", 2, T0 + 5 * DAY)

    done = brain.retention.run(older_than_s=3 * DAY, now=T0 + 4 * DAY)
    assert done.plans == 1 and done.index_entries == 2  # item 1's entries only
    assert stored(index_of(brain)) == {first: 3, later: 2}
    assert vectors.tasks_with_entries(
        index_of(brain), [("docs", first, "item__0__index")]
    ) == {("docs", first, "item__0__index")}  # fmt: skip
    # the later plan goes too: the entries it stood on go in the same pass
    done = brain.retention.run(older_than_s=3 * DAY, now=T0 + 9 * DAY)
    assert done.plans == 1 and done.index_entries == 5
    assert stored(index_of(brain)) == {}


def test_the_sweep_removes_old_orphans_never_young_ones_or_a_live_plans(tmp_path):
    brain = make_brain(tmp_path)
    live = h.submit(brain, [h.noop("a")], now=T0)  # created long ago, never finished
    index(brain, live, "a", 2, T0)
    index(brain, "gone-before", "e", 3, T0)  # left by a kit whose retention kept entries
    index(brain, "unknown-new", "e", 1, T0 + 9 * DAY)  # younger than the cutoff: stays
    done = brain.retention.run(older_than_s=DAY, now=T0 + 10 * DAY)
    assert (done.plans, done.index_entries) == (0, 3)
    assert stored(index_of(brain)) == {live: 2, "unknown-new": 1}


# ---- a file indexed again --------------------------------------------------------------


def complete_embed(brain, plan_id: str, texts: list[str], now: float) -> None:
    task, _payload = h.claim(brain, now, classes=("script",), models=(f"{EMBED}:latest",))
    assert task["plan_id"] == plan_id
    documents = [{"text": t, "source": "/data/inputs/scans/a.pdf", "locator": f"page {i + 1}"}
                 for i, t in enumerate(texts)]  # fmt: skip
    vecs = [unit(1.0, 0.1 * i, 0.5) for i in range(len(texts))]
    output = {"embeddings": vecs, "model": EMBED, "index": "docs", "documents": documents}
    h.do(brain, plan_id, task["key"], "complete", now, output=output)
    assert h.row(brain, plan_id, task["key"])["state"] == "SUCCEEDED"


def embed_plan(brain, now: float) -> str:
    payload = {"model": EMBED, "index": "docs", "documents": [{"text": "t"}]}
    return h.submit(brain, [{"id": "index", "type": "embed", "payload": payload}], now=now)


def test_a_file_indexed_again_replaces_its_entries_and_retention_brings_none_back(tmp_path):
    brain = make_brain(tmp_path)
    with brain.db.tx() as conn:  # a trusted worker (registered with the brain)
        conn.execute(
            """INSERT INTO workers (id, token_hash, classes_json, gpus_json, registered_at,
                   last_heartbeat) VALUES ('w1', 'x', '["script"]', '[]', 1, 1)"""
        )
    first = embed_plan(brain, T0)
    complete_embed(brain, first, ["page one", "page two", "page three"], T0)
    assert len(hits(brain)) == 3
    # the same PDF again (a recipe run with rerun: true), now one page shorter
    second = embed_plan(brain, T0 + 5 * DAY)
    complete_embed(brain, second, ["page one again", "page two again"], T0 + 5 * DAY)
    found = hits(brain)
    assert sorted(hit["snippet"] for hit in found) == ["page one again", "page two again"]
    assert {hit["plan_id"] for hit in found} == {second}  # one hit per chunk, the newest
    assert stored(index_of(brain)) == {second: 2}
    # the first plan is removed: nothing of it comes back, nothing of the second goes
    done = brain.retention.run(older_than_s=3 * DAY, now=T0 + 4 * DAY)
    assert done.plans == 1 and done.index_entries == 0
    assert stored(index_of(brain)) == {second: 2} and len(hits(brain)) == 2


# ---- commit points -----------------------------------------------------------------------


class Traced:
    """An index connection that reports each COMMIT of retention's own transactions."""

    def __init__(self, conn: apsw.Connection, on_commit) -> None:
        self._conn = conn
        self._on_commit = on_commit

    def execute(self, sql: str, *args):
        result = self._conn.execute(sql, *args)
        if sql.strip().upper() == "COMMIT":
            self._on_commit(self._conn)
        return result

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


def watch_commits(brain, monkeypatch, on_store_commit, on_index_commit) -> None:
    real_tx = brain.db.tx
    real_connect = vectors.connect

    @contextmanager
    def tx(*args, **kwargs):
        with real_tx(*args, **kwargs) as conn:
            yield conn
        on_store_commit()

    monkeypatch.setattr(brain.db, "tx", tx)

    def connect(*args, **kwargs) -> Traced:
        return Traced(real_connect(*args, **kwargs), on_index_commit)

    monkeypatch.setattr(vectors, "connect", connect)


def crash_scenario(tmp_path: Path):
    """Plans of every kind retention meets; returns the brain and the plan ids."""
    brain = make_brain(tmp_path)
    origin = "older-kit-plan"  # removed by an older kit's retention; one task reused it
    old = finished_plan(brain, ["a", "b", "r"], T0)
    reused = finished_plan(brain, ["a"], T0)  # reused by a live plan: its entries stay
    live = finished_plan(brain, ["a", "x"], T0 + 20 * DAY)
    index(brain, origin, "a", 3, T0)
    index(brain, old, "a", 5, T0)
    index(brain, old, "b", 2, T0)
    reuse(brain, old, "r", f"{origin}/a")
    index(brain, reused, "a", 3, T0)
    index(brain, live, "a", 4, T0 + 20 * DAY)
    reuse(brain, live, "x", f"{reused}/a")
    index(brain, "orphan", "a", 3, T0)
    return brain, {"origin": origin, "old": old, "reused": reused, "live": live}


def kept_at_every_point(brain, ids: dict[str, str]) -> None:
    """What must hold at any commit point: nothing of a plan that stays was removed, and
    every entry has its vector (``stored`` checks)."""
    now = stored(index_of(brain))
    assert now.get(ids["live"]) == 4
    assert now.get(ids["reused"]) == 3  # the live plan's reused task stands on them
    if ids["old"] in plans_in_store(brain):  # not removed yet: the reuse it holds, too
        assert now.get(ids["origin"]) == 3


def converged(brain, ids: dict[str, str]) -> None:
    assert plans_in_store(brain) == {ids["live"]}  # "reused" finished long ago too
    assert stored(index_of(brain)) == {ids["live"]: 4, ids["reused"]: 3}  # no orphan left
    assert len(hits(brain)) == 7


def test_a_crash_at_each_commit_point_then_the_next_pass_converges(tmp_path, monkeypatch):
    monkeypatch.setattr(vectors, "DELETE_BATCH", 2)  # several batches per task
    monkeypatch.setattr(retention, "BATCH", 3)  # and per table of the store
    point = 0
    while True:
        point += 1
        brain, ids = crash_scenario(tmp_path / f"p{point}")
        seen: list[str] = []

        def tick(kind: str, seen=seen, point=point) -> None:
            seen.append(kind)
            if len(seen) == point:
                raise Crash(kind)

        with monkeypatch.context() as patch:
            watch_commits(brain, patch, lambda: tick("store"), lambda _conn: tick("index"))
            try:
                brain.retention.run(older_than_s=10 * DAY, now=T0 + 11 * DAY)
            except Crash:
                crashed = True
            else:
                crashed = False
        kept_at_every_point(brain, ids)
        brain.retention.run(older_than_s=10 * DAY, now=T0 + 11 * DAY)  # the next pass
        converged(brain, ids)
        if not crashed:
            break
    # the pass that did not crash crossed every point: the store's commits and the
    # index's (old's 5 + 2 entries, the origin's 3, the orphan's 3, two a batch)
    assert point == len(seen) + 1
    assert seen.count("index") == 3 + 2 + 2 + 2 and seen.count("store") >= 6, seen


# ---- hostile sizes and an unwritable index -------------------------------------------------


def bulk_entries(path: Path, plan_id: str, key: str, n: int, created: float) -> None:
    """``n`` entries in the index "docs" (made before) in one transaction, fast."""
    conn = vectors.connect(path)
    try:
        with conn:
            index_id = conn.execute("SELECT id FROM indexes WHERE name = 'docs'").fetchone()[0]
            first = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM entries").fetchone()[0]
            conn.executemany(
                """INSERT INTO entries (id, index_id, plan_id, task_key, source, snippet,
                   created) VALUES (?, ?, ?, ?, 'in/big.zim', 'chunk', ?)""",
                ((first + i, index_id, plan_id, key, created) for i in range(n)),
            )
            conn.executemany(
                f"INSERT INTO vec_{index_id} (rowid, embedding) VALUES (?, ?)",
                ((first + i, sqlite_vec.serialize_float32(unit(1.0, i % 97 + 1.0, 0.5)))
                 for i in range(n)),
            )  # fmt: skip
    finally:
        conn.close()


def test_a_hundred_thousand_entries_go_in_bounded_batches_outside_the_stores_writer(
    tmp_path, monkeypatch, capsys
):
    n = 100_000
    brain = make_brain(tmp_path)
    big = finished_plan(brain, ["index"], T0)
    keep = finished_plan(brain, ["index"], T0 + 9 * DAY)
    index(brain, keep, "index", 2, T0 + 9 * DAY)
    bulk_entries(index_of(brain), big, "index", n, T0)

    # per commit: (entries deleted, vectors deleted, statements, seconds)
    batches: list[tuple[int, int, int, float]] = []
    writing = threading.Event()  # the store's writer is held
    state = {"statements": 0, "entries": 0, "vectors": 0, "began": 0.0}

    def trace(_cursor, sql: str, bindings) -> bool:
        if sql.strip().upper().startswith("BEGIN"):
            assert not writing.is_set(), "an index batch inside a store transaction"
            state.update(statements=0, entries=0, vectors=0, began=time.perf_counter())
        elif sql.startswith("DELETE FROM vec_"):
            state["vectors"] += 1
        elif sql.startswith("DELETE FROM entries"):
            state["entries"] += len(bindings)
        state["statements"] += 1
        return True

    real_connect, real_tx = vectors.connect, brain.db.tx
    retention_thread = threading.current_thread()

    def connect(*args, **kwargs):
        conn = real_connect(*args, **kwargs)
        if threading.current_thread() is not retention_thread:
            return conn  # the completions' own
        conn.exec_trace = trace
        return Traced(conn, on_commit)

    def on_commit(_conn) -> None:
        batches.append((state["entries"], state["vectors"], state["statements"],
                        time.perf_counter() - state["began"]))  # fmt: skip

    @contextmanager
    def tx(*args, **kwargs):
        with real_tx(*args, **kwargs) as conn:
            writing.set()
            try:
                yield conn
            finally:
                writing.clear()

    # An embed completion of another plan, meanwhile, as leases.complete writes it: inside
    # the store's transaction. It waits for one batch at most, never fails as busy.
    waits: list[float] = []
    stop = threading.Event()

    def completions() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            asked = time.perf_counter()
            with real_tx():
                vectors.replace_task(index_of(brain), "docs", EMBED, keep, f"c{i}",
                                     [vectors.Entry([0.0, 1.0, 0.0], "new", "in/c.pdf")], ADMIN,
                                     T0 + 9 * DAY)  # fmt: skip
            waits.append(time.perf_counter() - asked)
            time.sleep(0.01)

    monkeypatch.setattr(vectors, "connect", connect)
    monkeypatch.setattr(brain.db, "tx", tx)
    other = threading.Thread(target=completions)
    other.start()
    try:
        started = time.perf_counter()
        done = brain.retention.run(older_than_s=5 * DAY, now=T0 + 10 * DAY)
        took = time.perf_counter() - started
    finally:
        stop.set()
        other.join()

    assert done.plans == 1 and done.index_entries == n
    deleting = [b for b in batches if b[0]]
    # each transaction: at most DELETE_BATCH entries, each with its vector, in BEGIN +
    # SELECT + one DELETE a vector + one DELETE of the entries + COMMIT
    assert sum(b[0] for b in deleting) == n and all(b[0] == b[1] for b in batches)
    assert {b[0] for b in deleting} == {vectors.DELETE_BATCH}
    assert len(deleting) == n // vectors.DELETE_BATCH
    assert {b[2] for b in deleting} == {vectors.DELETE_BATCH + 4}
    assert len(batches) == len(deleting) + 1  # a last read that finds none, no more
    assert stored(index_of(brain)) == {keep: 2 + len(waits)}
    assert waits, "no completion ran during the pass"
    seconds = sorted(b[3] for b in deleting)
    with capsys.disabled():
        print(
            f"\n{n} entries in {len(deleting)} batches of {vectors.DELETE_BATCH}: pass "
            f"{took:.1f} s, batch median {statistics.median(seconds) * 1000:.1f} ms, "
            f"max {seconds[-1] * 1000:.1f} ms; {len(waits)} completions meanwhile, "
            f"their wait max {max(waits) * 1000:.1f} ms"
        )


def read_only(monkeypatch) -> None:
    """The index file as SQLite has it when it may not write it: every write refused with
    SQLITE_READONLY (what a read-only file or volume answers), reads served."""
    real_connect = vectors.connect

    def connect(*args, **kwargs):
        conn = real_connect(*args, **kwargs)
        conn.execute("PRAGMA query_only = 1")
        return conn

    monkeypatch.setattr(vectors, "connect", connect)


def test_a_read_only_index_is_one_log_line_and_the_stores_retention_goes_on(
    tmp_path, monkeypatch, caplog
):
    brain = make_brain(tmp_path)
    old = [finished_plan(brain, ["a"], T0 + i) for i in range(3)]
    recent = finished_plan(brain, ["a"], T0 + 9 * DAY)
    for plan_id in [*old, recent]:
        index(brain, plan_id, "a", 2, T0)
    with monkeypatch.context() as patch, caplog.at_level(logging.INFO):
        read_only(patch)
        done = brain.retention.run(older_than_s=5 * DAY, now=T0 + 10 * DAY)
    assert done.plans == 3 and plans_in_store(brain) == {recent}  # the store's went
    assert done.index_entries == 0 and "read-only" in str(done.index_error)
    lines = [r for r in caplog.records if "search index" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "make it writable" in lines[0].getMessage()
    assert stored(index_of(brain)) == {p: 2 for p in [*old, recent]}
    # writable again: the next pass removes what the store no longer holds
    done = brain.retention.run(older_than_s=5 * DAY, now=T0 + 10 * DAY)
    assert (done.plans, done.index_entries, done.index_error) == (0, 6, None)
    assert stored(index_of(brain)) == {recent: 2}


def test_an_index_file_that_is_not_an_index_stops_nothing(tmp_path):
    brain = make_brain(tmp_path)
    old = finished_plan(brain, ["a"], T0)
    path = index_of(brain)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database at all" * 100)
    done = brain.retention.run(older_than_s=DAY, now=T0 + 2 * DAY)
    assert done.plans == 1 and old not in plans_in_store(brain)
    assert done.index_error is not None and "move index/search.sqlite" in done.index_error
    assert path.read_bytes() == b"not a database at all" * 100


@pytest.mark.parametrize("plans", [1, 3])
def test_dry_run_counts_the_entries_a_pass_removes(tmp_path, plans):
    brain = make_brain(tmp_path)
    ids = [finished_plan(brain, ["a", "r"], T0) for _ in range(plans)]
    index(brain, "older-kit-plan", "a", 2, T0)
    reuse(brain, ids[-1], "r", "older-kit-plan/a")  # goes when the last plan goes
    for plan_id in ids:
        index(brain, plan_id, "a", 3, T0)
    dry = brain.retention.run(older_than_s=DAY, dry_run=True, now=T0 + 2 * DAY)
    real = brain.retention.run(older_than_s=DAY, now=T0 + 2 * DAY)
    assert dry.index_entries == real.index_entries == 3 * plans + 2
    assert stored(index_of(brain)) == {}


def test_a_read_only_index_file_on_disk_names_the_fix_and_the_store_is_pruned():
    # The file as the volume may really hold it: the brain's user may not write it (a
    # pass as `nobody`, the store writable by it, the index root's). CI runs as root,
    # which passes every permission check, hence unprivileged() and a folder it can read.
    shared = Path(tempfile.mkdtemp(prefix="airig-index-ro-"))
    try:
        shared.chmod(0o755)
        brain = make_brain(shared)
        old = finished_plan(brain, ["a"], T0)
        index(brain, old, "a", 2, T0)
        brain.db.close()
        if os.geteuid() == 0:  # the brain's user is nobody, the index root's
            for folder, dirs, files in os.walk(shared):
                for name in dirs + files:
                    os.chown(Path(folder) / name, NOBODY, NOBODY)
            for path in (index_of(brain), index_of(brain).parent):
                os.chown(path, 0, 0)
        index_of(brain).chmod(0o444)
        index_of(brain).parent.chmod(0o555)

        def prune_as_nobody() -> None:
            again = make_brain(shared)
            done = again.retention.run(older_than_s=DAY, now=T0 + 2 * DAY)
            assert done.plans == 1 and old not in plans_in_store(again), done
            assert "read-only" in str(done.index_error), done.index_error

        assert unprivileged(prune_as_nobody) is None
        index_of(brain).parent.chmod(0o755)
        index_of(brain).chmod(0o644)
        assert stored(index_of(brain)) == {old: 2}  # kept for a pass that may write
    finally:
        (shared / "data" / "index").chmod(0o755)
        shutil.rmtree(shared)
