"""The heartbeat thread: worker liveness, GPU telemetry and the current lease.

It runs apart from the executor so a long GPU call cannot starve it. When the brain
refuses the lease renewal (409: lost, cancelled, over its runtime limit) it sets the
attempt's cancel event; the executor stops and the worker reports nothing.
Each successful beat writes the state file that ``python -m airig.worker --check`` reads.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from airig.common.protocol import Assignment, HeartbeatRequest
from airig.worker.link import BrainLink, BrainUnreachable, LeaseLost, Unregistered

log = logging.getLogger("airig.worker.heartbeat")


class CurrentAttempt:
    """The attempt being run (if any) and the event that cancels it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.task: Assignment | None = None
        self.cancel = threading.Event()

    def begin(self, task: Assignment) -> threading.Event:
        with self._lock:
            self.task = task
            self.cancel = threading.Event()
            return self.cancel

    def end(self) -> None:
        with self._lock:
            self.task = None

    def snapshot(self) -> tuple[Assignment | None, threading.Event]:
        with self._lock:
            return self.task, self.cancel


def write_state(path: Path, worker_id: str, ok: bool) -> None:
    # A temp name per writer: the runner and the heartbeat thread both write this file, and
    # a shared temp name let one rename the other's file away (seen in the e2e run).
    tmp = path.with_name(f"{path.name}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps({"worker_id": worker_id, "ok": ok, "at": time.time()}))
    tmp.replace(path)


class Heartbeat(threading.Thread):
    def __init__(
        self,
        link: BrainLink,
        worker_id: str,
        interval_s: float,
        current: CurrentAttempt,
        telemetry: Callable[[], HeartbeatRequest],
        state_file: Path,
    ) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.link, self.worker_id, self.interval_s = link, worker_id, interval_s
        self.current, self.telemetry, self.state_file = current, telemetry, state_file
        self.stop_event = threading.Event()
        self.needs_register = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.beat()
            self.stop_event.wait(self.interval_s)

    def beat(self) -> None:
        timeout = max(1.0, self.interval_s)
        try:
            self.renew_lease(timeout)
            self.link.heartbeat(self.telemetry(), timeout)
            write_state(self.state_file, self.worker_id, ok=True)
        except Unregistered as refused:
            if self.link.still_unregistered(refused):  # not a beat sent before a new token
                self.needs_register.set()
        except (BrainUnreachable, RuntimeError, OSError) as exc:
            # never let the thread die: a dead heartbeat makes a healthy worker look lost
            log.warning("heartbeat failed", extra={"error": str(exc)})

    def renew_lease(self, timeout: float) -> None:
        task, cancel = self.current.snapshot()
        if task is None or cancel.is_set():
            return
        try:
            self.link.lease_write(task.task_id, "heartbeat", task.lease, deadline_s=timeout)
        except LeaseLost as exc:
            log.warning(
                "lease lost; cancelling the attempt",
                extra={"task_uid": task.task_id, "attempt": task.attempt, "error": str(exc)},
            )
            cancel.set()

    def stop(self) -> None:
        self.stop_event.set()
