"""`migrate-store [--yes]`: the brain's SQLite store into the kit's PostgreSQL service
(``airig/launcher/lifecycle/store_move.py``). Failures are AirigError, printed by the
app's edge as one line and a hint."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from airig.launcher.compose.docker import Docker
from airig.launcher.console import console
from airig.launcher.settings import Settings, repo_root


def register(app: typer.Typer, settings_of: Callable[[], Settings],
             ensure_env: Callable[[Path], None]) -> None:  # fmt: skip
    @app.command("migrate-store")
    def migrate_store(
        yes: Annotated[
            bool,
            typer.Option(
                "--yes", "-y", help="Stop 03-agents (the brain and its workers) if it runs."
            ),
        ] = False,
    ) -> None:
        """Copy the brain's SQLite store into the kit's PostgreSQL service
        (AIRIG_BRAIN_STORE=postgres), before a brain starts on it; then run up."""
        from airig.launcher.lifecycle.store_move import move_store

        root = repo_root()
        if (root / ".env").is_file():  # no .env: the knob is sqlite, refused; none made
            ensure_env(root)  # POSTGRES_PASSWORD generated, as `up` would
        move_store(settings_of(), Docker(), _say, yes=yes)


def _say(line: str) -> None:
    # the copy's own lines are plain text: never read as markup
    console.print(line, markup=False, highlight=False, soft_wrap=True)
