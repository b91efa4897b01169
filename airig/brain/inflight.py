"""Rendered payload bytes the whole brain holds between a claim and its answer on the wire.

``BRAIN_MAX_CLAIM_BYTES`` bounds one answer; 64 workers claiming 4 MiB tasks at once
still made the brain hold one such answer each (peaks of 291-347 MB). Every claim now
charges what it renders to one ``InFlight`` pool (``BRAIN_MAX_INFLIGHT_BYTES``) and gives
it back once its answer's JSON is built (``Hold``, a context manager, so every error path
gives it back too; ``fastpath.py`` says why not after the send). A task that does not
fit stays READY: the claim answers with the tasks it already has, or, with none, waits
for room within its own long-poll (``wait_s``; a claim with ``wait_s`` 0 answers empty
and the worker claims again).

Liveness: a task larger than the whole pool still goes when nothing else is held, so no
setting makes a task unservable; claims waiting for room are served in arrival order, so
a stream of small ones cannot keep it waiting; and a waiter reserves the room it waited
for, so an answer built sends one claim back to the database, not every waiting one.

Bytes given back to the pool must go back to the system too, or the bound shows in no
measure of memory: glibc raises its mmap threshold to the largest block freed, after
which 4 MiB answers come from heaps (one per thread that built them) that keep the
memory once freed. ``return_large_frees`` pins the threshold at its default
(benchmarks/templates.py, 64 claims of 4 MiB tasks: peak 111-118 MB with both, 195 MB
with the threshold alone, 263-278 MB with the bound alone, 238-332 MB with neither).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections import deque
from types import TracebackType


class InFlight:
    """The pool: ``cap`` bytes (``BRAIN_MAX_INFLIGHT_BYTES``) shared by every claim."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held = 0  # charged and reserved, by every live Hold
        self.peak = 0  # the most ever held: what the tests check against the cap
        self._cond = threading.Condition()
        # Claims waiting for room, in arrival order: the first is served first, and a
        # claim that did not wait gets no room while any does. Without it, claims of small
        # tasks would keep a task over the cap (which needs an empty pool) waiting forever.
        self._queue: deque[object] = deque()

    def hold(self) -> Hold:
        return Hold(self)

    def _fits(self, size: int) -> bool:
        # An empty pool takes anything: a task over the cap is served alone.
        return self.held == 0 or self.held + size <= self.cap

    def _add(self, size: int, force: bool = False) -> bool:
        with self._cond:
            if not force and (self._queue or not self._fits(size)):
                return False
            self.held += size
            self.peak = max(self.peak, self.held)
            return True

    def _give(self, size: int) -> None:
        if not size:
            return
        with self._cond:
            self.held -= size
            self._cond.notify_all()  # only the first waiter can take it; the rest re-check

    def _reserve(self, size: int, timeout_s: float) -> bool:
        """Wait in line until ``size`` fits, then hold it; False when ``timeout_s`` passed
        first (the place in line is given up)."""
        deadline = time.monotonic() + timeout_s
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            try:
                while self._queue[0] is not ticket or not self._fits(size):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
                self.held += size
                self.peak = max(self.peak, self.held)
                return True
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()  # the next in line may fit too


class Hold:
    """What one answer holds of the pool, from its first render until its JSON is built."""

    def __init__(self, pool: InFlight) -> None:
        self.pool = pool
        self.charged = 0  # bytes of payloads rendered into this answer
        self.reserved = 0  # bytes set aside by ``wait``, not yet charged
        self.refused = 0  # size of the last payload the pool refused (0: none)

    def take(self, size: int) -> bool:
        """Charge one payload; False (nothing charged) when the pool cannot hold it now."""
        need = max(size - self.reserved, 0)
        if need and not self.pool._add(need):
            self.refused = size
            return False
        self.reserved -= size - need
        self.charged += size
        self.refused = 0
        return True

    def charge(self, size: int) -> None:
        """Count a payload that must go whatever the pool holds (a replayed claim: its
        leases exist already); claims after it wait for it to be built."""
        self.pool._add(size, force=True)
        self.charged += size

    def wait(self, timeout_s: float) -> bool:
        """After a refusal: wait for room for that payload and reserve it for the next
        try. False when there was no refusal, or ``timeout_s`` passed first (the refusal
        stands: the caller may wait again without trying the database for nothing)."""
        size = self.refused
        if not size or not self.pool._reserve(size, timeout_s):
            return False
        self.refused = 0
        self.reserved += size
        return True

    def unreserve(self) -> None:
        """Give back what ``wait`` set aside and no payload used (the claim found less)."""
        size, self.reserved = self.reserved, 0
        self.pool._give(size)

    def release(self) -> None:
        size, self.charged, self.reserved = self.charged + self.reserved, 0, 0
        self.pool._give(size)

    def __enter__(self) -> Hold:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


# malloc.h: mallopt's parameter for the size above which a block is mmapped on its own.
_M_MMAP_THRESHOLD = -3
# Its default (GNU C Library manual, "Malloc Tunable Parameters": 128 KiB, "adjusted
# dynamically" unless set, "If the parameter is set, the dynamic adjustment is disabled").
LARGE_BLOCK_BYTES = 128 * 1024


def return_large_frees() -> bool:
    """Make glibc hand every freed block over 128 KiB back to the system at once (the
    brain calls it before serving). False, changing nothing, where an operator tuned
    malloc through the environment or the C library has no ``mallopt`` (not glibc)."""
    tuned = os.environ.get("GLIBC_TUNABLES", "")
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "mmap_threshold" in tuned:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES))
