"""``python start_services.py models [list|verify|pull]``: the models of the running stack.

The host cannot read Docker volumes, so each command runs the init container's own entry
point (``python -m airig.provision <service> --verify-only`` …) in a one-off container of
the service's init definition, with the same volumes, and renders its event lines.
The main CLI mounts it with ``app.add_typer(build_models_app(), name="models")``; the
factory returns a python-on-whales client for 02-compute (tests pass their own).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import Annotated, cast

import typer
from python_on_whales import DockerClient
from python_on_whales.client_config import ClientNotFoundError
from python_on_whales.exceptions import DockerException
from rich.console import Console

from airig.common.errors import AirigError, ConfigError, DockerError, ProvisionError
from airig.provision.progress import Summary, render

# The init service that owns each service's volumes and provisioning environment.
INIT_SERVICES = {"ollama": "ollama-init", "whisper": "whisper-init", "comfyui": "comfyui-init"}

ClientFactory = Callable[[], DockerClient]
SERVER_WAIT_SECONDS = 30


class Service(StrEnum):
    ollama = "ollama"
    whisper = "whisper"
    comfyui = "comfyui"


ServiceOption = Annotated[
    list[Service] | None,
    typer.Option("--service", "-s", help="Only this service (repeatable)."),
]


def default_client() -> DockerClient:
    """This checkout's running 02-compute project, as `up` started it."""
    from airig.launcher.docker import Docker
    from airig.launcher.plan import plan_for_running
    from airig.launcher.settings import checkout_settings

    return Docker().client(plan_for_running(checkout_settings()).stack("02-compute"))


def container_lines(client: DockerClient, service: Service, args: list[str]) -> Iterator[bytes]:
    """stdout lines of ``python -m airig.provision <service> <args>`` in a one-off container."""
    # with stream=True python-on-whales yields (source, line) pairs; its return type is
    # the union of every mode's
    stream = cast(
        Iterable[tuple[str, bytes]],
        client.compose.run(
            INIT_SERVICES[service.value],
            command=["-m", "airig.provision", service.value, *args],
            entrypoint="python",
            # The stack is meant to be up already: fail fast instead of the init's long wait.
            envs={"AIRIG_SERVER_WAIT_SECONDS": str(SERVER_WAIT_SECONDS)},
            remove=True,
            tty=False,
            stream=True,
            dependencies=False,  # the stack is already running; start nothing else
        ),
    )
    for source, line in stream:
        if source == "stdout":
            yield line


class _Exit:
    """Holds the one-off container's failure so rendering can finish first."""

    error: DockerException | None = None


def _until_exit(lines: Iterator[bytes], outcome: _Exit) -> Iterator[bytes]:
    try:
        yield from lines
    except DockerException as exc:
        outcome.error = exc


def _docker_error(service: Service, exc: DockerException) -> DockerError:
    stderr = (exc.stderr or "").strip().splitlines()
    cause = stderr[-1] if stderr else f"exit {exc.return_code}"
    return DockerError(
        f"{INIT_SERVICES[service.value]} failed: {cause}",
        "is the stack up? try `python start_services.py up`",
    )


def run_services(
    client: DockerClient, services: list[Service], args: list[str], console: Console
) -> Summary:
    """Run ``args`` for each service; one Summary of every model's outcome."""
    summary = Summary()
    for service in services:
        outcome = _Exit()
        try:
            part = render(_until_exit(container_lines(client, service, args), outcome), console)
        except ClientNotFoundError:
            raise DockerError("docker not found", "install Docker and its compose plugin") from None
        summary.rows.update(part.rows)
        # Failed models report themselves; a non-zero exit without a failed model did not.
        reported = any(row.service == service.value for row in part.failed)
        if outcome.error is not None and not reported:
            raise _docker_error(service, outcome.error)
    return summary


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
