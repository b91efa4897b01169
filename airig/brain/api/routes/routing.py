"""``GET /v1/report/routing``: the routing advice (issue 40 §3, ``ops/routing.py``), what
``report --routing`` prints. Admin only: the rules name plans and models of every owner.

``since`` (``30d``, ``12h``, ``2w``; at most 3650 days) is how far back the successes
are read; ``min_evidence`` the tasks a rule needs at least (default 3). A bad value is a
422 with one line saying what is accepted."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel

from airig.brain.api.deps import AdminDep, BrainDep, rendered
from airig.brain.ops import routing


class Evidence(BaseModel):
    tasks: int  # the tasks the rule stands on
    failed_then_succeeded: int  # of them, those that failed locally first
    escalated_then_succeeded: int  # of them, those the external tier took
    examples: list[str]  # up to 5 task ids, "<plan id>/<task key>", newest success first


class RuleView(BaseModel):
    rule: str  # one sentence, one line
    type: str
    plan: str | None  # null: the evidence spans plans
    prompt_tokens_over: int | None
    prompt_tokens_under: int | None
    from_model: str
    use: str  # a model's name, or "external"
    evidence: Evidence


class RoutingView(BaseModel):
    since: str
    min_evidence: int
    rules: list[RuleView]


router = APIRouter(prefix="/v1", tags=["report"])
MAX_EVIDENCE = 1_000_000  # more tasks than a store keeps in a window


@router.get("/report/routing", response_model=RoutingView)
def routing_advice(
    brain: BrainDep,
    _: AdminDep,
    since: Annotated[str, Query(max_length=40)] = "30d",
    min_evidence: Annotated[int, Query()] = routing.DEFAULT_MIN_EVIDENCE,
) -> Response:
    """``{"since", "min_evidence", "rules": [{"rule", "type", "plan", "prompt_tokens_over",
    "prompt_tokens_under", "from_model", "use", "evidence": {"tasks",
    "failed_then_succeeded", "escalated_then_succeeded", "examples"}}]}``, most evidence
    first; ``use`` is a model's name or ``external``."""
    try:
        since_s = routing.parse_since(since)
    except routing.BadSince as exc:
        raise HTTPException(422, str(exc)) from None
    if not 1 <= min_evidence <= MAX_EVIDENCE:
        shown = str(min_evidence) if abs(min_evidence) < 10**12 else "a number that long"
        raise HTTPException(
            422,
            f"min_evidence={shown} is out of range; give a whole number from 1 to {MAX_EVIDENCE}",
        )
    with brain.db.read() as conn:
        rules = routing.advice(conn, time.time(), since_s, min_evidence)
    return rendered({"since": since, "min_evidence": min_evidence, "rules": rules})
