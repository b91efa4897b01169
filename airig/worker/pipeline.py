"""The worker's end of ``POST /v1/exchange``: tasks held ahead and reports sent in batches.

With nothing held, the run loop sends what is pending (the last result) together with a
long-poll claim that starts its first task in the same write: one round trip per task.
With ``AIRIG_WORKER_PREFETCH`` > 1 (cpu / script workers only) the worker also holds
tasks leased ahead; while it runs one, a sender thread carries the pending reports (the
start of this task, the results of the last ones) and a claim that tops the held tasks
up, so under load one request serves several tasks, as a Celery worker's prefetch does.
Held leases are renewed every heartbeat interval and released on a graceful stop; a
crash leaves them to expire, and the brain's reaper retries them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable

from airig.common.protocol import (
    Assignment,
    ClaimRequest,
    CompleteReport,
    CompleteRequest,
    ExchangeRequest,
    ExchangeResponse,
    FailReport,
    FailRequest,
    ReleaseReport,
    RenewReport,
    StartReport,
)
from airig.worker.link import BrainLink, BrainUnreachable, Unregistered

log = logging.getLogger("airig.worker.pipeline")

# Classes that may be held ahead; the brain enforces the same list (``exchange.py``).
PREFETCHABLE = {"cpu", "script"}
# How long a report may wait for the next ones while the worker still holds tasks.
BATCH_WINDOW_S = 0.02
# How long the last reports of a stopping worker may take to reach the brain.
CLOSE_DEADLINE_S = 15.0


def effective_prefetch(wanted: int, classes: list[str]) -> int:
    """A GPU worker never holds work ahead: it would bind models before the policy sees it."""
    return wanted if set(classes) <= PREFETCHABLE else 1


class Pipeline:
    def __init__(
        self,
        link: BrainLink,
        prefetch: int,
        stopping: threading.Event,
        resident: Callable[[], list[str]],
        on_lost: Callable[[int], None],
    ) -> None:
        self.link, self.prefetch, self.stopping = link, prefetch, stopping
        self.resident, self.on_lost = resident, on_lost
        self.renew_every_s = 10.0
        self.held: deque[Assignment] = deque()
        self._started: set[int] = set()  # held tasks the brain started in their claim
        self._pending: list = []
        self._state = threading.Condition()
        self._send = threading.Lock()  # one exchange in flight: reports stay in order
        self._kick = self._closed = False
        self._sender: threading.Thread | None = None

    # ---------------------------------------------------------------- run loop side
    def next_task(self, wait_s: float) -> Assignment | None:
        """The next task to run; None when nothing came or the worker is stopping."""
        if not self.held:
            self.exchange(wait_s, idle=True)
        with self._state:
            if not self.held or self.stopping.is_set():
                return None  # held tasks are released by close()
            task = self.held.popleft()
            if task.task_id not in self._started:
                self._queue(StartReport(task_id=task.task_id, **task.lease.model_dump()))
            self._started.discard(task.task_id)
            return task

    def report(self, task: Assignment, body: CompleteRequest | FailRequest) -> None:
        """Queue a result; it leaves with the next exchange (at once if the worker idles)."""
        kind = CompleteReport if isinstance(body, CompleteRequest) else FailReport
        with self._state:
            self._pending.append(kind(task_id=task.task_id, **body.model_dump()))
            if self.held:  # the run loop goes on locally: let the sender carry it
                self._kick = True
                self._state.notify_all()

    def forget(self) -> None:
        """After registering again: the brain has already retried every old lease."""
        with self._state:
            self.held.clear()
            self._started.clear()
            self._pending.clear()

    # ---------------------------------------------------------------- exchanges
    def exchange(self, wait_s: float, idle: bool) -> None:
        """Send the pending reports with a claim that tops the held tasks up."""
        with self._send:
            with self._state:
                if idle and self.held:
                    return  # the sender's exchange just topped the held tasks up
                reports, self._pending = self._pending, []
                room = self.prefetch - len(self.held) - (0 if idle else 1)
                start = idle and not self.held
            claim = None
            if room > 0 and not self.stopping.is_set():
                claim = ClaimRequest(
                    wait_s=wait_s if start else 0, resident_models=self.resident(),
                    start=start, max_tasks=room, claim_id=uuid.uuid4().hex,
                )  # fmt: skip
            if not reports and claim is None:
                return
            try:
                answer = self.link.exchange(ExchangeRequest(reports=reports, claim=claim),
                                            stop=None if reports else self.stopping)  # fmt: skip
            except BrainUnreachable:
                with self._state:
                    self._pending[:0] = reports  # resent later: a replayed report is harmless
                raise
            self._settle(answer, started=start)

    def _settle(self, answer: ExchangeResponse, started: bool) -> None:
        for result in answer.results:
            fields = {"task_uid": result.task_id, "action": result.action}
            if result.status == 200:
                if result.action in ("complete", "fail"):
                    log.info("attempt reported", extra={**fields, "state": result.state})
            elif result.action in ("complete", "fail"):
                log.warning("lease lost; result dropped", extra={**fields, "error": result.detail})
            elif result.action in ("start", "renew"):
                self._lost(result.task_id, result.detail)
        with self._state:
            if started and answer.assignments:
                self._started.add(answer.assignments[0].task_id)
            self.held.extend(answer.assignments)

    def _lost(self, task_id: int, detail: str) -> None:
        log.warning("lease lost", extra={"task_uid": task_id, "error": detail})
        with self._state:
            kept = [task for task in self.held if task.task_id != task_id]
            if len(kept) != len(self.held):
                self.held = deque(kept)
                return
        self.on_lost(task_id)  # the running attempt: cancel it

    def _queue(self, report: object) -> None:
        self._pending.append(report)
        self._kick = True
        self._state.notify_all()

    # ---------------------------------------------------------------- sender thread
    def start(self, renew_every_s: float) -> None:
        self.renew_every_s = renew_every_s
        if self._sender is None and self.prefetch > 1:
            self._sender = threading.Thread(target=self._run, name="reports", daemon=True)
            self._sender.start()

    def _run(self) -> None:
        renewed = time.monotonic()
        while True:
            with self._state:
                self._state.wait_for(lambda: self._kick or self._closed, self.renew_every_s)
                # Quick tasks finish within milliseconds of each other: let their reports
                # gather for a moment while held tasks remain, so one exchange carries
                # several (an exchange costs the brain a transaction, a report a row).
                window_ends = time.monotonic() + BATCH_WINDOW_S
                while self.held and not self._closed:
                    left = window_ends - time.monotonic()
                    if left <= 0:
                        break
                    self._state.wait(left)
                if self._closed:
                    return
                self._kick = False
                if self.held and time.monotonic() - renewed >= self.renew_every_s:
                    renewed = time.monotonic()
                    self._pending.extend(
                        RenewReport(task_id=t.task_id, **t.lease.model_dump()) for t in self.held
                    )
            try:
                self.exchange(0, idle=False)
            except Unregistered:
                log.warning("brain forgot this worker; dropping held tasks")
                self.forget()
            except (BrainUnreachable, RuntimeError) as exc:
                log.error("could not send reports", extra={"error": str(exc)})

    def close(self) -> None:
        """Graceful stop: send what is pending and release every held task."""
        with self._state:
            self._closed = True
            self._state.notify_all()
        if self._sender is not None:
            self._sender.join(timeout=CLOSE_DEADLINE_S)
        with self._send, self._state:
            reports = self._pending + [
                ReleaseReport(task_id=t.task_id, **t.lease.model_dump()) for t in self.held
            ]
            self._pending, self.held = [], deque()
        if not reports:
            return
        try:
            self.link.exchange(ExchangeRequest(reports=reports), deadline_s=CLOSE_DEADLINE_S)
        except (BrainUnreachable, Unregistered, RuntimeError) as exc:
            # Their leases expire and the reaper hands the tasks to other workers.
            log.error("could not release held tasks", extra={"error": str(exc)})
