"""Where a request's time goes: its phases, as Prometheus histograms and slow-request lines.

A request's latency is its wait for the store plus the work it does, and at 500 workers
(benchmarks/fleet.py) the client-side p99 alone could not say which. Every request the
brain serves is cut into phases that add up to its time inside the brain:

- ``before``: arrival to its first request for the store (routing, token, body, model
  validation, the wait for a thread of the pool and for the GIL);
- ``store_wait``: waiting for the store, behind another transaction or a read, or in a
  group commit behind the writes batched before its own;
- ``statements``: its own SQL and the Python around it while it holds the store;
- ``commit``: the COMMIT of the transaction that holds its write (the fsync);
- ``long_poll``: a claim waiting for work to appear (by design, not latency);
- ``between``: its handler's own work between store calls;
- ``after``: the last store call to the last byte sent (serialisation, the event loop).

Each phase is observed in ``airig_brain_request_phase_seconds{route, phase}`` and the
whole in ``airig_brain_request_seconds{route}``. A request over ``BRAIN_SLOW_REQUEST_MS``
(long-poll wait not counted) is logged with its phases: the one line that says whether a
slow answer waited for the disk, for another transaction, or for a CPU.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from prometheus_client import CollectorRegistry, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("airig.brain.timing")

PHASES = ("before", "store_wait", "statements", "commit", "long_poll", "between", "after")
# Fine below 50 ms: the fleet's targets are p99 < 50 ms, and the histogram's quantiles
# are only as good as its buckets there.
BUCKETS = (0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04,
           0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)  # fmt: skip


class Timing:
    """One request's clock. The store adds its phases; the rest is derived at the end."""

    __slots__ = ("start", "first_store", "last_store", "spent", "depth")

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.depth = 0  # store calls inside store calls (a read inside a write) count once
        self.first_store: float | None = None
        self.last_store: float | None = None
        self.spent = dict.fromkeys(PHASES, 0.0)

    def phases(self, end: float) -> dict[str, float]:
        spent = dict(self.spent)
        if self.first_store is None or self.last_store is None:
            spent["before"] = end - self.start  # it never asked for the store
            return spent
        spent["before"] = self.first_store - self.start
        spent["after"] = max(0.0, end - self.last_store)
        inside = self.last_store - self.first_store
        measured = spent["store_wait"] + spent["statements"] + spent["commit"]
        spent["between"] = max(0.0, inside - measured - spent["long_poll"])
        return spent


_current: ContextVar[Timing | None] = ContextVar("airig_brain_timing", default=None)


def current() -> Timing | None:
    # anyio's worker threads run in a copy of the request's context: the same Timing.
    return _current.get()


@contextmanager
def store_call() -> Iterator[Timing | None]:
    """Around one use of the store (a read, a transaction, a group-committed write): the
    request's ``before`` ends at the first, its ``after`` starts at the last. Yields the
    request's Timing for the caller to add its phases to; None when there is no request,
    or when this call is inside another (the outer one counts the time)."""
    timing = _current.get()
    if timing is None or timing.depth:
        yield None
        return
    now = time.perf_counter()
    if timing.first_store is None:
        timing.first_store = now
    timing.depth += 1
    try:
        yield timing
    finally:
        timing.depth -= 1
        timing.last_store = time.perf_counter()


@contextmanager
def spend(phase: str) -> Iterator[None]:
    timing = _current.get()
    if timing is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        timing.spent[phase] += time.perf_counter() - start


class RequestTiming:
    """The outermost ASGI layer: starts each request's clock, observes it when the last
    byte is sent, and logs it when it was slow."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry, slow_ms: float) -> None:
        self.app = app
        self.slow_s = slow_ms / 1000 if slow_ms > 0 else None
        self.total = Histogram(
            "airig_brain_request_seconds", "Time inside the brain per request, by route",
            ["route"], buckets=BUCKETS, registry=registry,
        )  # fmt: skip
        self.phase = Histogram(
            "airig_brain_request_phase_seconds",
            "Where a request's time went (airig.brain.timing.py), by route and phase",
            ["route", "phase"], buckets=BUCKETS, registry=registry,
        )  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timing = Timing()
        token = _current.set(timing)
        status = 0

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            _current.reset(token)
            self._observe(scope, timing, status)

    def _observe(self, scope: Scope, timing: Timing, status: int) -> None:
        end = time.perf_counter()
        route = _route(scope)
        spent = timing.phases(end)
        total = end - timing.start
        self.total.labels(route=route).observe(total)
        for phase, seconds in spent.items():
            self.phase.labels(route=route, phase=phase).observe(seconds)
        waited = total - spent["long_poll"]
        if self.slow_s is not None and waited >= self.slow_s:
            fields = {f"{phase}_ms": round(seconds * 1000, 2) for phase, seconds in spent.items()}
            log.info(
                "slow request",
                extra={"route": route, "method": scope["method"], "status": status,
                       "ms": round(waited * 1000, 2), **fields},
            )  # fmt: skip


def _route(scope: Scope) -> str:
    """The route's template (``/v1/tasks/{task_id}/lease``), never the raw path: one
    series per route, and no ids in labels."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if path:
        return f"{scope['method']} {path}"
    if scope.get("airig_route"):
        return f"{scope['method']} {scope['airig_route']}"
    endpoint = scope.get("endpoint")  # Starlette before scope["route"]
    return getattr(endpoint, "__name__", None) or "unrouted"
