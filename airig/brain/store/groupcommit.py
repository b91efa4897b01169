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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airig.brain import timing
from airig.brain.store.db import Database
from airig.brain.store.events import Outbox

Change = Callable[[Any, Outbox, float], Any]


@dataclass
class Pending:
    change: Change
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

    def run(self, change: Change) -> Any:
        """``change(conn, outbox, now)`` committed durably; its result, or its exception."""
        if getattr(self._inside, "active", False):
            # A write from inside a write would wait for itself: it was an error before too.
            raise RuntimeError("a brain write cannot start inside another write")
        with timing.store_call() as clock:
            asked = time.perf_counter()
            item = self._run(change)
            if clock is not None:
                # Its wait: for the batch before it, the lock, and the writes ahead of it.
                waited = time.perf_counter() - asked - item.statements_s - item.commit_s
                clock.spent["store_wait"] += max(0.0, waited)
                clock.spent["statements"] += item.statements_s
                clock.spent["commit"] += item.commit_s
        if item.error is not None:
            raise item.error
        return item.result

    def _run(self, change: Change) -> Pending:
        item = Pending(change)
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
        self._inside.active = True
        try:
            with self.db.tx(timed=False) as conn:
                for item in batch:
                    began = time.perf_counter()
                    conn.execute("SAVEPOINT brain_write")
                    try:
                        item.result = item.change(conn, item.outbox, time.time())
                    except BaseException as exc:  # noqa: BLE001 - handed to its own caller
                        conn.execute("ROLLBACK TO brain_write")
                        item.error = exc
                    conn.execute("RELEASE brain_write")
                    item.statements_s = time.perf_counter() - began
                committing = time.perf_counter()
            committed = time.perf_counter() - committing
            for item in batch:
                item.commit_s = committed
        except BaseException as exc:  # noqa: BLE001 - the commit failed: nothing of it holds
            for item in batch:
                item.error = item.error or exc
        finally:
            self._inside.active = False
        for item in batch:
            if item.error is None:
                self.publish(item.outbox)
            item.done = True
