"""`report [--since 7d] [--by day|week] [--json] [--routing]`: is the kit improving?

Asks the brain's ``GET /v1/report`` (BRAIN_ADMIN_TOKEN) for its history per day or week
(tasks done and failed by type and model, retries, median and p90 run times, model loads
and swap time, escalations with cost, alerts fired) and puts beside it what changed on
this host in the same window, which the brain never sees: each `tune` (``.airig/tuning.log``)
and `update` / rollback / image lock (``.airig/update.log``), and each model the report
shows running for the first time after its first day. ``--json`` prints the brain's answer
as it came with one key added, ``changes``.

``--routing`` asks ``GET /v1/report/routing`` instead: rules a person may apply (which
model or tier a kind of task should go to), each with its evidence; a brain from before
that route says so in one line.

Model names, alert kinds and log words were written by plans, workers and the host:
every text is printed as plain text on one line (``search.printable``), never markup.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from airig.common import durations
from airig.common.errors import AirigError
from airig.launcher.brain_client import BrainClient
from airig.launcher.cli.search import printable
from airig.launcher.console import console
from airig.launcher.settings import Settings

BY = ("day", "week")
LOGS = ("tuning.log", "update.log")
MAX_LOG_BYTES = 16 * 1024 * 1024  # a log past this is read from its last 16 MiB
MAX_CHANGES = 1000
NAME_SHOWN = 80
Json = dict[str, Any]


def register(app: typer.Typer, settings_of: Callable[[], Settings]) -> None:
    @app.command()
    def report(
        since: Annotated[
            str | None,
            typer.Option(
                "--since", help="How far back: 12h, 7d (the default), 4w; clamped to retention."
            ),
        ] = None,
        by: Annotated[str, typer.Option("--by", help="One row per day or week.")] = "day",
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = (
            False
        ),
        routing: Annotated[
            bool, typer.Option("--routing", help="Print the routing advice with its evidence.")
        ] = False,
    ) -> None:
        """Is the kit improving? Tasks done and failed, retries, run times, model loads,
        escalations and alerts per day or week, beside each tune and image update."""
        settings = settings_of()
        if routing:  # the brain's own default window (30 days) unless --since says one
            if since is not None:
                check(since, by)
            advice = BrainClient.from_settings(settings).routing_advice(since)
            if advice is None:
                console.print(
                    "the brain predates routing advice (no GET /v1/report/routing): "
                    "`update` the kit's image, then ask again",
                    markup=False,
                )
                raise typer.Exit(1)
            if as_json:
                console.print_json(json.dumps(advice), ensure_ascii=True)
            else:
                console.print(rules_table(advice))
            return
        since = since or "7d"
        check(since, by)
        answer = BrainClient.from_settings(settings).report(since, by)
        merged = {**answer, "changes": changes(settings.state_dir, answer)}
        if as_json:
            # non-ASCII as \\uXXXX: the same JSON, and no bidirectional override reaches the
            # terminal
            console.print_json(json.dumps(merged), ensure_ascii=True)
            return
        for table in tables(merged):
            console.print(table)


def check(since: str, by: str) -> None:
    """Bad input is one AirigError (exit 1), no request made. A duration past the kit's
    bound is the brain's to clamp (retention) or refuse (its bucket bound), as it does
    for the same text from the dashboard."""
    durations.clamped(since, "--since")
    if by not in BY:
        raise AirigError(f"--by {printable(by, 20)!r} is not day or week", "--by day or --by week")


# ------------------------------------------------------------------ the host's changes
def changes(state_dir: Path, answer: Json) -> list[Json]:
    """What changed in the report's window, oldest first: the host's tune and update
    log lines, and each model the report shows for the first time after its first
    bucket with work. Unreadable lines are skipped; at most ``MAX_CHANGES``."""
    since, until = float(answer["since"]), float(answer["until"])
    found = [c for c in _logged(state_dir) if since <= c["time"] <= until]
    found += _new_models(answer)
    found.sort(key=lambda c: (c["time"], c["kind"], c["what"]))
    return found[-MAX_CHANGES:]


def _logged(state_dir: Path) -> Iterator[Json]:
    for name in LOGS:
        for entry in _lines(state_dir / name):
            change = _change(name, entry)
            if change is not None:
                yield change


def _lines(path: Path) -> Iterator[Json]:
    """The JSON objects of a log file, its last ``MAX_LOG_BYTES`` at most; a missing or
    unreadable file is none, a line that is no JSON object is skipped."""
    try:
        with path.open("rb") as log:
            size = log.seek(0, 2)
            log.seek(max(0, size - MAX_LOG_BYTES))
            data = log.read(MAX_LOG_BYTES)
    except OSError:
        return
    for raw in data.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:  # a torn or foreign line (UnicodeDecodeError is one too)
            continue
        if isinstance(entry, dict):
            yield entry


def _change(log: str, entry: Json) -> Json | None:
    when = _time(entry.get("time"))
    if when is None:
        return None
    if log == "tuning.log":
        kind = "rollback" if entry.get("rollback_of") else "tune"
        what = f"{entry.get('knob')} {entry.get('before')} -> {entry.get('after')}"
        ok = entry.get("healthy")
    else:
        kind = str(entry.get("action") or "update")
        moved = entry.get("to")
        target: Json = moved if isinstance(moved, dict) else {}
        what = f"{entry.get('service')} -> {target.get('tag')}"
        ok = entry.get("ok")
    return {"time": when, "kind": printable(kind, 20), "what": printable(what, 200),
            "ok": ok if isinstance(ok, bool) else None}  # fmt: skip


def _time(value: Any) -> float | None:
    """A log line's ISO 8601 time (``2026-11-29T13:00:00+00:00``) as seconds, or None."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.timestamp() if parsed.tzinfo is not None else None


def _new_models(answer: Json) -> list[Json]:
    seen: set[str] = set()
    found: list[Json] = []
    first = True
    for bucket in answer.get("buckets", []):
        models = {row["model"] for row in bucket.get("tasks", []) if row.get("model")}
        if not first:
            found += [
                {"time": float(bucket["start"]), "kind": "model",
                 "what": f"{printable(m, NAME_SHOWN)} first ran", "ok": None}
                for m in sorted(models - seen)
            ]  # fmt: skip
        seen |= models
        first = first and not bucket.get("tasks")
    return found


# ------------------------------------------------------------------ tables
def tables(report: Json) -> list[Any]:
    head = Text(
        f"{report['by']}s from {_day(report['since'])} to {_day(report['until'])} (UTC)"
        + (f"; since clamped to retention ({report['retention_days']} days)"
           if report.get("clamped") else "")
        + (f"; cut at the row limit: {', '.join(report['truncated'])}"
           if report.get("truncated") else "")
    )  # fmt: skip
    return [head, tasks_table(report), bucket_table(report)]


def tasks_table(report: Json) -> Table:
    table = Table(title="tasks", title_justify="left")
    for column in ("", "type", "model", "done", "failed", "retries", "p50 s", "p90 s"):
        table.add_column(column, justify="left" if column in ("", "type", "model") else "right")
    for bucket in report["buckets"]:
        for row in bucket["tasks"]:
            table.add_row(
                Text(bucket["label"]), Text(printable(row["type"], 40)),
                Text(printable(row["model"], NAME_SHOWN) or "-"), str(row["done"]),
                str(row["failed"]), str(row["retries"]), _fig(row["run_p50_s"]),
                _fig(row["run_p90_s"]),
            )  # fmt: skip
    return table


def bucket_table(report: Json) -> Table:
    table = Table(title="loads, escalations, alerts and changes", title_justify="left")
    for column in ("", "loads", "swap s", "escalations", "cost", "alerts", "changes"):
        table.add_column(column, justify="left" if column in ("", "changes") else "right")
    changed = report.get("changes", [])
    for bucket in report["buckets"]:
        start = float(bucket["start"])
        end = start + (86_400.0 if report["by"] == "day" else 604_800.0)
        here = [c for c in changed if start <= c["time"] < end]
        table.add_row(
            Text(bucket["label"]),
            str(sum(row["loads"] for row in bucket["loads"])),
            _fig(sum(row["swap_s"] or 0 for row in bucket["loads"])),
            str(sum(row["escalations"] for row in bucket["escalations"])),
            f"{sum(row['cost'] for row in bucket['escalations']):.2f}",
            Text(", ".join(f"{printable(a['alert'], 40)} ×{a['fired']}" for a in bucket["alerts"])),
            Text("; ".join(f"{c['kind']}: {c['what']}" for c in here)),
        )
    return table


def rules_table(advice: Json) -> Table:
    table = Table(title="routing advice (apply a rule by editing the plan)", title_justify="left")
    table.add_column("rule")
    table.add_column("evidence")
    for rule in advice.get("rules", []):
        evidence = json.dumps(rule.get("evidence", {}), sort_keys=True, ensure_ascii=True)
        table.add_row(Text(printable(rule.get("rule"), 300)), Text(printable(evidence, 300)))
    if not advice.get("rules"):
        table.add_row(Text("no rule: no task failed small and succeeded larger"), Text(""))
    return table


def _fig(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _day(seconds: float) -> str:
    return datetime.fromtimestamp(float(seconds), UTC).strftime("%Y-%m-%d %H:%M")
