"""Retry policy: exponential backoff with full jitter, two budgets, non-retryable types.

Shaped like Temporal's: initial delay, x2 per attempt, a cap, and a *full* jitter
(uniform between 0 and the capped delay) so retries of many tasks do not arrive in step.
Infrastructure failures (lost lease, dead worker, brain restart) draw on their own budget
so a flaky node cannot use up the task's ``retry_count``, which is for the task's own
errors. A compute service that a worker could not reach (``OUTAGE``: down, restarting
during ``update`` or ``restart``) is infrastructure too: the attempt draws on the infra
budget, and the brain stops offering that service's tasks while it is down
(``scheduling/placement.py``). Error types in ``NON_RETRYABLE`` fail at once, whatever the
executor said.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Errors that another attempt cannot fix: the definition or the input is wrong.
NON_RETRYABLE = frozenset(
    {
        "bad_input",
        "invalid_payload",
        "untrusted_input",
        "untrusted_command",
        "tainted_command",
        "template_error",
        "unknown_type",
        "model_not_found",
        "file_not_found",
    }
)

INFRA = "infra"
TASK = "task"

# A worker's report that its compute service did not answer at all (executors: "... is
# unreachable"): the service's condition, not the task's, so never a counted failure.
OUTAGE = frozenset({"service_unreachable"})


def failure_kind(error_type: str) -> str:
    """Whose budget a worker's failed attempt draws on: INFRA for an outage, else TASK."""
    return INFRA if error_type in OUTAGE else TASK


@dataclass(frozen=True)
class RetryPolicy:
    initial_s: float = 2.0
    multiplier: float = 2.0
    cap_s: float = 300.0
    infra_budget: int = 5

    def backoff(self, failures: int, rng: random.Random | None = None) -> float:
        """Delay before the next attempt after ``failures`` (>= 1) failures of one kind."""
        exponent = max(0, failures - 1)
        ceiling = min(self.cap_s, self.initial_s * self.multiplier**exponent)
        return (rng or random).uniform(0.0, ceiling)

    def decide(
        self, kind: str, failures: int, task_budget: int, error_type: str, retryable: bool
    ) -> bool:
        """True when the task should be retried after its ``failures``-th error of ``kind``."""
        if kind == INFRA:
            return failures <= self.infra_budget
        if not retryable or error_type in NON_RETRYABLE:
            return False
        return failures <= task_budget
