"""`restart SERVICE` and `tune KNOB=VALUE | --rollback | --log`: acting the way the
compute runbook says (one service at a time; concurrency, then memory, then offload).

The launcher mounts them on its main app with ``register(app)``; they raise AirigError
and the app's edge prints it (a refused knob exits 2).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from airig.common.errors import AirigError
from airig.launcher.compose.docker import Docker
from airig.launcher.compose.plan import StackPlan, plan_for_running
from airig.launcher.console import console, err_console
from airig.launcher.lifecycle.restart import (
    ComposeServices,
    outcome_line,
    restart_one,
    wait_healthy,
)
from airig.launcher.lifecycle.tune import (
    Change,
    KnobError,
    apply,
    log_path,
    plan_change,
    read_log,
    rollback_change,
)
from airig.launcher.settings import Settings, checkout_settings


def restart(
    service: Annotated[str, typer.Argument(help="e.g. ollama (its active variant), brain")],
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for health.")] = 180,
) -> None:
    """Restart one service in its stack, wait until it is healthy, and say so."""
    settings = checkout_settings()
    outcome = restart_one(
        plan_for_running(settings), ComposeServices(Docker()), service, False, timeout
    )
    console.print(outcome_line(outcome))
    if not outcome.healthy:
        raise typer.Exit(1)


def tune(
    assignment: Annotated[
        str | None, typer.Argument(metavar="KNOB=VALUE", help="e.g. OLLAMA_CONTEXT_LENGTH=4096")
    ] = None,
    why: Annotated[str, typer.Option("--why", help="The reason, kept in the log.")] = "",
    rollback: Annotated[
        bool, typer.Option("--rollback", help="Undo the last change not yet undone.")
    ] = False,
    show_log: Annotated[bool, typer.Option("--log", help="Show the tuning history.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --log: print JSON.")] = False,
) -> None:
    """Change one runtime knob in .env and recreate only the services that use it."""
    settings = checkout_settings()
    if sum([assignment is not None, rollback, show_log]) != 1:
        raise KnobError(
            "give exactly one of KNOB=VALUE, --rollback, --log",
            "e.g. tune AIRIG_CPU_WORKERS=1 --why 'OOM under load'",
        )
    if show_log:
        _show_log(read_log(log_path(settings)), as_json)
        return
    plan = plan_for_running(settings)
    if rollback:
        change, undone = rollback_change(settings, plan)
        why = why or f"rollback of change {undone}"
    else:
        change, undone = plan_change(settings, plan, assignment or ""), None
        if change.before == change.after:
            console.print(f"{escape(change.knob)} is already {escape(change.after)}: nothing to do")
            return
    if change.warning:
        err_console.print(f"[yellow]⚠ {escape(change.warning)}[/]", soft_wrap=True)
    entry = apply(settings, change, why, _restarter(), lambda: _triage_summary(settings), undone)
    _say(change, entry)
    if not entry["healthy"]:
        raise typer.Exit(1)


def _restarter() -> Any:
    services = ComposeServices(Docker())

    def restart_and_wait(stack: StackPlan, name: str) -> bool:
        running = {s.service for s in services.services(stack)}
        if name not in running:
            return True  # not running here: it reads .env when it next starts
        services.restart(stack, name, recreate=True)
        outcome = wait_healthy(services, stack, name)
        console.print(outcome_line(outcome))
        return outcome.healthy

    return restart_and_wait


def _say(change: Change, entry: dict[str, Any]) -> None:
    what = f"{change.knob}: {change.before or '(unset)'} → {change.after}"
    where = ", ".join(entry["services"]) or "no service uses it (read at the next up)"
    console.print(f"{escape(what)} (recreated: {escape(where)}); logged as change {entry['id']}")


def _show_log(entries: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(entries, indent=2))
        return
    if not entries:
        console.print("No tuning yet: tune KNOB=VALUE --why TEXT")
        return
    table = Table(title="tuning log (.airig/tuning.log)")
    for column in ("id", "time", "knob", "before", "after", "why", "healthy", "triage"):
        table.add_column(column, overflow="fold")  # wrapped, never cut (80 columns)
    for e in entries:
        undo = f" (rollback of {e['rollback_of']})" if e.get("rollback_of") else ""
        triage = f"{e.get('triage_before') or '-'} → {e.get('triage_after') or '-'}"
        row = [e.get("id"), e.get("time"), e.get("knob"), e.get("before"), e.get("after")]
        row += [f"{e.get('why', '')}{undo}", "yes" if e.get("healthy") else "no", triage]
        table.add_row(*(escape(str(v)) for v in row))
    console.print(table)


TRIAGE_SINCE_S = 3600.0  # triage's own default window (--since 1h)


def _triage_summary(settings: Settings) -> str | None:
    """One line of what `triage` finds now (no `models verify`: too slow here); None when
    triage itself cannot run."""
    try:
        from airig.launcher.views.triage import classify
        from airig.launcher.views.triage.collect import collect

        findings = classify(collect(settings, Docker(), None, TRIAGE_SINCE_S, False))
    except (ImportError, AirigError):
        return None
    if not findings:
        return "no findings"
    return f"{len(findings)}: " + "; ".join(f"{f.cls} ({f.service})" for f in findings)


def register(app: typer.Typer) -> None:
    """Add `restart` and `tune` to the launcher's app as top-level commands."""
    app.command()(restart)
    app.command()(tune)
