"""Turn the init containers' JSON event lines into rich progress bars and a summary table.

The launcher feeds this the output of ``docker compose logs -f`` / ``compose run``
(lines may carry compose's ``service-1  | `` prefix); anything that is not an event is
skipped. Pass your own ``Console`` to capture the output in tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from rich.console import Console
from rich.filesize import decimal
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

_COMPOSE_PREFIX = re.compile(r"^[\w.-]+\s*\|\s?")


@dataclass
class ModelRow:
    service: str
    model: str
    size: int | None = None
    verified: bool = False
    cached: bool = False
    error: str | None = None
    configured: bool | None = None
    present: bool | None = None


@dataclass
class Summary:
    """What the events said, per (service, model); ``ok`` when nothing failed."""

    rows: dict[tuple[str, str], ModelRow] = field(default_factory=dict)

    @property
    def failed(self) -> list[ModelRow]:
        return [row for row in self.rows.values() if row.error is not None]

    @property
    def ok(self) -> bool:
        return not self.failed

    def row(self, service: str, model: str) -> ModelRow:
        return self.rows.setdefault((service, model), ModelRow(service, model))


def parse_event(line: str | bytes) -> dict | None:
    """The event in one log line, or None when the line is something else."""
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = _COMPOSE_PREFIX.sub("", text.strip(), count=1)
    if not text.startswith("{"):
        return None
    try:
        event = json.loads(text)
    except ValueError:
        return None
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        return None
    return event


def _progress_bars(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.fields[service]}[/] {task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def _apply(event: dict, summary: Summary, bars: Progress, tasks: dict) -> None:
    service, model = str(event.get("service")), str(event.get("model") or "-")
    key, kind = (service, model), event["event"]
    if kind == "load_proof":
        return  # not a model's row: `up` says a failed load itself (launcher/proofs/host.py)
    if kind == "progress":
        total, completed = event.get("total"), event.get("completed") or 0
        if key not in tasks:
            # Start at the first figure: a resumed pull must not show a burst of speed.
            tasks[key] = bars.add_task(
                escape(model), total=total, completed=completed, service=escape(service)
            )
        bars.update(tasks[key], completed=completed, total=total)
        return
    row = summary.row(service, model)
    if kind == "verified":
        row.size, row.verified, row.cached = event.get("size"), True, bool(event.get("cached"))
        if key in tasks:
            task: TaskID = tasks[key]
            bars.update(task, total=row.size, completed=row.size)
    elif kind == "failed":
        row.error = str(event.get("error"))
        if key in tasks:
            bars.update(tasks[key], description=f"[red]{escape(model)} ✘")
    elif kind == "listed":
        row.size, row.configured, row.present = (
            event.get("size"),
            bool(event.get("configured")),
            bool(event.get("present")),
        )


def summary_table(summary: Summary) -> Table:
    listing = any(row.present is not None for row in summary.rows.values())
    table = Table(title="models")
    for column in ("service", "model", "size", "configured" if listing else "verified"):
        table.add_column(column, justify="right" if column == "size" else "left")
    for row in summary.rows.values():
        size = decimal(row.size) if row.size is not None else "-"
        table.add_row(escape(row.service), escape(row.model), size, _status(row, listing))
    return table


def _status(row: ModelRow, listing: bool) -> str:
    if row.error is not None:
        return f"[red]✘ {escape(row.error)}[/]"
    if listing:
        where = "on disk" if row.present else "[yellow]not pulled[/]"
        return f"{'yes' if row.configured else 'no'}, {where}"
    return "[green]✔[/] (cached)" if row.cached else "[green]✔[/]"


def render(lines: Iterable[str | bytes], console: Console | None = None) -> Summary:
    """Show progress bars while ``lines`` flow, then the table; return what happened."""
    console = console or Console()
    summary = Summary()
    tasks: dict[tuple[str, str], TaskID] = {}
    with _progress_bars(console) as bars:
        for line in lines:
            event = parse_event(line)
            if event is not None:
                _apply(event, summary, bars, tasks)
    if summary.rows:
        console.print(summary_table(summary))
    return summary
