"""CLI commands that talk to the brain: submit, plans, plan, cancel.

The launcher mounts them on its main app with ``register(app)`` so they are top-level
(`python start_services.py submit plan.md --watch`). They raise AirigError; the main
app's edge prints it. Tokens never appear in any output. What the brain sends back
(names, task errors) is escaped: a "[/dev/dri]" in it is text, not rich markup.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from airig.common.errors import AirigError
from airig.common.protocol import TaskState as S
from airig.launcher import plan_inputs
from airig.launcher.brain_client import BrainClient, PlanRefused
from airig.launcher.cli import goal_flow, task_view
from airig.launcher.console import console
from airig.launcher.inputs_sync import files_url, is_host_path, sync
from airig.launcher.settings import Settings, checkout_settings

STATE_STYLE = {
    S.SUCCEEDED: "green",
    S.RUNNING: "cyan",
    S.LEASED: "cyan",
    S.READY: "white",
    S.PENDING: "dim",
    S.RETRY_WAIT: "yellow",
    S.ESCALATED: "bright_cyan",  # waiting for the external tier
    S.FAILED: "red",
    S.UPSTREAM_FAILED: "red",
    S.CANCELLED: "magenta",
    "PARTIAL": "yellow",  # a group that ended with some items failed
}


def group_state(group: dict[str, Any], fan: dict[str, Any], items: list[dict[str, Any]]) -> str:
    """A fan-out group's row: PARTIAL when it ended with failed items (the brain's group
    task succeeds, its output listing them), RUNNING once one of its items has left
    PENDING (the group task itself stays PENDING until they have all ended)."""
    state = str(group["state"])
    if state == S.SUCCEEDED and fan.get("failed"):
        return "PARTIAL"
    started = fan.get("running") or fan.get("done") or fan.get("failed")
    if state in (S.PENDING, S.READY) and (started or any(t["state"] != S.PENDING for t in items)):
        return S.RUNNING
    return state


def tasks_table(plan: dict[str, Any]) -> Table:
    """Every task; a long error wraps (folded mid-word where it has no space), never cut:
    `plan ID TASK` shows one task whole, with its output."""
    table = Table(title=escape(f"plan {plan['id']} · {plan['name']} · {plan['status']}"))
    for column in ("task", "type", "class", "state", "attempt", "worker"):
        table.add_column(column, overflow="fold")
    table.add_column("note", overflow="fold", ratio=1, min_width=20)
    fanouts = {fan["id"]: fan for fan in plan.get("fanouts") or []}
    members: dict[str, list[dict[str, Any]]] = {}
    for task in plan.get("tasks", []):
        if task.get("group"):
            members.setdefault(task["group"], []).append(task)
    for task in plan.get("tasks", []):
        if task.get("group"):  # a fan-out item's task: its group's line counts it
            continue
        state = str(task["state"])
        note = task.get("error") or task.get("reason") or ""
        if task["id"] in fanouts:
            fan = fanouts[task["id"]]
            state = group_state(task, fan, members.get(task["id"], []))
            note = " · ".join(filter(None, [fanout_progress(fan), reused_note(fan), note]))
        style = STATE_STYLE.get(state, "white")
        table.add_row(
            escape(task["id"]), escape(task["type"]), escape(task["task_class"]),
            f"[{style}]{escape(state)}[/]", str(task["attempt"]),
            escape(task.get("worker_id") or ""), escape(note),
        )  # fmt: skip
    return table


PARTIAL_EXIT = 3


def failed_items(plan: dict[str, Any]) -> list[str]:
    """One line per failed fan-out item: the group, the item and its error."""
    lines = []
    for fan in plan.get("fanouts") or []:
        for item in fan.get("items", []):
            if item.get("state") == "failed":
                error = " ".join(str(item.get("error") or "failed").split())[:300]
                lines.append(f"{fan['id']}[{item['index']}] {item.get('label', '')}: {error}")
    return lines


def print_failed_items(plan: dict[str, Any]) -> None:
    """Under the table (`submit --watch`'s end, `plan ID`): each failed item and why."""
    for line in failed_items(plan):
        console.print(f"[red]✘[/] {escape(line)}")


def fanout_progress(fan: dict[str, Any]) -> str:
    """A fan-out group in one line: ``3 done / 2 running / 1 failed of 10``."""
    return (
        f"{fan['done']} done / {fan['running']} running / {fan['failed']} failed of {fan['total']}"
    )


def _since(fan: dict[str, Any]) -> str:
    sources = sorted(fan.get("reused_from") or {})
    return f"plan{'s' if len(sources) > 1 else ''} {', '.join(sources)}"


def reused_note(fan: dict[str, Any]) -> str:
    """``3 unchanged since plan abc``: the items an earlier plan left as they are, not run
    again (PLANS.md, "Unchanged items"); empty when there are none."""
    count = fan.get("reused") or 0
    return f"{count} unchanged since {_since(fan)}" if count else ""


def reused_lines(plan: dict[str, Any]) -> list[str]:
    """`submit`'s summary of each group with unchanged items: how many were skipped, since
    which plan, and how many run."""
    lines = []
    for fan in plan.get("fanouts") or []:
        count, total = fan.get("reused") or 0, fan.get("total") or 0
        if count:
            left = f"{total - count} to run" if total > count else "nothing to run"
            lines.append(f"{fan['id']}: {count} of {total} items unchanged since {_since(fan)}: "
                         f"skipped; {left} (--rerun runs every item)")  # fmt: skip
    return lines


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
    if not console.is_terminal:
        console.line()  # rich ends the last frame with a newline only on a terminal
    return plan


def submit(
    plan_file: Annotated[
        Path | None, typer.Argument(help="Plan file: .yaml, .json or .md (or use --goal)")
    ] = None,
    watch_plan: Annotated[bool, typer.Option("--watch", help="Follow the tasks live.")] = False,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Resubmitting returns the same plan.")
    ] = None,
    goal: Annotated[
        str | None,
        typer.Option("--goal", help="Let the brain's model draft the plan for this goal."),
    ] = None,
    inputs_dir: Annotated[
        str | None,
        typer.Option(
            "--inputs-dir",
            help="A folder of this machine (uploaded to the data volume, only what is not "
            "there yet) or a data-volume folder: fills the plan's {{ inputs_dir }}, or is "
            "shown to a --goal's model.",
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="With --goal: run the draft without asking.")
    ] = False,
    rerun: Annotated[
        bool,
        typer.Option(
            "--rerun",
            help="Run every item of the plan's globs, even those unchanged (same file, same "
            "recipe) since an earlier plan, whose outputs are otherwise reused.",
        ),
    ] = False,
) -> None:
    """Submit a plan to the brain, or a goal its model drafts a plan for (you approve it)."""
    if (plan_file is None) == (goal is None):
        raise typer.BadParameter("give PLAN_FILE or --goal TEXT (one of them)")
    if goal is None and yes:
        raise typer.BadParameter("--yes goes with --goal")
    if goal is not None and rerun:
        raise typer.BadParameter("--rerun goes with a plan file")
    if goal is not None and idempotency_key:
        raise typer.BadParameter("--idempotency-key goes with a plan file")
    settings = checkout_settings()
    client = BrainClient.from_settings(settings)
    body = plan_inputs.read_plan(plan_file) if plan_file is not None else None
    if body is not None and inputs_dir is None and plan_inputs.needs_inputs(body):
        raise AirigError(
            f"{plan_file} reads {{{{ inputs_dir }}}}: say which folder",
            f"python start_services.py submit {plan_file} --inputs-dir ~/my-folder",
        )
    if body is not None:  # a model this rig does not pull: refused before any upload
        body = plan_inputs.fill_models(body, settings, str(plan_file))
    data_dir = inputs_dir and _inputs_on_the_data_volume(inputs_dir, settings, body)
    if goal is not None:
        goal_flow.run(
            client, goal, data_dir, yes, watch_plan, watch,
            planner_model=settings.planner_model,
        )  # fmt: skip
        return
    assert plan_file is not None and body is not None  # checked above: exactly one of the two
    outputs = data_dir and plan_inputs.outputs_dir(plan_file, data_dir)
    if data_dir and outputs:
        body = plan_inputs.fill(body, data_dir, outputs)
    try:
        plan = client.submit_body(body, plan_file.suffix, idempotency_key, rerun)
    except PlanRefused as exc:
        if exc.errors:
            console.print(errors_table(exc.errors))
        raise
    for fix in plan.get("fixes", []):
        said = f"{fix['task']}.{fix['field']}: {fix['fix']} ({fix['reason']})"
        console.print(f"[yellow]fixed[/] {escape(said)}")
    console.print(f"plan [bold]{escape(plan['id'])}[/] submitted with {plan['task_total']} tasks")
    for line in reused_lines(plan):
        console.print(f"[green]=[/] {escape(line)}")
    if outputs and plan_inputs.writes_outputs(body, outputs):
        console.print(
            f"outputs go to the data volume's {escape(outputs)}/ "
            f"({escape(files_url(settings))}/{escape(outputs)}/)"
        )
    if watch_plan:
        final = watch(client, plan["id"])
        print_failed_items(final)
        if final["status"] == "partial":
            # Some items failed, the rest are done: not the 0 of a clean run, nor the 1
            # of a failed one, so a script can tell the three apart.
            raise typer.Exit(PARTIAL_EXIT)
        if final["status"] != "succeeded":
            raise typer.Exit(1)


def _inputs_on_the_data_volume(inputs_dir: str, settings: Settings, body: bytes | None) -> str:
    """The data-volume folder of --inputs-dir: a host folder is uploaded there first (and
    the files no glob of the plan reads are named)."""
    if not is_host_path(inputs_dir):
        return plan_inputs.data_relative(inputs_dir)
    synced = sync(Path(inputs_dir), settings)
    sent = f"{synced.sent_bytes / 1e6:.1f} MB" if synced.uploaded else "nothing"
    console.print(
        f"inputs: {len(synced.uploaded)} uploaded ({sent}), {len(synced.skipped)} already "
        f"there -> data volume {escape(synced.data_dir)}/"
    )
    left = body and plan_inputs.unmatched_line(body, [*synced.uploaded, *synced.skipped])
    if left:
        console.print(f"[yellow]![/] {escape(left)}")
    return synced.data_dir


def plans(
    prune: Annotated[
        bool, typer.Option("--prune", help="Delete finished plans (tasks, events, results).")
    ] = False,
    older_than: Annotated[
        float | None,
        typer.Option(
            "--older-than", parser=parse_age, metavar="AGE",
            help="With --prune: finished longer ago than this (7d, 12h, 30m); "
            "default AIRIG_RETENTION_DAYS.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --prune: say what would go, delete nothing.")
    ] = False,
) -> None:  # fmt: skip
    """List recent plans, or with --prune delete the finished ones past an age."""
    if not prune:
        if older_than is not None or dry_run:
            raise typer.BadParameter("--older-than and --dry-run go with --prune")
        console.print(plans_table(brain().plans()))
        return
    prune_plans(older_than, dry_run)


def plan(
    plan_id: Annotated[str, typer.Argument(help="Plan id")],
    task: Annotated[
        str | None, typer.Argument(help="A task id: show it whole, with its output.")
    ] = None,
) -> None:
    """Show one plan and its tasks, or one task whole with its output."""
    client = brain()
    shown = client.plan(plan_id)
    if task is None:
        console.print(tasks_table(shown))
        print_failed_items(shown)
        return
    one = next((t for t in shown.get("tasks", []) if t["id"] == task), None)
    if one is None:
        known = ", ".join(t["id"] for t in shown.get("tasks", [])[:20])
        raise typer.BadParameter(f"plan {plan_id} has no task {task!r} (its tasks: {known})")
    result = client.task_result(plan_id, task) if one["state"] == S.SUCCEEDED else None
    task_view.show(one, result)


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


# ------------------------------------------------------------------ plans --prune
AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
MAX_AGE_S = 100 * 365 * 86_400  # the brain's bound


def parse_age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``90s``, ``2w`` in seconds; a usage error otherwise."""
    found = AGE.match(text.strip().lower())
    if not found or float(found[1]) * UNIT_S[found[2]] > MAX_AGE_S:
        raise typer.BadParameter(
            f"{text!r} is not an age; write a number and a unit: 7d, 12h, 30m, 90s or 2w"
        )
    return float(found[1]) * UNIT_S[found[2]]


def size_text(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} GB"


def prune_plans(older_than_s: float | None, dry_run: bool) -> None:
    """Ask the brain to prune; the age defaults to this checkout's AIRIG_RETENTION_DAYS."""
    settings = checkout_settings()
    if older_than_s is None:
        if settings.retention_days == 0:
            raise typer.BadParameter(
                "AIRIG_RETENTION_DAYS is 0 (keep forever): give --older-than, e.g. 30d"
            )
        older_than_s = settings.retention_days * 86_400.0
    done = BrainClient.from_settings(settings).prune(older_than_s, dry_run)
    cutoff = time.strftime("%Y-%m-%d %H:%M", time.localtime(done["cutoff"]))
    counts = (
        f"{done['plans']} plan(s), {done['tasks']} task(s), {done['events']} event(s), "
        f"{size_text(done['result_bytes'])} of result files"
    )
    if dry_run:
        console.print(f"would remove {counts} (finished before {cutoff}); nothing deleted")
        return
    console.print(
        f"removed {counts}, {size_text(done['log_bytes'])} of old logs (finished before {cutoff})"
    )
    if done.get("skipped"):
        kept = ", ".join(done["skipped"][:5])
        console.print(f"[yellow]kept {len(done['skipped'])} plan(s) another table names: "
                      f"{escape(kept)}[/]")  # fmt: skip
