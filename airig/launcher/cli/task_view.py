"""`plan ID TASK`: one task whole (its error unshortened) and what it produced.

Everything here comes from the brain, so it is printed as text, never as rich markup;
long lines wrap at the terminal's width rather than being cut.
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape

from airig.launcher.console import console

FIELDS = (
    "type", "task_class", "state", "attempt", "worker_id", "model", "error_type", "reused_from",
)  # fmt: skip


def show(task: dict[str, Any], result: dict[str, Any] | None) -> None:
    """The task's fields, its error or reason, then its output (a SUCCEEDED task's)."""
    console.print(f"[bold]task {escape(str(task['id']))}[/]")
    for field in FIELDS:
        if task.get(field) not in (None, ""):
            console.print(f"  {field}: {escape(str(task[field]))}", highlight=False)
    for field in ("error", "reason"):
        if task.get(field):
            console.print(f"[bold]{field}[/]")
            _text(str(task[field]))
    if result is None:
        console.print(f"[dim]no output: the task is {escape(str(task['state']))}[/]")
        return
    output = result.get("output") or {}
    console.print("[bold]output[/]" if output else "[dim]no output fields[/]")
    for key, value in output.items():
        console.print(f"[cyan]── {escape(str(key))}[/]")
        # text (an LLM's answer, a transcript) as it is; anything else as JSON
        _text(value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False))
    for name in result.get("files") or []:
        console.print(f"  file: {escape(str(name))}", highlight=False)


def _text(text: str) -> None:
    console.print(text, markup=False, highlight=False, overflow="fold")
