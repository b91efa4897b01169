"""One provider call per ``request_id``.

The brain writes a call to its ledger (state ``sent``) before it sends it, and after its
own restart re-sends every call still ``sent`` with the same ``request_id``: the provider
may well have answered while the brain was down. Remembering completed answers here
turns that re-send into the same answer without paying for a second call; a re-send that
arrives while the first call still runs waits for it. Bounded (LRU) and in memory: a
gateway restart forgets, and the worst case is then one more call, which the brain's
ledger records.

Failures are not remembered: a retry after a 502 is a new attempt. A ``request_id`` sent
again with a different request is refused (409) rather than answered with the answer to
another question.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class Reused(Exception):
    """The request_id belongs to a different request."""


@dataclass
class _Entry(Generic[T]):
    fingerprint: str
    value: T


@dataclass
class _Running(Generic[T]):
    fingerprint: str
    task: asyncio.Task[T]


class Answers(Generic[T]):
    def __init__(self, size: int) -> None:
        self.size = size
        self.done: OrderedDict[str, _Entry[T]] = OrderedDict()
        self.running: dict[str, _Running[T]] = {}

    async def once(
        self, key: str, fingerprint: str, call: Callable[[], Awaitable[T]]
    ) -> tuple[T, bool]:
        """(answer, True when it was not computed for this request)."""
        hit = self.done.get(key)
        if hit is not None:
            if hit.fingerprint != fingerprint:
                raise Reused(key)
            self.done.move_to_end(key)
            return hit.value, True
        running = self.running.get(key)
        if running is not None:
            if running.fingerprint != fingerprint:
                raise Reused(key)
            return await asyncio.shield(running.task), True
        task: asyncio.Task[T] = asyncio.ensure_future(call())
        self.running[key] = _Running(fingerprint, task)
        # Settled by the task itself, so an answer that arrives after the asking client
        # went away (the brain restarting) is still remembered for its re-send.
        task.add_done_callback(lambda done: self._settle(key, fingerprint, done))
        return await asyncio.shield(task), False

    def _settle(self, key: str, fingerprint: str, task: asyncio.Task[T]) -> None:
        self.running.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            return  # (task.exception() also marks the failure as seen)
        self.done[key] = _Entry(fingerprint, task.result())
        self.done.move_to_end(key)
        while len(self.done) > self.size:
            self.done.popitem(last=False)
