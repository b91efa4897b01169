"""``GET /v1/report?since=7d&by=day``: is the kit improving? Its history per day or week
(issue 40 §2), computed from the store (``store/report.py``): tasks done and failed by
type and model, retries, median and p90 run times, model loads and swap time, the
external tier's calls and cost, alerts fired. The launcher's `report` prints it beside
the host's own changes (tune, update: logs the brain never sees); the dashboard's Report
page plots it.

Bounded work: ``since`` is a count and a unit (``12h``, ``7d``, ``4w``: the kit's one
grammar, ``airig/common/durations.py``) and ``by`` day or week, as the OpenAPI document
says (anything else is FastAPI's 422, each error one line); past ten years ``since``
reads as ten, past ``AIRIG_RETENTION_DAYS`` it is clamped to it (older rows are gone)
and the answer says so; a window of more than ``MAX_BUCKETS`` buckets is refused in one line (422).
Admin only: model names and alert subjects are the kit's.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from airig.brain.api.deps import AdminDep, BrainDep
from airig.brain.store import report
from airig.common import durations

# The kit's one duration grammar (airig/common/durations.py) in the OpenAPI document, so
# a client (and schemathesis) knows it; ``window`` checks it again with the same parser.
SINCE_PATTERN = durations.PATTERN
BY = ("day", "week")


class TaskRow(BaseModel):
    type: str
    model: str  # "" for a task that needs none
    done: int
    failed: int
    retries: int
    run_p50_s: float | None  # of the tasks that succeeded, nearest rank
    run_p90_s: float | None


class LoadRow(BaseModel):
    model: str
    loads: int
    swap_s: float | None  # the loads' time and the unloads before them, summed


class EscalationRow(BaseModel):
    provider: str
    model: str
    escalations: int
    answered: int
    cost: float


class AlertRow(BaseModel):
    alert: str
    fired: int


class Bucket(BaseModel):
    start: float  # seconds since the epoch, UTC midnight (a Monday's for a week)
    label: str  # 2026-11-29 or 2026-W48
    tasks: list[TaskRow]
    loads: list[LoadRow]
    escalations: list[EscalationRow]
    alerts: list[AlertRow]


class ReportView(BaseModel):
    since: float  # the window read: [since, until)
    until: float
    by: str
    asked: str  # the ``since`` asked for
    clamped: bool  # ``since`` reached past retention: the window starts there instead
    retention_days: int  # 0: the store keeps everything
    buckets: list[Bucket]
    truncated: list[str]  # sections cut at report.MAX_ROWS rows


router = APIRouter(prefix="/v1", tags=["report"])


def window(since: str, by: str, retention_days: int, now: float) -> tuple[report.Window, bool]:
    """The window ``since`` and ``by`` ask for, and whether retention clamped it; an
    HTTPException(422) saying what is wrong and what to ask instead."""
    if by not in BY:
        raise HTTPException(422, "by must be day or week")
    try:
        # past ten years reads as ten: retention or the bucket bound below decides
        whole, _ = durations.clamped(since)
    except durations.DurationError as exc:
        raise HTTPException(422, str(exc)) from None
    span = float(whole)
    clamped = retention_days > 0 and span > retention_days * report.DAY_S
    if clamped:
        span = retention_days * report.DAY_S
    count = report.buckets_for(now - span, now, by)
    if count > report.MAX_BUCKETS:
        raise HTTPException(
            422,
            f"since {since} by {by} is {count} buckets, more than {report.MAX_BUCKETS}: "
            "ask for a shorter since or by week",
        )
    return report.Window(now - span, now, by), clamped


@router.get("/report", response_model=ReportView)
def kit_report(
    brain: BrainDep,
    _: AdminDep,
    since: Annotated[str, Query(pattern=SINCE_PATTERN, max_length=durations.MAX_LENGTH)] = "7d",
    by: Annotated[Literal["day", "week"], Query()] = "day",
) -> dict[str, Any]:
    """The kit's history from ``since`` ago until now, one bucket per day or week (UTC),
    every bucket listed, oldest first."""
    retention = brain.settings.retention_days
    chosen, clamped = window(since, by, retention, time.time())
    with brain.db.read() as conn:
        found = report.read(conn, chosen)
    return {
        "since": chosen.since, "until": chosen.until, "by": by, "asked": since,
        "clamped": clamped, "retention_days": retention, **found,
    }  # fmt: skip
