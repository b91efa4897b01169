"""``GET /v1/report/routing``: the routing advice (issue 40 §3, ``ops/routing.py``), what
``report --routing`` prints. Admin only: the rules name plans and models of every owner.

``since`` (``30d``, ``12h``, ``2w``: the kit's one grammar, ``airig/common/durations.py``;
past 3650 days it reads 3650 and says so) is how far back the successes are read;
``min_evidence`` the tasks a rule needs at least (1 to 1,000,000, default 3). Both bounds
are in the OpenAPI document: another value is FastAPI's 422, each error one line."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel

from airig.brain.api.deps import AdminDep, BrainDep, rendered
from airig.brain.ops import routing
from airig.common import durations


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
# The kit's one duration grammar (airig/common/durations.py) in the OpenAPI document: a
# value it refuses is FastAPI's 422, so no value the schema calls valid is refused by the
# route (tests/integration/test_api_fuzz.py)
SINCE_PATTERN = durations.PATTERN


@router.get("/report/routing", response_model=RoutingView)
def routing_advice(
    brain: BrainDep,
    _: AdminDep,
    since: Annotated[str, Query(pattern=SINCE_PATTERN, max_length=durations.MAX_LENGTH)] = "30d",
    min_evidence: Annotated[int, Query(ge=1, le=MAX_EVIDENCE)] = routing.DEFAULT_MIN_EVIDENCE,
) -> Response:
    """``{"since", "min_evidence", "rules": [{"rule", "type", "plan", "prompt_tokens_over",
    "prompt_tokens_under", "from_model", "use", "evidence": {"tasks",
    "failed_then_succeeded", "escalated_then_succeeded", "examples"}}]}``, most evidence
    first; ``use`` is a model's name or ``external``."""
    try:
        whole, clamped = durations.clamped(since)
    except durations.DurationError as exc:  # the pattern let it through: not reached
        raise HTTPException(422, str(exc)) from None
    if clamped:  # the store keeps nothing older, and the answer says the window it read
        since = f"{durations.MAX_DAYS}d"
    since_s = float(whole)
    with brain.db.read() as conn:
        rules = routing.advice(conn, time.time(), since_s, min_evidence)
    return rendered({"since": since, "min_evidence": min_evidence, "rules": rules})
