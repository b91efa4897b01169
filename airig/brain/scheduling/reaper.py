"""The reaper: expired leases, attempts over their runtime limit, due retries.

Two timers, as Temporal keeps them apart: a lease renewed by heartbeats finds dead
workers fast (an infrastructure failure), and a per-attempt deadline (task timeout +
grace) stops attempts that hang while still heartbeating (a task error, "timeout").
After a brain restart every live lease is extended once before the first reap, so
workers that kept running while the brain was down are not mass-expired.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

from airig.brain.store import reaping, states
from airig.brain.store.events import Outbox
from airig.brain.store.retry import INFRA, TASK, RetryPolicy
from airig.brain.store.unwritable import StoreUnwritable

log = logging.getLogger("airig.brain.scheduling.reaper")


def extend_live_leases(conn: sqlite3.Connection, now: float, lease_s: float) -> int:
    return reaping.extend_live_leases(conn, now, lease_s)


def reap(conn: sqlite3.Connection, outbox: Outbox, now: float, policy: RetryPolicy) -> None:
    """One pass: deadlines first (a hung attempt is the task's fault), then leases."""
    for task in reaping.over_time(conn, now):
        states.retry_or_fail(
            conn, outbox, task, now, policy, TASK, "timeout",
            f"attempt {task['attempt']} exceeded its runtime limit of {task['timeout_s']}s",
        )  # fmt: skip
    for task in reaping.lease_expired(conn, now):
        outbox.metric("lease_expiries")
        states.retry_or_fail(
            conn, outbox, task, now, policy, INFRA, "lease_expired",
            f"worker {task['worker_id']} stopped renewing attempt {task['attempt']}",
        )  # fmt: skip
    states.promote_due(conn, outbox, now)


class Reaper(threading.Thread):
    """Runs ``tick`` every ``interval_s`` until stopped; a failing pass is logged, not fatal."""

    def __init__(self, tick: Callable[[], None], interval_s: float) -> None:
        super().__init__(name="reaper", daemon=True)
        self._tick = tick
        self._interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self._interval_s):
            try:
                self._tick()
            except StoreUnwritable:
                pass  # said once when it began (store/unwritable.py); tried again next pass
            except Exception:
                log.exception("reaper pass failed")

    def stop(self) -> None:
        self._stop_event.set()
