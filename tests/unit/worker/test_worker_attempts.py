"""Attempt threads are reused, and a stuck attempt never blocks the next one."""

from __future__ import annotations

import threading

import pytest

from airig.worker.attempts import AttemptThreads


def test_threads_are_reused_and_results_and_errors_come_back():
    threads = AttemptThreads()
    names = [threads.submit(lambda: threading.current_thread().name).result(5) for _ in range(5)]
    assert set(names) == {"attempt-0"}
    with pytest.raises(ValueError, match="boom"):
        threads.submit(lambda: (_ for _ in ()).throw(ValueError("boom"))).result(5)
    assert threads.submit(lambda: 42).result(5) == 42


def test_a_stuck_attempt_gets_a_fresh_thread_for_the_next_one():
    threads = AttemptThreads()
    release = threading.Event()
    stuck = threads.submit(lambda: release.wait(10))
    assert threads.submit(lambda: threading.current_thread().name).result(5) == "attempt-1"
    assert threading.current_thread().daemon is False  # the caller; pool threads are daemon
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("attempt-"))
    release.set()
    assert stuck.result(5) is True
