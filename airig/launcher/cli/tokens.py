"""`token create | list | revoke`: the brain's stored tokens, from the brain's machine.

A join token is what a second rig needs (`join --brain URL --token T`); `create` prints
it once, with the exact command to run over there. It carries the rig's trust level:
`untrusted` (the default: its workers get no sensitive task and their output is tainted)
or `full` (as this machine's own workers). Revoking it cuts that rig off: its workers'
tokens stop working too. The CLI talks to this machine's brain with
BRAIN_ADMIN_TOKEN from .env; on a joined rig the tokens live on the brain's machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from airig.common.errors import ConfigError
from airig.launcher.brain_client import BrainClient
from airig.launcher.console import console
from airig.launcher.settings import Settings

SCOPES = ("join", "submit", "metrics", "admin")
TRUST_LEVELS = ("untrusted", "full")  # a join token's; the first is the default


def build_tokens_app(settings_of: Callable[[], Settings]) -> typer.Typer:
    app = typer.Typer(help="Create, list and revoke the brain's tokens (join tokens for rigs).")

    @app.command("create")
    def create(
        join: Annotated[bool, typer.Option("--join", help="A token for a second rig.")] = False,
        scope: Annotated[
            str | None, typer.Option("--scope", help="join | submit | metrics | admin")
        ] = None,
        name: Annotated[str, typer.Option("--name", help="What it is for (shown in list).")] = "",
        trust: Annotated[
            str | None,
            typer.Option(
                "--trust",
                help="A join token's rig: untrusted (default: no sensitive task, its output "
                "tainted) | full (as this machine's own workers).",
            ),
        ] = None,
    ) -> None:
        """Create a token and print it once (with the join command for --join)."""
        settings = settings_of()
        chosen = _scope(join, scope)
        level = _trust(chosen, trust)
        made = _client(settings).create_token(chosen, name or chosen, level)
        trusted = f", trust {escape(made['trust'])}" if made.get("trust") else ""
        console.print(
            f"{escape(made['scope'])} token [bold]{escape(made['name'])}[/] "
            f"(id {escape(made['id'])}{trusted}), shown once:"
        )
        console.print(f"  {made['token']}", markup=False, highlight=False, soft_wrap=True)
        if chosen == "join":
            _print_join(settings, made)

    @app.command("list")
    def list_() -> None:
        """Every stored token: id, scope, name, dates (never the token)."""
        console.print(tokens_table(_client(settings_of()).tokens()))

    @app.command("revoke")
    def revoke(token_id: Annotated[str, typer.Argument(help="The id from `token list`.")]) -> None:
        """Revoke a token; a join token's workers are cut off with it."""
        done = _client(settings_of()).revoke_token(token_id)
        state = "revoked" if done["revoked_now"] else "was already revoked"
        console.print(f"Token {escape(done['id'])} ({escape(done['scope'])}) {state}.")
        if done["workers_revoked"]:
            names = escape(", ".join(done["workers_revoked"]))
            console.print(f"  Workers cut off (their tasks go back to the queue): {names}")

    return app


def _scope(join: bool, scope: str | None) -> str:
    if join and scope not in (None, "join"):
        raise ConfigError("--join and --scope disagree", "give one of them")
    chosen = "join" if join else scope
    if chosen not in SCOPES:
        raise ConfigError(
            f"say what the token is for (got --scope {chosen!r})"
            if chosen
            else "say what the token is for",
            "--join (a second rig), or --scope submit | metrics | admin",
        )
    return chosen


def _trust(scope: str, trust: str | None) -> str | None:
    if trust is None:
        return TRUST_LEVELS[0] if scope == "join" else None
    if scope != "join":
        raise ConfigError(f"--trust is for join tokens, not {scope}", "leave --trust out")
    if trust not in TRUST_LEVELS:
        raise ConfigError(
            f"--trust {trust!r} is not a trust level", "--trust untrusted (default) or full"
        )
    return trust


def _client(settings: Settings) -> BrainClient:
    if settings.joined:
        raise ConfigError(
            f"this rig joined the brain at {settings.join_brain_url}: its tokens are kept there",
            "run the token commands on the brain's machine",
        )
    return BrainClient.from_settings(settings)


def _print_join(settings: Settings, made: dict[str, Any]) -> None:
    from airig.launcher.lifecycle.join import join_command

    command, warnings = join_command(settings, made["token"])
    console.print("On the other machine, in its airig folder, run:")
    console.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)
    for warning in warnings:
        console.print(f"  [yellow]⚠ {escape(warning)}[/]", soft_wrap=True)
    console.print(f"Revoke it with: python start_services.py token revoke {escape(made['id'])}")


def tokens_table(tokens: list[dict[str, Any]]) -> Table:
    table = Table(title="tokens")
    for column in ("id", "scope", "name", "trust", "created", "revoked"):
        table.add_column(column)
    for t in tokens:
        revoked = _when(t["revoked_at"]) if t.get("revoked") else ""
        table.add_row(
            escape(t["id"]), escape(t["scope"]), escape(t["name"]), escape(t.get("trust") or ""),
            _when(t["created_at"]), f"[red]{revoked}[/]" if revoked else "",
        )  # fmt: skip
    return table


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else ""
