"""Reused daemon threads for attempts.

A worker runs each attempt's executor on a thread so it can honour a stop request, a
lost lease and a runtime limit while the executor blocks. Starting a new thread per
attempt waits for that thread to run, which under load cost more than a no-op task;
these threads are reused. They are daemon threads (unlike ``ThreadPoolExecutor``'s),
so an attempt abandoned after a stop, still unwinding, never holds up the process exit,
and a new thread is started only while every existing one is still busy with one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class _Lane:
    def __init__(self, index: int) -> None:
        self.busy = False
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        thread = threading.Thread(target=self._loop, name=f"attempt-{index}", daemon=True)
        thread.start()

    def put(self, job: Callable[[], Any], future: Future) -> None:
        self.busy = True
        self._jobs.put((job, future))

    def _loop(self) -> None:
        while True:
            job, future = self._jobs.get()
            try:
                future.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                future.set_exception(exc)
            finally:
                self.busy = False


class AttemptThreads:
    def __init__(self) -> None:
        self._lanes: list[_Lane] = []
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], Any]) -> Future:
        future: Future = Future()
        with self._lock:
            lane = next((lane for lane in self._lanes if not lane.busy), None)
            if lane is None:
                lane = _Lane(len(self._lanes))
                self._lanes.append(lane)
            lane.put(job, future)
        return future
