"""Group commit: the durable writes that arrive together share one transaction and one fsync.

Every durable commit waits for the disk (``synchronous=FULL``: a completion must survive
a power cut), and one writer commits at a time. On a virtual disk an fsync takes 4-8 ms
and sometimes hundreds, so at 500 workers (benchmarks/fleet.py) the writes queued behind
the fsyncs, not behind the CPU: seconds of latency with the brain at half a core.

Here the first writer to arrive leads: it takes every write queued so far and runs each
in its own SAVEPOINT of one transaction, in arrival order, then commits once. A write
that raises is rolled back alone (to its savepoint) and its exception goes to its own
caller, exactly as its own transaction would have; the others commit. Each caller gets
its answer only after the commit that holds its write is durable. Writes that arrive
while a commit is under way queue for the next batch, whose first writer then leads.

On PostgreSQL the shared writes (a worker's claims and reports, ``pg.py``) have a lane of
their own: up to ``Database.shared_writers`` leaders at once (``BRAIN_PG_WRITERS``, one by
default), each batch on a write connection of its own (``pg_writers.py``), while the
exclusive writes keep one leader and the store-wide lock. SQLite has one lane: one
writer, one batch at a time.

A write that committed is answered as committed, whatever happens after the COMMIT: its
events log line (``events.EventLog``, which catches the file up from the events table)
is owed, not the write. Answering it as failed made a client that retries store it again.
When SQLite itself rolls the transaction back (SQLITE_FULL, an I/O error), nothing of the
batch holds and every writer in it gets that error.
"""

from __future__ import annotations

import functools
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from airig.brain import timing
from airig.brain.store.db import Database
from airig.brain.store.dialect import is_pg
from airig.brain.store.events import Outbox
from airig.brain.store.states import RowMoved

Change = Callable[[Any, Outbox, float], Any]
T = TypeVar("T")
log = logging.getLogger("airig.brain.store.groupcommit")
# PostgreSQL, brains writing side by side (pg.py): a write whose task another brain moved
# first is run again from a fresh read (states.RowMoved), and a batch the server rolled
# back to break a deadlock (40P01) or a serialization failure (40001) is run again whole,
# each a few times before its error goes to its callers. Neither happens on SQLite.
MOVED_TRIES = 5
BATCH_TRIES = 3
RETRIED_SQLSTATES = ("40P01", "40001")
AGAIN_S = 0.005  # the most a batch rolled back for a deadlock waits before it runs again


def retried_failure(exc: BaseException) -> bool:
    """A failure the server ended the whole transaction for that running it again may
    not meet (a deadlock it broke, a serialization failure)."""
    return getattr(exc, "sqlstate", None) in RETRIED_SQLSTATES


def moved_or_retried(exc: BaseException) -> bool:
    """A write's own transaction worth running again: its row moved (``RowMoved``) or
    the server rolled it back (``retried_failure``)."""
    return isinstance(exc, RowMoved) or retried_failure(exc)


def retrying(attempt: Callable[[], T], again: Callable[[BaseException], bool], tries: int) -> T:
    """``attempt()``'s result; run again, up to ``tries`` times in all, while it raises an
    error ``again`` accepts. The last try's error, or one ``again`` refuses, is raised."""
    for tries_left in range(tries - 1, -1, -1):
        try:
            return attempt()
        except BaseException as exc:
            if tries_left and again(exc):
                continue
            raise
    raise AssertionError("unreachable: the last try returns or raises")


@dataclass
class Pending:
    change: Change
    shared: bool = False  # runs beside other brains' writes (pg.py): no store-wide lock
    outbox: Outbox = field(default_factory=Outbox)
    result: Any = None
    error: BaseException | None = None
    done: bool = False
    # Set once: its batch is done, or it leads ``batch`` (handed over by the last leader).
    wake: threading.Event = field(default_factory=threading.Event)
    batch: list[Pending] | None = None
    statements_s: float = 0.0  # its own change, inside the batch's transaction
    commit_s: float = 0.0  # the batch's COMMIT


class _Undone(Exception):
    """A batch's transaction failed whole; its cause is the failure it was rolled back for."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass
class _Lane:
    """Writes queued for a batch, and the leaders committing batches of them now."""

    limit: int  # leaders at once: each runs its batch on a write connection of its own
    queue: list[Pending] = field(default_factory=list)
    leaders: int = 0


class GroupCommit:
    def __init__(self, db: Database, publish: Callable[[Outbox], None]) -> None:
        self.db, self.publish = db, publish
        self._lock = threading.Lock()  # the lanes' queues and leaders
        self._exclusive = _Lane(1)
        # SQLite: one lane for every write. PostgreSQL: the shared writes a lane of their
        # own, as many leaders as the store has writers for them (pg_writers.py), even
        # one: an exclusive batch waiting for another brain's store-wide lock must not
        # hold this brain's claims and reports behind it.
        self._shared = _Lane(db.shared_writers) if is_pg(db) else self._exclusive
        self._inside = threading.local()

    def run(self, change: Change, shared: bool = False) -> Any:
        """``change(conn, outbox, now)`` committed durably; its result, or its exception.
        ``shared``: safe beside other brains' writes by row locks (``pg.py``): a batch of
        such writes only takes no store-wide lock on PostgreSQL."""
        if getattr(self._inside, "active", False):
            # A write from inside a write would wait for itself: it was an error before too.
            raise RuntimeError("a brain write cannot start inside another write")
        with timing.store_call() as clock:
            asked = time.perf_counter()
            item = self._run(change, shared)
            if clock is not None:
                # Its wait: for the batch before it, the lock, and the writes ahead of it.
                waited = time.perf_counter() - asked - item.statements_s - item.commit_s
                clock.spent["store_wait"] += max(0.0, waited)
                clock.spent["statements"] += item.statements_s
                clock.spent["commit"] += item.commit_s
        if item.error is not None:
            raise item.error
        return item.result

    def _run(self, change: Change, shared: bool) -> Pending:
        item = Pending(change, shared)
        lane = self._shared if shared else self._exclusive
        with self._lock:
            lane.queue.append(item)
            if lane.leaders < lane.limit:
                lane.leaders += 1
                item.batch, lane.queue = lane.queue, []
        if item.batch is None:
            item.wake.wait()  # one wake-up per write, never one per batch for every writer
        if item.batch is not None:
            self._lead(lane, item.batch)
        return item

    def _lead(self, lane: _Lane, batch: list[Pending]) -> None:
        """Commit ``batch``, then hand the writes queued meanwhile to the first of them,
        who leads them as the next batch (or give the lane's place back: none queued)."""
        try:
            self._commit(batch)
        finally:
            with self._lock:
                following = lane.queue[0] if lane.queue else None
                if following is not None:
                    following.batch, lane.queue = lane.queue, []
                else:
                    lane.leaders -= 1
            if following is not None:
                following.wake.set()

    def _commit(self, batch: list[Pending]) -> None:
        tries = 0

        def attempt() -> None:
            nonlocal tries
            if tries:
                log.info("a batch the store rolled back (a deadlock it broke) runs again")
                # Not at once: the batch the deadlock let through is waking to take the
                # rows this one held, and taking them first again met it again.
                time.sleep(random.uniform(0.0, AGAIN_S))
                for item in batch:
                    item.error, item.result, item.outbox = None, None, Outbox()
            tries += 1
            failed = self._transaction(batch)
            if failed is not None:
                raise _Undone(failed)

        try:
            retrying(attempt, lambda exc: retried_failure(getattr(exc, "cause", exc)), BATCH_TRIES)
        except _Undone:
            pass  # each write of the batch holds its own error
        finally:
            for item in batch:
                if item.error is None:
                    after_commit(self.publish, item.outbox)
                item.done = True
                item.wake.set()

    def _transaction(self, batch: list[Pending]) -> BaseException | None:
        """The batch in one transaction. When its commit fails, each write gets its error
        and the failure the batch was rolled back for is the answer (``retried_failure``:
        worth running it again)."""
        self._inside.active = True
        undone: BaseException | None = None  # the error SQLite rolled the batch back for
        exclusive = not all(item.shared for item in batch)
        try:
            with self.db.tx(timed=False, exclusive=exclusive) as conn:
                for item in batch:
                    began = time.perf_counter()
                    conn.execute("SAVEPOINT brain_write")
                    try:
                        item.result = retrying(
                            functools.partial(self._change, conn, item),
                            lambda exc: isinstance(exc, RowMoved) and conn.in_transaction,
                            MOVED_TRIES,
                        )
                    except BaseException as exc:  # noqa: BLE001 - to its own caller
                        item.error = exc
                        if not conn.in_transaction or retried_failure(exc):
                            undone = exc
                            raise
                    if not conn.in_transaction:
                        # A change that swallowed such an error: what follows would run
                        # outside any transaction, so the batch ends here, failed.
                        raise sqlite3.OperationalError("the batch's transaction was rolled back")
                    conn.execute("RELEASE brain_write")
                    item.statements_s = time.perf_counter() - began
                committing = time.perf_counter()
            committed = time.perf_counter() - committing
            for item in batch:
                item.commit_s = committed
        except BaseException as exc:  # noqa: BLE001 - the commit failed: nothing of it holds
            # Each write the batch held gets the cause (SQLITE_FULL...), not the complaint
            # of a ROLLBACK that found the transaction already gone.
            for item in batch:
                item.error = item.error or undone or exc
            if exclusive or self._shared is self._exclusive:  # the store's one writer
                close_failed(self.db)  # pg_writers.py rolls back its own connections
            return undone or exc
        finally:
            self._inside.active = False
        return None

    @staticmethod
    def _change(conn: Any, item: Pending) -> Any:
        """One try of ``item``'s change in its savepoint, from fresh reads: what it did is
        undone when it raises, unless the transaction itself is gone."""
        item.outbox = Outbox()
        try:
            return item.change(conn, item.outbox, time.time())
        except BaseException as exc:
            if conn.in_transaction and not retried_failure(exc):
                conn.execute("ROLLBACK TO brain_write")
            raise


def close_failed(db: Database) -> None:
    """Roll back what a failed commit left open on ``db``'s write connection: a COMMIT
    that failed may leave its transaction open, and every later BEGIN would fail."""
    with db.writer() as conn:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.warning("could not roll back a failed commit", exc_info=True)


def after_commit(publish: Callable[[Outbox], None], outbox: Outbox) -> None:
    """``publish(outbox)`` for a write that committed: never its caller's failure."""
    try:
        publish(outbox)
    except Exception:
        # The write holds; what it owes the logs, the events file catches up from the
        # events table (events.EventLog), and one metric or wake-up less is no reason
        # to answer a committed write as failed.
        log.exception("publishing a committed write failed")
