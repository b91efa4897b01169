"""CLI commands that talk to the brain: submit, plans, plan, cancel.

The launcher mounts them on its main app with ``register(app)`` so they are top-level
(`python start_services.py submit plan.md --watch`). They raise AirigError; the main
app's edge prints it. Tokens never appear in any output. What the brain sends back
(names, task errors) is escaped: a "[/dev/dri]" in it is text, not rich markup.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from airig.common.protocol import TaskState as S
from airig.launcher.brain_client import BrainClient, PlanRefused
from airig.launcher.console import console
from airig.launcher.settings import checkout_settings

STATE_STYLE = {
    S.SUCCEEDED: "green",
    S.RUNNING: "cyan",
    S.LEASED: "cyan",
    S.READY: "white",
    S.PENDING: "dim",
    S.RETRY_WAIT: "yellow",
    S.FAILED: "red",
    S.UPSTREAM_FAILED: "red",
    S.CANCELLED: "magenta",
}


def tasks_table(plan: dict[str, Any]) -> Table:
    table = Table(title=escape(f"plan {plan['id']} · {plan['name']} · {plan['status']}"))
    for column in ("task", "type", "class", "state", "attempt", "worker", "note"):
        table.add_column(column)
    for task in plan.get("tasks", []):
        style = STATE_STYLE.get(task["state"], "white")
        note = task.get("error") or task.get("reason") or ""
        table.add_row(
            escape(task["id"]), escape(task["type"]), escape(task["task_class"]),
            f"[{style}]{escape(task['state'])}[/]", str(task["attempt"]),
            escape(task.get("worker_id") or ""), escape(note[:60]),
        )  # fmt: skip
    return table


def plans_table(plans: list[dict[str, Any]]) -> Table:
    table = Table(title="plans")
    for column in ("id", "name", "status", "tasks", "states", "submitted"):
        table.add_column(column)
    for plan in plans:
        states = ", ".join(f"{k}={v}" for k, v in sorted(plan["counts"].items()))
        submitted = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(plan["created_at"]))
        table.add_row(
            escape(plan["id"]), escape(plan["name"]), escape(plan["status"]),
            str(plan["task_total"]), escape(states), submitted,
        )  # fmt: skip
    return table


def errors_table(errors: list[dict[str, Any]]) -> Table:
    table = Table(title="problems")
    for column in ("task", "field", "problem"):
        table.add_column(column)
    for error in errors:
        table.add_row(
            escape(str(error.get("task") or "-")), escape(str(error.get("field"))),
            escape(str(error["message"])),
        )  # fmt: skip
    return table


def brain() -> BrainClient:
    """The brain of this checkout (its settings: flag > environment > .env > default)."""
    return BrainClient.from_settings(checkout_settings())


def watch(client: BrainClient, plan_id: str, interval_s: float = 1.0) -> dict[str, Any]:
    """Redraw the task table until the plan is finished; the final plan."""
    plan = client.plan(plan_id)
    with Live(tasks_table(plan), console=console, refresh_per_second=4) as live:
        while plan["status"] == "running":
            time.sleep(interval_s)
            plan = client.plan(plan_id)
            live.update(tasks_table(plan))
    return plan


def submit(
    plan_file: Annotated[Path, typer.Argument(help="Plan file: .yaml, .json or .md")],
    watch_plan: Annotated[bool, typer.Option("--watch", help="Follow the tasks live.")] = False,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Resubmitting returns the same plan.")
    ] = None,
) -> None:
    """Submit a plan to the brain."""
    client = brain()
    try:
        plan = client.submit(plan_file, idempotency_key)
    except PlanRefused as exc:
        if exc.errors:
            console.print(errors_table(exc.errors))
        raise
    for fix in plan.get("fixes", []):
        said = f"{fix['task']}.{fix['field']}: {fix['fix']} ({fix['reason']})"
        console.print(f"[yellow]fixed[/] {escape(said)}")
    console.print(f"plan [bold]{escape(plan['id'])}[/] submitted with {plan['task_total']} tasks")
    if watch_plan:
        final = watch(client, plan["id"])
        if final["status"] != "succeeded":
            raise typer.Exit(1)


def plans() -> None:
    """List recent plans."""
    console.print(plans_table(brain().plans()))


def plan(plan_id: Annotated[str, typer.Argument(help="Plan id")]) -> None:
    """Show one plan and its tasks."""
    console.print(tasks_table(brain().plan(plan_id)))


def cancel(target: Annotated[str, typer.Argument(help="PLAN_ID, or PLAN_ID/TASK_ID")]) -> None:
    """Cancel a plan, or one task (its dependents fail as upstream-failed)."""
    cancelled = brain().cancel(target)["cancelled"]
    if isinstance(cancelled, bool):  # one task: True, or False when it had already finished
        console.print("task cancelled" if cancelled else "task had already finished")
    else:
        console.print(f"cancelled {cancelled} unfinished task(s)")


def register(app: typer.Typer) -> None:
    """Add the brain commands to the launcher's app as top-level commands."""
    app.command()(submit)
    app.command()(plans)
    app.command()(plan)
    app.command()(cancel)


app = typer.Typer(add_completion=False, help="Plans on the airig brain.")
register(app)
