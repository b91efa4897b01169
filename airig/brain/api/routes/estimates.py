"""``GET /v1/estimates``: what the brain learned from finished attempts, per (task type,
model, GPU), as the store holds it (``store/estimates.py``; computed by
``scheduling/learned.py``): run time (median, p90), load time (median, p90), peak VRAM,
tokens per second, failure rate. Read by an admin or a metrics token, as /metrics is."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from airig.brain.api.auth import Principal
from airig.brain.api.deps import BrainDep, require
from airig.brain.scheduling.learned import DECAY, WINDOW
from airig.brain.store import estimates as stored

ReaderDep = Annotated[Principal, Depends(require("admin", "metrics"))]


class EstimateView(BaseModel):
    task_type: str
    model: str  # "" for tasks that need none
    gpu: str  # the GPU's model name(s), or "cpu"
    samples: int  # attempts folded in, completed and failed, since the key was first seen
    failures: int
    updated_at: float
    run_p50_s: float | None
    run_p90_s: float | None
    load_p50_s: float | None
    load_p90_s: float | None
    vram_peak_mb: int | None  # the p90 of recent peaks: what the VRAM check compares
    tokens_per_s: float | None
    failure_rate: float | None  # recency-weighted, over the window


class EstimatesView(BaseModel):
    window: int  # observations kept per key and series
    decay: float  # each older observation's weight relative to the next
    estimates: list[EstimateView]


router = APIRouter(prefix="/v1", tags=["estimates"])


@router.get("/estimates", response_model=EstimatesView)
def learned_estimates(brain: BrainDep, _: ReaderDep) -> EstimatesView:
    """Every learned key with its figures, by task type, model and GPU. A model that is
    not listed was never run: the scheduler uses the guess from its name for it."""
    with brain.db.read() as conn:
        rows = [EstimateView(**dict(row)) for row in stored.every(conn)]
    return EstimatesView(window=WINDOW, decay=DECAY, estimates=rows)
