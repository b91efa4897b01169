"""`submit --goal`: the brain's model drafts a plan, the user sees it and approves it.

Kept apart from ``tasks.py`` (which mounts it on `submit`): waiting for the draft, the
draft's table, the question. Nothing of the plan runs before the approval; declining
rejects the goal at the brain, so its draft cannot be approved later by mistake.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import typer
from rich.markup import escape
from rich.status import Status
from rich.table import Table

from airig.common.errors import AirigError
from airig.launcher.brain_client import BrainClient
from airig.launcher.console import console


def draft_table(goal: dict[str, Any]) -> Table:
    draft = goal["draft"] or {}
    table = Table(title=escape(f"draft for goal {goal['id']} · {draft.get('name', '')}"))
    for column in ("id", "type", "model", "depends_on"):
        table.add_column(column)
    for task in draft.get("tasks", []):
        payload = task.get("payload") if isinstance(task.get("payload"), dict) else {}
        model = task.get("model") or payload.get("model") or "-"
        table.add_row(
            escape(str(task.get("id"))), escape(str(task.get("type"))), escape(str(model)),
            escape(", ".join(map(str, task.get("depends_on") or [])) or "-"),
        )  # fmt: skip
    return table


def origin_line(goal: dict[str, Any]) -> str:
    """Where the draft came from, shown before the question: a draft from a worker the
    brain does not trust runs untrusted (no shell task), and the approver should know."""
    origin = goal.get("draft_origin") or {}
    if not origin:
        return "drafted by: unknown (a goal drafted before origins were recorded)"
    trust = "trusted" if origin.get("trusted") else "UNTRUSTED: its tasks run untrusted"
    rig = origin.get("rig") or "?"
    return f"drafted by worker {origin.get('worker') or '?'} on rig {rig} ({trust})"


def problems_table(errors: list[dict[str, Any]]) -> Table:
    table = Table(title="the validator's last errors")
    for column in ("task", "field", "problem"):
        table.add_column(column)
    for error in errors:
        table.add_row(
            escape(str(error.get("task") or "-")), escape(str(error.get("field"))),
            escape(str(error.get("message"))),
        )  # fmt: skip
    return table


def _progress(goal: dict[str, Any]) -> str:
    task = goal.get("drafting_task") or {}
    state, attempt = task.get("state", "?"), task.get("attempt", 0)
    again = " (asking again with the validator's errors)" if attempt > 1 or goal["errors"] else ""
    return f"goal {goal['id']}: the brain's model is drafting a plan · {state}{again}"


# The drafting task's failures that no rewording fixes (executors/ollama_common.py)
NOT_PULLED = "model_not_found"
MODEL_DOWN = ("service_unavailable", "service_unreachable", "timeout", "oom")


def failure(goal: dict[str, Any], planner_model: str = "") -> AirigError:
    """Why no plan was drafted, and the fix that fits: a model that is not pulled is
    named with the setting that provisions it; only an invalid draft asks to reword."""
    task = goal.get("drafting_task") or {}
    kind = task.get("error_type") or ""
    model = task.get("model") or planner_model or "AIRIG_PLANNER_MODEL"
    stopped = f"goal {goal['id']} is {goal['state']}: no plan was drafted"
    if kind == NOT_PULLED:
        return AirigError(
            f"{stopped}: the brain's model {model} is not on its Ollama",
            f"add {model} to AIRIG_OLLAMA_MODELS in .env and run `up` (it pulls it), or "
            "set AIRIG_PLANNER_MODEL to a model AIRIG_OLLAMA_MODELS lists; then submit again",
        )
    if kind in MODEL_DOWN:
        return AirigError(
            f"{stopped}: the brain's model {model} did not answer ({kind})",
            "see `status` and `triage`, then submit the goal again",
        )
    invalid = any(e.get("field") != "draft" for e in goal.get("errors") or [])
    if invalid or kind in ("", "invalid_plan"):
        return AirigError(
            stopped, "reword the goal, or write the plan yourself and `submit plan.yaml`"
        )
    return AirigError(
        f"{stopped}: the drafting task failed ({kind})",
        f"see `plan {goal.get('drafting_plan_id')} draft`, then submit the goal again",
    )


def wait_for_draft(client: BrainClient, goal_id: str, interval_s: float) -> dict[str, Any]:
    goal = client.goal(goal_id)
    with Status(escape(_progress(goal)), console=console) as status:
        while goal["state"] == "drafting":
            time.sleep(interval_s)
            goal = client.goal(goal_id)
            status.update(escape(_progress(goal)))
    return goal


def run(
    client: BrainClient,
    text: str,
    inputs_dir: str | None,
    yes: bool,
    watch_plan: bool,
    watch: Callable[[BrainClient, str], dict[str, Any]],
    interval_s: float = 1.0,
    planner_model: str = "",
) -> None:
    """``planner_model``: this checkout's AIRIG_PLANNER_MODEL, named when the brain's
    drafting task had no model to say."""
    goal = client.create_goal(text, inputs_dir)
    console.print(f"goal [bold]{escape(goal['id'])}[/] submitted; nothing runs before you approve")
    goal = wait_for_draft(client, goal["id"], interval_s)
    if goal["state"] != "awaiting_approval":
        if goal["errors"]:
            console.print(problems_table(goal["errors"]))
        raise failure(goal, planner_model)
    console.print(draft_table(goal))
    console.print(escape(origin_line(goal)))
    if not yes and not typer.confirm("Run this plan?", default=False):
        client.reject_goal(goal["id"])
        console.print(f"goal {escape(goal['id'])} rejected; nothing ran")
        raise typer.Exit(1)
    plan_id = client.approve_goal(goal["id"])["plan_id"]
    console.print(f"plan [bold]{escape(plan_id)}[/] submitted from goal {escape(goal['id'])}")
    if watch_plan and watch(client, plan_id)["status"] != "succeeded":
        raise typer.Exit(1)
