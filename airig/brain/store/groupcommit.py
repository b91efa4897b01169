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

A write that committed is answered as committed, whatever happens after the COMMIT: its
events log line (``events.EventLog``, which catches the file up from the events table)
is owed, not the write. Answering it as failed made a client that retries store it again.
When SQLite itself rolls the transaction back (SQLITE_FULL, an I/O error), nothing of the
batch holds and every writer in it gets that error.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airig.brain import timing
from airig.brain.store.db import Database
from airig.brain.store.events import Outbox
from airig.brain.store.states import RowMoved

Change = Callable[[Any, Outbox, float], Any]
log = logging.getLogger("airig.brain.store.groupcommit")
# PostgreSQL, brains writing side by side (pg.py): a write whose task another brain moved
# first is run again from a fresh read (states.RowMoved), and a batch the server rolled
# back to break a deadlock (40P01) or a serialization failure (40001) is run again whole,
# each a few times before its error goes to its callers. Neither happens on SQLite.
MOVED_TRIES = 5
BATCH_TRIES = 3
RETRIED_SQLSTATES = ("40P01", "40001")


def retried_failure(exc: BaseException) -> bool:
    """A failure the server ended the whole transaction for that running it again may
    not meet (a deadlock it broke, a serialization failure)."""
    return getattr(exc, "sqlstate", None) in RETRIED_SQLSTATES


@dataclass
class Pending:
    change: Change
    shared: bool = False  # runs beside other brains' writes (pg.py): no store-wide lock
    outbox: Outbox = field(default_factory=Outbox)
    result: Any = None
    error: BaseException | None = None
    done: bool = False
    statements_s: float = 0.0  # its own change, inside the batch's transaction
    commit_s: float = 0.0  # the batch's COMMIT


class GroupCommit:
    def __init__(self, db: Database, publish: Callable[[Outbox], None]) -> None:
        self.db, self.publish = db, publish
        self._cond = threading.Condition()
        self._queue: list[Pending] = []
        self._leading = False
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
        with self._cond:
            self._queue.append(item)
            while self._leading and not item.done:
                self._cond.wait()
            if not item.done:
                self._leading = True
                batch, self._queue = self._queue, []
        if not item.done:
            try:
                self._commit(batch)
            finally:
                with self._cond:
                    self._leading = False
                    self._cond.notify_all()
        return item

    def _commit(self, batch: list[Pending]) -> None:
        try:
            for attempt in range(BATCH_TRIES):
                if attempt:
                    log.info("a batch the store rolled back (a deadlock it broke) runs again")
                    for item in batch:
                        item.error, item.result, item.outbox = None, None, Outbox()
                if not self._transaction(batch):
                    break
        finally:
            for item in batch:
                if item.error is None:
                    after_commit(self.publish, item.outbox)
                item.done = True

    def _transaction(self, batch: list[Pending]) -> bool:
        """The batch in one transaction; True when the server rolled it back for a
        failure worth running it again for (``retried_failure``)."""
        self._inside.active = True
        undone: BaseException | None = None  # the error SQLite rolled the batch back for
        exclusive = not all(item.shared for item in batch)
        try:
            with self.db.tx(timed=False, exclusive=exclusive) as conn:
                for item in batch:
                    began = time.perf_counter()
                    conn.execute("SAVEPOINT brain_write")
                    for tries_left in range(MOVED_TRIES - 1, -1, -1):
                        try:
                            item.result = item.change(conn, item.outbox, time.time())
                            break
                        except BaseException as exc:  # noqa: BLE001 - to its own caller
                            item.error = exc
                            if not conn.in_transaction or retried_failure(exc):
                                undone = exc
                                raise
                            conn.execute("ROLLBACK TO brain_write")
                            if not isinstance(exc, RowMoved) or not tries_left:
                                break
                            item.error, item.outbox = None, Outbox()  # again, from fresh reads
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
            close_failed(self.db)
            return retried_failure(undone or exc)
        finally:
            self._inside.active = False
        return False


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
