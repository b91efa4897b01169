"""``python start_services.py models [list|verify|pull]``: the models of the running stack.

The host cannot read Docker volumes, so each command runs the init container's own entry
point (``python -m airig.provision <service> --verify-only`` …) in a one-off container of
the service's init definition, with the same volumes, and renders its event lines
(``airig/launcher/compose/provision_runs.py``, which ``triage`` uses too).
The main CLI mounts it with ``app.add_typer(build_models_app(), name="models")``; the
factory returns a python-on-whales client for 02-compute (tests pass their own).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated

import typer
from rich.console import Console

from airig.common.errors import AirigError, ConfigError, ProvisionError
from airig.launcher.compose.provision_runs import (
    ClientFactory,
    Service,
    default_client,
    run_services,
)
from airig.provision.progress import Summary

ServiceOption = Annotated[
    list[Service] | None,
    typer.Option("--service", "-s", help="Only this service (repeatable)."),
]


def _fail_if_bad(summary: Summary) -> None:
    if not summary.ok:
        names = ", ".join(f"{row.service} {row.model}" for row in summary.failed)
        raise ProvisionError(f"models not verified: {names}", "run `models pull` to repair")


def _edge(action: Callable[[], object], console: Console) -> None:
    """The command boundary: one red line and exit 1, never a traceback."""
    try:
        action()
    except AirigError as exc:
        hint = f"\n  hint: {exc.hint}" if exc.hint else ""
        console.print(f"[red]✘ {exc.message}[/]{hint}", markup=True, highlight=False)
        raise typer.Exit(exc.exit_code) from None


def build_models_app(client_factory: ClientFactory = default_client) -> typer.Typer:
    app = typer.Typer(help="List, verify or re-pull the models of the running stack.")
    errors = Console(stderr=True)

    def chosen(services: list[Service] | None) -> list[Service]:
        return list(services) if services else list(Service)

    @app.command("list")
    def list_models(service: ServiceOption = None) -> None:
        """Configured models and what is on the volumes."""
        _edge(
            lambda: run_services(client_factory(), chosen(service), ["--list"], Console()), errors
        )

    @app.command()
    def verify(service: ServiceOption = None) -> None:
        """Re-verify every model (size, sha256, stable); exit 1 when any is bad."""

        def action() -> None:
            args = ["--verify-only"]
            _fail_if_bad(run_services(client_factory(), chosen(service), args, Console()))

        _edge(action, errors)

    @app.command()
    def pull(
        models: Annotated[list[str] | None, typer.Argument(help="Only these models.")] = None,
        service: ServiceOption = None,
    ) -> None:
        """Pull again and repair: bad files are deleted and fetched anew, then verified."""

        def action() -> None:
            if models and (not service or len(service) != 1):
                raise ConfigError("naming models needs exactly one --service")
            args = ["--pull", *[arg for model in models or [] for arg in ("--model", model)]]
            _fail_if_bad(run_services(client_factory(), chosen(service), args, Console()))

        _edge(action, errors)

    return app


models_app = build_models_app()

if __name__ == "__main__":
    sys.exit(models_app())
