"""``python -m airig.provision <service> <args>`` in a one-off container of the service's
init definition, with the same volumes: what ``models list/verify/pull``
(``cli/models.py``) and ``triage``'s model check (``triage/collect.py``) both run.

The host cannot read Docker volumes, so the init container's own entry point does the work
and this module renders its event lines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import TYPE_CHECKING, cast

from rich.console import Console

from airig.common.errors import DockerError
from airig.provision.progress import Summary, render

if TYPE_CHECKING:  # imported where compose runs: every command line loads this module
    from python_on_whales import DockerClient
    from python_on_whales.exceptions import DockerException

# The init service that owns each service's volumes and provisioning environment.
INIT_SERVICES = {"ollama": "ollama-init", "whisper": "whisper-init", "comfyui": "comfyui-init"}

ClientFactory = Callable[[], "DockerClient"]
SERVER_WAIT_SECONDS = 30


class Service(StrEnum):
    ollama = "ollama"
    whisper = "whisper"
    comfyui = "comfyui"


def default_client() -> DockerClient:
    """This checkout's running 02-compute project, as `up` started it."""
    from airig.launcher.compose.docker import Docker
    from airig.launcher.compose.plan import plan_for_running
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
    from python_on_whales.exceptions import DockerException

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
    from python_on_whales.client_config import ClientNotFoundError

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
