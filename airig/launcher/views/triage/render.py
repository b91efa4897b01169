"""Findings for people (one block each) and as JSON (the same, as data), after the backend
each compute service runs on (``backend.py``): the first thing to know when a model is slow."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape

from airig.launcher.views.triage.backend import ServiceBackend
from airig.launcher.views.triage.facts import Finding

HEALTHY = "✔ nothing wrong: every service runs, no restarts, models and workers as expected"
BACKENDS = "backends (what each compute container got from Docker):"


def as_data(findings: list[Finding], used: Sequence[ServiceBackend] = ()) -> dict[str, Any]:
    return {
        "healthy": not findings,
        "backends": [b.to_dict() for b in used],
        "findings": [f.to_dict() for f in findings],
    }


def show(findings: list[Finding], console: Console, used: Sequence[ServiceBackend] = ()) -> None:
    if used:
        console.print(BACKENDS, highlight=False)
        for b in used:
            console.print(f"  {escape(b.line())}", highlight=False, soft_wrap=True)
    if not findings:
        console.print(f"[green]{HEALTHY}[/]")
        return
    for n, f in enumerate(findings, 1):
        console.print(f"[red]✘ {n}. {escape(f'[{f.cls}]')}[/] {escape(f.summary)}", soft_wrap=True)
        for line in f.evidence:
            console.print(f"    evidence: {escape(line)}", highlight=False, soft_wrap=True)
        console.print(f"    [yellow]→ action:[/] {escape(f.action)}", soft_wrap=True)
        console.print(f"    check: {escape(f.check)}", soft_wrap=True)
        console.print(f"    rollback: {escape(f.rollback)}", soft_wrap=True)
