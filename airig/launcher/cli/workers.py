"""`workers list | forget NAME`: the brain's workers, and forgetting one gone for good.

Workers keep their names across an `up` (`gpu0`, `cpu-1`: a Compose slot), so a name
left silent is a worker that no longer runs: a slot scaled away (AIRIG_CPU_WORKERS
lowered), a GPU removed, a joined rig gone. `forget` removes it and clears its alerts;
the brain refuses a worker that is still alive (it would only register again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer
from rich.markup import escape

from airig.common.errors import ConfigError
from airig.launcher.brain_client import BrainClient
from airig.launcher.console import console
from airig.launcher.settings import Settings
from airig.launcher.views.status import workers_table


def build_workers_app(settings_of: Callable[[], Settings]) -> typer.Typer:
    app = typer.Typer(help="The brain's workers; forget one that is gone for good.")

    @app.command("list")
    def list_() -> None:
        """Every worker the brain knows: alive or silent, its rig, GPU and models."""
        console.print(workers_table(_client(settings_of()).workers()))

    @app.command("forget")
    def forget(
        name: Annotated[str, typer.Argument(help="A silent worker's name (`workers list`).")],
    ) -> None:
        """Forget a silent worker: it leaves the list and its alerts clear."""
        done = _client(settings_of()).forget_worker(name)
        console.print(f"Worker {escape(done['forgotten'])} forgotten; its alerts are cleared.")

    return app


def _client(settings: Settings) -> BrainClient:
    if settings.joined:
        raise ConfigError(
            f"this rig joined the brain at {settings.join_brain_url}: it keeps the workers",
            "run the workers commands on the brain's machine",
        )
    return BrainClient.from_settings(settings)
