"""``GET /v1/escalations``: the external tier's calls, the spend against the budgets and
the tasks waiting for it (admin). Never a request's text: a handoff holds task data."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from airig.brain.api.deps import AdminDep, BrainDep
from airig.brain.escalation import ledger
from airig.brain.store import queue as task_queue


class BudgetView(BaseModel):
    daily: float
    monthly: float
    spent_today: float  # UTC day; answered calls, plus calls in flight at their estimate
    spent_month: float
    over_budget: str  # wait | fail
    price_in_per_mtok: float
    price_out_per_mtok: float


class TotalsView(BaseModel):
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float
    by_state: dict[str, int]


class WaitingTask(BaseModel):
    id: int
    plan_id: str
    key: str
    reason: str | None
    task_errors: int
    call_state: str | None
    next_try_at: float | None


class CallView(BaseModel):
    id: str
    task_id: int
    plan_id: str
    task_key: str
    why: str
    state: str
    attempts: int
    next_try_at: float | None
    created_at: float
    sent_at: float | None
    answered_at: float | None
    reask: int
    provider: str | None
    model: str | None
    input_tokens: int
    output_tokens: int
    estimated_cost: float
    cost: float
    outcome: str | None
    error: str | None


class EscalationsView(BaseModel):
    enabled: bool
    budget: BudgetView
    rate_per_min: int
    totals: TotalsView
    waiting: list[WaitingTask]
    calls: list[CallView]


router = APIRouter(prefix="/v1", tags=["escalations"])


# Its 422 (a query parameter out of bounds) is FastAPI's own HTTPValidationError entry.
@router.get("/escalations", response_model=EscalationsView)
def escalations(
    brain: BrainDep, _: AdminDep, limit: Annotated[int, Query(ge=1, le=1000)] = 50
) -> EscalationsView:
    """Calls (newest first), spend today / this month (UTC) against the budgets, the
    rate limit, and the tasks waiting ESCALATED (first 1000) with their reason."""
    s = brain.settings
    now = time.time()
    with brain.db.read() as conn:
        spent = ledger.spend(conn, now)
        calls = ledger.calls(conn, limit)
        totals = ledger.totals(conn)
        waiting = task_queue.escalated(conn)
    return EscalationsView(
        enabled=s.escalation,
        budget=BudgetView(
            daily=s.escalation_budget_daily,
            monthly=s.escalation_budget_monthly,
            spent_today=round(spent.today, 6),
            spent_month=round(spent.month, 6),
            over_budget=s.escalation_over_budget,
            price_in_per_mtok=s.escalation_price_in,
            price_out_per_mtok=s.escalation_price_out,
        ),  # fmt: skip
        rate_per_min=s.escalation_rate_per_min,
        totals=TotalsView(**totals),
        waiting=[WaitingTask(**dict(row)) for row in waiting],
        calls=[CallView(**call) for call in calls],
    )
