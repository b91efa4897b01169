"""``GET /v1/alerts``: the alerts that hold now (``alerts.py``'s table, the same rows as
``airig_alert_active`` in /metrics), so `triage` shows what the brain has fired and the
two never disagree. Read by an admin or a metrics token, as /metrics is. A store that
cannot be written holds its ``store_unwritable`` alert in memory: listed here too."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from airig.brain.api.auth import Principal
from airig.brain.api.deps import BrainDep, require
from airig.brain.store import alerts as stored_alerts

# /metrics shows these rows to a metrics token already; this route gives them no further
ReaderDep = Annotated[Principal, Depends(require("admin", "metrics"))]


class AlertView(BaseModel):
    kind: str  # service_down, gpu_fallback, worker_down … (alerts.KINDS)
    subject: str  # the service, worker, `worker/gpuN`, task type or `queue`
    fired_at: float
    message: str


class AlertsView(BaseModel):
    alerts: list[AlertView]


router = APIRouter(prefix="/v1", tags=["alerts"])


@router.get("/alerts", response_model=AlertsView)
def active_alerts(brain: BrainDep, _: ReaderDep) -> AlertsView:
    """Every alert that holds now, oldest first, as of the brain's last alert pass (a
    store that cannot be written: as of its last failed write)."""
    with brain.db.read() as conn:
        rows = [AlertView(**dict(row)) for row in stored_alerts.active(conn)]
    held = [AlertView(**dataclasses.asdict(alert)) for alert in brain.held_alerts()]
    return AlertsView(alerts=sorted(rows + held, key=lambda a: (a.fired_at, a.kind, a.subject)))
