"""`escalations`: what the external tier was asked, what it cost, and what waits for it.

Reads the brain's ``GET /v1/escalations`` with BRAIN_ADMIN_TOKEN: the spend today and
this month (UTC) against AIRIG_ESCALATION_BUDGET_DAILY / _MONTHLY, the tasks waiting in
ESCALATED with their reason (queued, over budget, rate limited, provider down), and the
latest calls with their tokens and cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from airig.launcher.brain_client import BrainClient
from airig.launcher.console import console
from airig.launcher.settings import Settings


def build_escalations_app(settings_of: Callable[[], Settings]) -> typer.Typer:
    app = typer.Typer(help="The external tier: calls, spend against the budgets, tasks waiting.")

    @app.callback(invoke_without_command=True)
    def show(
        limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Calls shown.")] = 20,
    ) -> None:
        """Spend against the budgets, the tasks waiting, the latest calls."""
        view = BrainClient.from_settings(settings_of()).escalations(limit)
        for line in summary(view):
            console.print(line, highlight=False)
        if view["waiting"]:
            console.print(waiting_table(view["waiting"]))
        console.print(calls_table(view["calls"]))

    return app


def summary(view: dict[str, Any]) -> list[str]:
    b = view["budget"]
    state = "on" if view["enabled"] else "off (nothing leaves the machine)"
    return [
        f"Escalation: [bold]{state}[/]; over budget: {escape(b['over_budget'])}; "
        f"limit {view['rate_per_min']} calls/min",
        f"Spent today (UTC): {b['spent_today']:.4f} of {b['daily']:.4f}; "
        f"this month: {b['spent_month']:.4f} of {b['monthly']:.4f}",
        f"Calls: {view['totals']['calls']} ({view['totals']['input_tokens']} tokens in, "
        f"{view['totals']['output_tokens']} out); waiting tasks: {len(view['waiting'])}",
    ]


def waiting_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="tasks waiting for the external tier")
    for column in ("plan", "task", "call", "reason"):
        table.add_column(column)
    for t in rows:
        table.add_row(
            escape(t["plan_id"]), escape(t["key"]), escape(t.get("call_state") or ""),
            escape(t.get("reason") or ""),
        )  # fmt: skip
    return table


def calls_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="calls (newest first)")
    for column in ("when", "task", "state", "outcome", "model", "in", "out", "cost", "error"):
        table.add_column(column)
    for c in rows:
        model = f"{c['provider']}/{c['model']}" if c.get("model") else ""
        table.add_row(
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c["created_at"])),
            escape(f"{c['plan_id']}/{c['task_key']}"), escape(c["state"]),
            escape(c.get("outcome") or ""), escape(model), str(c["input_tokens"]),
            str(c["output_tokens"]), f"{c['cost']:.4f}", escape((c.get("error") or "")[:80]),
        )  # fmt: skip
    return table
