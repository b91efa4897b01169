"""`update [SERVICE] [--check]`: move the compute images to what their tags name now.

The launcher mounts it with ``register(app)``; the work is ``airig/launcher/lifecycle/update.py``.
Failures are AirigError, printed by the app's edge as one line and a hint.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from airig.common.errors import ConfigError, DockerError
from airig.launcher.compose.docker import Docker
from airig.launcher.compose.plan import HOST_ENV, plan_for_running
from airig.launcher.console import console
from airig.launcher.lifecycle.update import (
    Engine,
    Updater,
    check,
    check_lines,
    failed_before,
    failed_line,
    lookup_cached,
    outcome_line,
    pick,
    running_lock,
    smoke,
    to_update,
    wait_healthy,
)
from airig.launcher.settings import checkout_settings


def update(
    service: Annotated[
        str | None, typer.Argument(help="ollama, comfyui or whisper (default: every one)")
    ] = None,
    check_only: Annotated[
        bool, typer.Option("--check", help="Only say which images moved upstream.")
    ] = False,
) -> None:
    """Move each locked compute image to what its tag (or images.yaml) names now, one
    service at a time; a service that fails its health or smoke check is rolled back."""
    from airig.launcher.hardware.choice import choose_profile

    base = checkout_settings()
    if not (base.state_dir / HOST_ENV).is_file():
        raise ConfigError(
            "the kit is not running: update replaces the images of running services",
            "start it: python start_services.py",
        )
    plan = plan_for_running(base)
    # the profile `up` ran, not a new detection's: update moves images, not profiles
    settings = checkout_settings({"AIRIG_PROFILE": plan.profile})
    docker = Docker()
    chosen = choose_profile(settings, docker, strict=False).images
    if chosen is None:
        raise ConfigError("no compute image is chosen for this profile", "run doctor")
    lock = pick(running_lock(settings, chosen), service)
    # a registry can take a while to answer: say what is being waited for
    count = f"{len(lock)} locked image{'s' if len(lock) != 1 else ''}"
    say(f"Checking the registry for what the tags of {count} name now …")
    moves = check(lock, chosen, lookup_cached())  # every lookup before any change
    # a digest an earlier update rolled back is said, not offered again; naming its
    # SERVICE tries it again
    failed = failed_before(settings)
    if check_only:
        for line in check_lines(moves, failed):
            console.print(line, soft_wrap=True)
        return
    todo, skipped = to_update(moves, failed, named=service is not None)
    for move in skipped:
        console.print(failed_line(move, failed), soft_wrap=True)
    if not todo:
        rest = "other " if skipped else ""
        console.print(f"[green]✔[/] every {rest}locked image is current; nothing to update")
        return
    engine = Engine(docker)
    updater = Updater(
        settings,
        plan,
        engine,
        lambda name: smoke(settings, name),
        lambda stack, name: wait_healthy(engine, stack, name, say=say),
        say=say,
    )
    for move in todo:
        console.print(f"[bold]Updating[/] {escape(move.service)} to {escape(move.reference)} …")
        outcome = updater.apply(move)
        if not outcome.ok:
            raise DockerError(
                outcome_line(outcome),
                f"the locked image runs again; {settings.state_dir / 'update.log'} has the "
                "record, `python start_services.py logs SERVICE` the new image's output",
            )
        console.print(outcome_line(outcome), soft_wrap=True)


def say(line: str) -> None:
    """One step of `update`, as it starts: a plain line, whole when piped."""
    console.print(escape(line), soft_wrap=True, highlight=False)


def images_table(rows: list[dict[str, Any]]) -> Table:
    """`status`: each locked image's tag, digest and age."""
    table = Table(title="images (.airig/images.lock)", title_justify="left")
    for column in ("service", "tag", "digest", "age"):
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(row[c]) for c in ("service", "tag", "digest", "age")))
    return table


def register(app: typer.Typer) -> None:
    app.command()(update)
