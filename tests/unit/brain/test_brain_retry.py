"""Retry policy: exponential backoff with full jitter and a cap; two budgets."""

from __future__ import annotations

import random

import pytest

from airig.brain.store.retry import INFRA, TASK, RetryPolicy

POLICY = RetryPolicy(initial_s=2, multiplier=2, cap_s=300, infra_budget=3)


@pytest.mark.parametrize(("failures", "ceiling"), [(1, 2), (2, 4), (3, 8), (8, 256), (9, 300)])
def test_backoff_stays_within_the_capped_exponential(failures, ceiling):
    rng = random.Random(7)
    delays = [POLICY.backoff(failures, rng) for _ in range(300)]
    assert all(0 <= d <= ceiling for d in delays)
    # Full jitter spreads over the whole range, not around the ceiling.
    assert min(delays) < ceiling * 0.1 and max(delays) > ceiling * 0.9


def test_backoff_never_exceeds_the_cap():
    assert max(POLICY.backoff(50, random.Random(1)) for _ in range(200)) <= 300


def test_task_errors_retry_within_the_task_budget():
    assert POLICY.decide(TASK, 1, 2, "boom", True)
    assert POLICY.decide(TASK, 2, 2, "boom", True)
    assert not POLICY.decide(TASK, 3, 2, "boom", True)


def test_non_retryable_errors_fail_at_once():
    assert not POLICY.decide(TASK, 1, 5, "boom", retryable=False)
    assert not POLICY.decide(TASK, 1, 5, "bad_input", retryable=True)


def test_infra_failures_use_their_own_budget():
    assert POLICY.decide(INFRA, 3, 0, "lease_expired", True)
    assert not POLICY.decide(INFRA, 4, 99, "lease_expired", True)
