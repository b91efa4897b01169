"""Long-polling claims waiting on the event loop for READY work (``Brain.claim_waiters``,
served by ``api/exchange.py`` ``poll_async``)."""

from __future__ import annotations

import asyncio
import contextlib
import threading


class ClaimWaiters:
    """Long-polling claims waiting on the event loop, not in a thread, for READY work.

    A claim that found nothing used to wait in one of AnyIO's worker threads (40 in all,
    shared with every sync route): 500 idle workers long-polling 5 s each kept them all
    busy, and a lease renewal or a completion report waited behind them for a thread,
    past its lease (the fleet benchmark's kill run: 409s on completions, tasks never
    finished). Here a waiting claim is a future on its loop; ``wake`` (any thread, after a
    commit that made work READY) resolves every one, so it claims again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()

    def wake(self) -> None:
        with self._lock:
            waiting, self._waiting = self._waiting, set()
        for loop, future in waiting:
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits
                loop.call_soon_threadsafe(_resolve, future)

    async def wait(self, timeout_s: float) -> None:
        """Until the next ``wake`` or ``timeout_s``, whichever comes first."""
        loop = asyncio.get_running_loop()
        entry = (loop, loop.create_future())
        with self._lock:
            self._waiting.add(entry)
        try:
            await asyncio.wait_for(entry[1], timeout_s)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiting.discard(entry)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
