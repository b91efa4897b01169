"""Cost and limits, pure arithmetic: the price of a call, the budget periods (UTC days
and months), whether an estimated call would pass a budget, and the rate limit window.

A call is judged on its *estimate* (input tokens estimated as characters / 4, plus the
whole ``max_tokens`` it may produce): the provider bills what it produced, so the estimate
is an upper bound on the output and the budget is never passed by a call's own answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

RATE_WINDOW_S = 60.0
# An over-budget call that waits is looked at again after this long (or when the period
# turns, if sooner): a raised budget takes effect without a restart of the wait.
OVER_BUDGET_RECHECK_S = 60.0


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` as the usual rule of thumb counts them: four characters each."""
    return math.ceil(len(text) / 4)


def cost(input_tokens: int, output_tokens: int, price_in: float, price_out: float) -> float:
    """What a call costs at prices per million tokens."""
    return (input_tokens * price_in + output_tokens * price_out) / 1_000_000


def day_start(now: float) -> float:
    """The start of ``now``'s UTC day."""
    moment = datetime.fromtimestamp(now, UTC)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def month_start(now: float) -> float:
    """The start of ``now``'s UTC month."""
    moment = datetime.fromtimestamp(now, UTC)
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()


def next_month_start(now: float) -> float:
    moment = datetime.fromtimestamp(month_start(now), UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return moment.replace(year=year, month=month).timestamp()


@dataclass(frozen=True)
class Budget:
    daily: float
    monthly: float


@dataclass(frozen=True)
class Spend:
    """Money spent (answered calls) and reserved (calls in flight) in each period."""

    today: float
    month: float


def over_budget(estimate: float, spend: Spend, budget: Budget) -> str | None:
    """Why a call estimated at ``estimate`` may not be made now, or None when it fits."""
    if spend.today + estimate > budget.daily:
        return (
            f"over daily budget: {spend.today:.4f} spent + {estimate:.4f} estimated "
            f"> {budget.daily:.4f} (AIRIG_ESCALATION_BUDGET_DAILY)"
        )
    if spend.month + estimate > budget.monthly:
        return (
            f"over monthly budget: {spend.month:.4f} spent + {estimate:.4f} estimated "
            f"> {budget.monthly:.4f} (AIRIG_ESCALATION_BUDGET_MONTHLY)"
        )
    return None


def recheck_at(now: float, reason: str) -> float:
    """When an over-budget call that waits is tried again."""
    turn = day_start(now) + 86_400 if reason.startswith("over daily") else next_month_start(now)
    return min(turn, now + OVER_BUDGET_RECHECK_S)


def rate_limited(sent_at: list[float], now: float, per_min: int) -> float | None:
    """When the next call may go, given the send times of recent calls; None = now."""
    recent = sorted(t for t in sent_at if t > now - RATE_WINDOW_S)
    if len(recent) < per_min:
        return None
    return recent[len(recent) - per_min] + RATE_WINDOW_S
