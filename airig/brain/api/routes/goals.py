"""Goals: the brain's model drafts a plan, the user approves it (airig/brain/planner/goals.py)."""

from __future__ import annotations

import sqlite3
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from airig.brain.api.auth import Principal, may_act_on, owner_of
from airig.brain.api.deps import BrainDep, SubmitterDep
from airig.brain.planner import catalogue, goals
from airig.brain.plans.validate import PlanInvalid
from airig.brain.store import goals as stored_goals
from airig.brain.store.events import Outbox
from airig.common.protocol import ErrorBody, PlanErrorBody
from airig.common.spotlight import contains_reserved_delimiter
from airig.common.task_schemas import (
    DATA_PATH_PATTERN,
    MAX_SHORT_CHARS,
    NAME_MAX,
    relative_data_path,
)

router = APIRouter(prefix="/v1", tags=["goals"])
Responses = dict[int | str, dict[str, Any]]
NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "no such goal"}}
CONFLICT: Responses = {
    409: {"model": ErrorBody, "description": "the goal is not in a state that allows it"}
}
# A body that does not fit the model (FastAPI's own answer), or an inputs_dir that is no
# folder of the data volume (ours).
_BAD_GOAL: Responses = {422: {"description": "the goal or its inputs_dir is not valid",
    "content": {"application/json": {"schema": {"anyOf": [
        {"$ref": "#/components/schemas/ErrorBody"},
        {"$ref": "#/components/schemas/HTTPValidationError"},
    ]}}}}}  # fmt: skip
_STALE_DRAFT: Responses = {
    422: {"model": PlanErrorBody, "description": "the draft is no longer valid"}
}


class GoalRequest(BaseModel):
    """What ``POST /v1/goals`` accepts."""

    model_config = ConfigDict(extra="forbid")

    goal: Annotated[str, StringConstraints(min_length=1, max_length=MAX_SHORT_CHARS)] = Field(
        description="what the plan should achieve, in words"
    )
    # The pattern publishes relative_data_path's rules (checked in the route, with its
    # message); that the folder exists only the route can say (422 when it does not).
    inputs_dir: (
        Annotated[
            str,
            StringConstraints(min_length=1, max_length=1024),
            Field(json_schema_extra={"pattern": DATA_PATH_PATTERN}),
        ]
        | None
    ) = Field(
        None,
        description="a folder on the data volume whose files the planner is shown: relative, "
        f"no '..', names of at most {NAME_MAX} bytes; it must exist",
    )

    @field_validator("goal")
    @classmethod
    def _no_forged_delimiter(cls, value: str) -> str:
        if contains_reserved_delimiter(value):
            raise ValueError("contains a reserved <untrusted_data> delimiter")
        return value


def _load(conn: sqlite3.Connection, goal_id: str, who: Principal) -> sqlite3.Row:
    """The goal, when ``who`` may act on it (its submitter or admin); any other goal is
    a 404 like a missing one, so goal ids are not confirmed."""
    goal = goals.load(conn, goal_id)
    if goal is None or not may_act_on(who, goal["owner"]):
        raise HTTPException(404, f"no goal {goal_id}")
    return goal


@router.post("/goals", status_code=201, responses=_BAD_GOAL)
async def create_goal(body: GoalRequest, brain: BrainDep, who: SubmitterDep) -> dict[str, Any]:
    """Store the goal and start drafting its plan; nothing of the plan runs before approval."""
    if body.inputs_dir is not None:
        try:
            relative_data_path(body.inputs_dir)
            catalogue.check_inputs_dir(brain.settings, body.inputs_dir)
        except ValueError as exc:
            raise HTTPException(
                422, f"inputs_dir {exc}; give a folder relative to the data volume"
            ) from None

    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> dict[str, Any]:
        goal_id = goals.create(
            conn, outbox, brain.settings, body.goal, body.inputs_dir, now, who.name,
            owner_of(who),
        )  # fmt: skip
        return goals.view(conn, _load(conn, goal_id, who))

    return await anyio.to_thread.run_sync(brain.write, change)


@router.get("/goals")
def list_goals(brain: BrainDep, who: SubmitterDep, limit: int = 50) -> dict[str, Any]:
    """The newest goals: all for admin, a submit token's own for it."""
    owner = None if who.scope == "admin" else owner_of(who)

    def change(conn: sqlite3.Connection, _o: Outbox, now: float) -> dict[str, Any]:
        rows = stored_goals.newest(conn, owner, max(1, min(limit, 500)))
        return {"goals": [goals.view(conn, goals.refresh(conn, row, now)) for row in rows]}

    return brain.write(change)


@router.get("/goals/{goal_id}", responses=NOT_FOUND)
def get_goal(goal_id: str, brain: BrainDep, who: SubmitterDep) -> dict[str, Any]:
    # A write: a drafting goal whose drafting task has ended is marked failed here.
    return brain.write(
        lambda conn, _o, now: goals.view(conn, goals.refresh(conn, _load(conn, goal_id, who), now))
    )


@router.post("/goals/{goal_id}/approve", responses={**NOT_FOUND, **CONFLICT, **_STALE_DRAFT})
def approve_goal(goal_id: str, brain: BrainDep, who: SubmitterDep) -> dict[str, Any]:
    """Submit the draft as a normal plan; answers its id (the same one when repeated)."""

    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> dict[str, Any]:
        goal = goals.refresh(conn, _load(conn, goal_id, who), now)
        plan_id = goals.approve(conn, outbox, brain.settings, goal, now, who.name)
        return {"plan_id": plan_id, "goal": goals.view(conn, _load(conn, goal_id, who))}

    try:
        return brain.write(change)
    except goals.GoalConflict as exc:
        raise HTTPException(409, str(exc)) from None
    except PlanInvalid as exc:  # the limits changed since the draft was checked
        detail = {"message": "the draft is no longer valid", "errors": exc.errors, "fixes": []}
        raise HTTPException(422, detail) from None


@router.post("/goals/{goal_id}/reject", responses={**NOT_FOUND, **CONFLICT})
def reject_goal(goal_id: str, brain: BrainDep, who: SubmitterDep) -> dict[str, Any]:
    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> dict[str, Any]:
        goals.reject(conn, outbox, goals.refresh(conn, _load(conn, goal_id, who), now), now)
        return goals.view(conn, _load(conn, goal_id, who))

    try:
        return brain.write(change)
    except goals.GoalConflict as exc:
        raise HTTPException(409, str(exc)) from None
