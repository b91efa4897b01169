"""``python start_services.py triage [SERVICE] [--json] [--since 1h]``: what is wrong with
the running kit, and the evidence. Exit 0 when nothing is, 1 when something is."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from airig.launcher.console import console


def register(app: typer.Typer) -> None:
    app.command()(triage)


def triage(
    service: Annotated[
        str | None,
        typer.Argument(help="Only this service: whisper (its active variant), ollama-cpu, brain …"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    since: Annotated[
        str, typer.Option("--since", help="How far back to read restarts: 90s, 30m, 1h, 2d.")
    ] = "1h",
    verify: Annotated[
        bool, typer.Option("--verify/--no-verify", help="Also run `models verify` (slower).")
    ] = True,
) -> None:
    """Sort what is wrong into classes (crash, stop, flapping, OOM, CPU fallback, models,
    agents, the brain's alerts), each with its evidence, the first action, a check and the
    rollback."""
    from airig.launcher.compose.docker import Docker
    from airig.launcher.settings import checkout_settings
    from airig.launcher.views.triage import classify
    from airig.launcher.views.triage.backend import backends
    from airig.launcher.views.triage.collect import collect, parse_since
    from airig.launcher.views.triage.render import as_data, show

    since_s = parse_since(since)
    facts = collect(checkout_settings(), Docker(), service, since_s, verify)
    findings = classify(facts)
    used = backends(facts.containers)  # what each compute container got from Docker
    if as_json:
        print(json.dumps(as_data(findings, used), indent=2, default=str))
    else:
        show(findings, console, used)
    if findings:
        raise typer.Exit(1)
