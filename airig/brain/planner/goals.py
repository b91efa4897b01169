"""Goals: a sentence becomes a plan the user approves (PLANS.md, "Goals").

    drafting --(draft valid)--> awaiting_approval --approve--> approved (plan_id set)
        |                               |--reject--> rejected
        '--(drafting task failed: answers invalid twice, model down, cancelled)--> failed

A goal is drafted by a plan of one `plan` task in ``draft`` mode (its "drafting plan"),
run like any task on an llm worker. Its answer is validated as a whole plan; an invalid
one fails the task with the validator's errors (``hook.py``), and the one retry the
drafting task has shows them to the model. ``failed`` is read from the drafting task
when the goal is looked at, so every way a task can end (retries used up, timeout,
cancellation, retention) leads there without a hook in each. Nothing of the draft runs
before ``approve``, which submits it as a normal plan.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Any

from airig.brain.plans import submit
from airig.brain.plans.models import PlanSpec
from airig.brain.plans.validate import Limits, PlanInvalid, validate_plan
from airig.brain.settings import BrainSettings
from airig.brain.store import goals, states
from airig.brain.store.events import Outbox
from airig.common.protocol import TaskState as S

STATES = ("drafting", "awaiting_approval", "approved", "rejected", "failed")
DRAFT_KEY = "draft"
# One re-ask: "an invalid draft goes back to the model once, with the validator's errors".
DRAFT_RETRIES = 1


class GoalConflict(Exception):
    """The goal is not in the state the request needs (HTTP 409)."""


def draft_limits(settings: BrainSettings) -> Limits:
    return Limits(min(settings.max_tasks, settings.plan_max_tasks), settings.max_payload_bytes)


def create(
    conn: sqlite3.Connection,
    outbox: Outbox,
    settings: BrainSettings,
    goal: str,
    inputs_dir: str | None,
    now: float,
    submitted_by: str,
    owner: str | None = None,
) -> str:
    """Store the goal and its drafting plan (one `plan` task, draft mode); the goal id.
    ``owner`` (auth.owner_of the submitting token) owns both, and the approved plan."""
    payload: dict[str, Any] = {"goal": goal, "mode": "draft", "model": settings.planner_model}
    if inputs_dir:
        payload["inputs_dir"] = inputs_dir
    task = {
        "id": DRAFT_KEY, "type": "plan", "task_class": "llm", "payload": payload,
        "retry_count": DRAFT_RETRIES, "name": "draft a plan for the goal",
    }  # fmt: skip
    # the plan's name quotes the goal, a NUL escaped: a name holds none (plans/validate.py)
    name = f"goal: {goal[:60]}".replace("\x00", "\\x00")
    plan, tainted = validate_plan({"name": name, "tasks": [task]}, Limits())
    goal_id = uuid.uuid4().hex[:12]
    drafting = submit.insert_plan(
        conn, outbox, plan, tainted, now, submitted_by=submitted_by,
        digest=submit.body_hash(json.dumps(task, sort_keys=True)), idempotency_key=None,
        default_timeout_s=settings.default_timeout_s, owner=owner,
    )  # fmt: skip
    goals.set_origin(conn, drafting, f"goal:{goal_id}")
    goals.insert(conn, goal_id, goal, inputs_dir, drafting, submitted_by, now, owner)
    return goal_id


def validate_draft(
    output: dict[str, Any], goal_text: str, settings: BrainSettings, tainted: bool = False
) -> tuple[PlanSpec, set[str], dict[str, Any]]:
    """(plan, tainted ids, the draft as stored) or PlanInvalid. A ``tainted`` draft (its
    drafting task read untrusted data, or ran on a worker the brain does not trust) runs
    untrusted: every task is marked so, and the validator refuses shell tasks in it."""
    draft: dict[str, Any] = {"name": output.get("name") or f"goal: {goal_text[:60]}",
                             "tasks": output.get("tasks")}  # fmt: skip
    if not isinstance(draft["tasks"], list) or not draft["tasks"]:
        raise PlanInvalid([{"task": None, "field": "tasks", "message": "the draft has no tasks"}])
    if tainted:
        draft["tasks"] = [
            {**t, "trust": "untrusted"} if isinstance(t, dict) else t for t in draft["tasks"]
        ]
    plan, tainted_ids = validate_plan(draft, draft_limits(settings))
    return plan, tainted_ids, draft


def draft_done(
    conn: sqlite3.Connection, task: sqlite3.Row, output: dict[str, Any],
    settings: BrainSettings, now: float, tainted: bool = False,
) -> None:  # fmt: skip
    """A drafting task answered: a valid draft awaits approval, else PlanInvalid. Where
    it came from (worker, rig, trusted or not) is kept with it for the approval screen."""
    goal = goals.of_drafting_plan(conn, task["plan_id"])
    text = goal["goal"] if goal else ""
    try:
        _, _, draft = validate_draft(output, text, settings, tainted)
    except PlanInvalid as exc:
        if goal is not None:
            goals.set_errors(conn, goal["id"], json.dumps(exc.errors), now)
        raise
    if goal is not None and goal["state"] == "drafting":
        origin = draft_origin(conn, task["worker_id"], tainted)
        goals.await_approval(conn, goal["id"], json.dumps(draft), now, json.dumps(origin))


def draft_origin(conn: sqlite3.Connection, worker_id: str | None, tainted: bool) -> dict[str, Any]:
    """Who drafted: the worker, its rig, and whether the draft runs trusted."""
    return {
        "worker": worker_id, "rig": goals.worker_host(conn, worker_id),
        "trusted": not tainted,
    }  # fmt: skip


def refresh(conn: sqlite3.Connection, goal: sqlite3.Row, now: float) -> sqlite3.Row:
    """A drafting goal whose drafting task ended without a draft is ``failed``."""
    if goal["state"] != "drafting":
        return goal
    task = goals.drafting_task_end(conn, goal["drafting_plan_id"], DRAFT_KEY)
    if task is not None and task["state"] not in S.TERMINAL:
        return goal
    if task is not None and task["state"] == S.SUCCEEDED:
        return goal  # draft_done moved it on in the same transaction; never reached
    errors = json.loads(goal["errors_json"])
    why = task["error"] if task is not None else "the drafting plan was deleted"
    if not errors:
        errors = [{"task": None, "field": "draft", "message": why}]
    return goals.fail(conn, goal["id"], json.dumps(errors), now)


def view(conn: sqlite3.Connection, goal: sqlite3.Row) -> dict[str, Any]:
    # error_type and model: the CLI's fix for a failed goal (a model not pulled is no
    # reason to reword the goal)
    task = goals.drafting_task_view(conn, goal["drafting_plan_id"], DRAFT_KEY)
    return {
        "id": goal["id"], "goal": goal["goal"], "inputs_dir": goal["inputs_dir"],
        "state": goal["state"],
        "draft": json.loads(goal["draft_json"]) if goal["draft_json"] else None,
        "errors": json.loads(goal["errors_json"]), "plan_id": goal["plan_id"],
        "drafting_plan_id": goal["drafting_plan_id"],
        "drafting_task": dict(task) if task is not None else None,
        "draft_origin": json.loads(goal["draft_origin"]) if goal["draft_origin"] else None,
        "created_at": goal["created_at"], "updated_at": goal["updated_at"],
    }  # fmt: skip


def load(conn: sqlite3.Connection, goal_id: str) -> sqlite3.Row | None:
    return goals.load(conn, goal_id)


def approve(
    conn: sqlite3.Connection, outbox: Outbox, settings: BrainSettings, goal: sqlite3.Row,
    now: float, submitted_by: str,
) -> str:  # fmt: skip
    """Submit the draft as a normal plan (validated again, as any plan); its id."""
    if goal["state"] == "approved":
        return str(goal["plan_id"])  # approving twice answers the same plan
    if goal["state"] != "awaiting_approval":
        raise GoalConflict(f"goal {goal['id']} is {goal['state']}, not awaiting_approval")
    draft = json.loads(goal["draft_json"])
    plan, tainted = validate_plan(draft, draft_limits(settings))
    plan_id = submit.insert_plan(
        conn, outbox, plan, tainted, now, submitted_by=submitted_by,
        digest=submit.body_hash(goal["draft_json"]), idempotency_key=None,
        default_timeout_s=settings.default_timeout_s, owner=goal["owner"],
    )  # fmt: skip
    goals.set_origin(conn, plan_id, f"goal:{goal['id']}")
    goals.approve(conn, goal["id"], plan_id, now)
    return plan_id


def reject(conn: sqlite3.Connection, outbox: Outbox, goal: sqlite3.Row, now: float) -> None:
    """No plan will come of it; a draft still being written is cancelled."""
    if goal["state"] == "rejected":
        return
    if goal["state"] not in ("awaiting_approval", "drafting"):
        raise GoalConflict(f"goal {goal['id']} is {goal['state']}; only a draft can be rejected")
    if goal["state"] == "drafting" and goal["drafting_plan_id"]:
        states.cancel_plan(conn, outbox, goal["drafting_plan_id"], now)
    goals.reject(conn, goal["id"], now)
