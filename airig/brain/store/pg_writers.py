"""PostgreSQL: the write connections a brain's shared durable writes run on, several at once.

A worker's hot durable writes (the exchange's reports and claim: ``shared=True`` in
``Brain.write``) are safe beside each other by row locks (``pg.py``'s docstring), across
brains and so within one brain as well. On one connection they still queued behind each
other's batches: at 500 workers and two brains (benchmarks/fleet.py) that queue was the
exchange's tail, store_wait p99 373 ms of its 476. Here each of up to ``size``
group-commit leaders (``groupcommit.py``) takes a connection of its own, and their batches
run side by side; the exclusive writes keep their one connection and the store-wide lock
(``pg.py``). Measured, more than one did not pay on a 2-core host (``SHARED_WRITERS``).
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger("airig.brain.store")
# Shared durable batches side by side in one brain (BRAIN_PG_WRITERS). One by default:
# measured on a 2-core host, two brains at 500 workers (benchmarks/README.md, the fleet on
# PostgreSQL), three at once were worse, not better (exchange p99 1002 and 667 ms against
# 390 and 543 ms with one, in the same sitting, alternating): the batches' statements then
# wait for a CPU instead of for the connection (the brains' threads waited 1.32 s per s for
# one against 0.47). A brain with cores to spare may try more; the tests run three.
SHARED_WRITERS = 1


class WriteConnection(Protocol):
    """What a writer is to this module (``pg.PgConnection``, which imports this one)."""

    locks_rows: bool

    @property
    def in_transaction(self) -> bool: ...

    @property
    def lost(self) -> bool: ...

    def execute(self, sql: str, params: Any = ()) -> Any: ...

    def close(self) -> None: ...


C = TypeVar("C", bound=WriteConnection)


class Writers(Generic[C]):
    """Up to ``size`` write connections, opened as they are first needed (an idle brain
    holds one), each lent to one transaction at a time."""

    def __init__(self, connect: Callable[[], C], size: int = SHARED_WRITERS) -> None:
        self.size = size
        self._connect = connect
        self._idle: queue.SimpleQueue[C | None] = queue.SimpleQueue()
        self._open = 0
        self._opening = threading.Lock()

    def _get(self) -> C:
        with self._opening:
            fresh = self._idle.empty() and self._open < self.size
            if fresh:
                self._open += 1
        conn = None if fresh else self._idle.get()  # None: a place freed by a lost one
        if conn is not None:
            return conn
        try:
            conn = self._connect()
        except BaseException:
            self._idle.put(None)  # the place stays free for the next write to try
            raise
        conn.locks_rows = True  # dialect.for_update: other writes run beside it
        return conn

    @contextmanager
    def take(self) -> Iterator[C]:
        """An idle write connection, outside any transaction, for the caller's own; given
        back with no transaction open, or closed (and its place freed) when it was lost."""
        conn = self._get()
        try:
            yield conn
        finally:
            self._give_back(conn)

    def _give_back(self, conn: C) -> None:
        if not conn.lost and conn.in_transaction:
            # a COMMIT that failed may leave its transaction open: every later BEGIN would fail
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.warning("could not roll back a failed commit", exc_info=True)
        # the server or the network dropped it, or its failed transaction would not end:
        # the next write opens anew
        if conn.lost or conn.in_transaction:
            conn.close()
            self._idle.put(None)
            return
        self._idle.put(conn)

    def close(self) -> None:
        """Close every connection, waiting for those lent out to come back."""
        with self._opening:
            for _ in range(self._open):
                conn = self._idle.get()
                if conn is not None:
                    conn.close()
            self._open = 0
