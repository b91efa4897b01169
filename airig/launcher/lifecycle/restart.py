"""`restart SERVICE`: restart one service in its stack, wait until it is healthy, say so.

The lookup is `logs`' and `triage`'s (``service_names.py``: ``ollama`` finds the active
variant). ``recreate`` (what `tune` uses) runs ``up --no-deps`` for that service instead
of ``restart``: a restarted container keeps its old environment, a recreated one reads the
changed .env.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from rich.markup import escape

from airig.launcher.compose import container
from airig.launcher.compose.container import WAIT_TIMEOUT_S, ContainerState
from airig.launcher.compose.docker import Docker, docker_errors
from airig.launcher.compose.plan import ComposePlan, StackPlan
from airig.launcher.compose.service_names import locate

POLL_S = 2.0


class Services(Protocol):
    """What restarting needs from the adapter (a fake in the tests)."""

    def services(self, stack: StackPlan) -> list[ContainerState]: ...

    def states(self, stack: StackPlan, service: str) -> list[ContainerState]: ...

    def restart(self, stack: StackPlan, service: str, recreate: bool) -> None: ...


class ComposeServices:
    """The Docker adapter's compose client, for one service at a time."""

    def __init__(self, docker: Docker) -> None:
        self.docker = docker

    def services(self, stack: StackPlan) -> list[ContainerState]:
        return self.docker.services(stack)

    def states(self, stack: StackPlan, service: str) -> list[ContainerState]:
        return self.docker.service_states(stack, service)

    def restart(self, stack: StackPlan, service: str, recreate: bool) -> None:
        compose = self.docker.client(stack).compose
        with docker_errors(f"restarting {service}"):
            if recreate:
                compose.up(services=[service], detach=True, dependencies=False, quiet=True)
            else:
                compose.restart(services=[service])


@dataclass
class Outcome:
    service: str
    healthy: bool
    detail: str  # healthy | unhealthy | exited (code 1) | still starting after 180 s …


def find_service(plan: ComposePlan, docker: Services, name: str) -> tuple[StackPlan, str]:
    """The stack running ``name`` and the service's exact name (``ollama`` → ``ollama-cpu``)."""
    stacks = {stack.name: stack for stack in plan.stacks}
    by_stack = {key: [s.service for s in docker.services(st)] for key, st in stacks.items()}
    stack_name, service = locate(by_stack, name)
    return stacks[stack_name], service


def wait_healthy(
    docker: Services,
    stack: StackPlan,
    service: str,
    timeout: float = WAIT_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    restarts_before: Mapping[str, int] | None = None,
) -> Outcome:
    """The one wait (``container.wait_healthy``) over the service's inspected containers:
    healthy, a failure (exited, restarted since ``restarts_before``, unhealthy), or still
    starting at ``timeout``."""
    detail = container.wait_healthy(
        lambda: docker.states(stack, service), service, timeout,
        restarts_before=restarts_before, sleep=sleep, clock=clock, poll_s=POLL_S,
    )  # fmt: skip
    return Outcome(service, detail == container.HEALTHY, detail)


def restart_one(
    plan: ComposePlan,
    docker: Services,
    name: str,
    recreate: bool = False,
    timeout: float = WAIT_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    stack, service = find_service(plan, docker, name)
    # a restart of ours is no crash: only a restart after it counts (a recreated container
    # starts again from none)
    before = {s.container: s.restarts for s in docker.states(stack, service)}
    docker.restart(stack, service, recreate)
    return wait_healthy(docker, stack, service, timeout, sleep, restarts_before=before)


def outcome_line(outcome: Outcome) -> str:
    mark = "[green]✔[/]" if outcome.healthy else "[red]✘[/]"
    state = "healthy" if outcome.healthy else f"not healthy: {outcome.detail}"
    waits = queued_work(outcome.service, outcome.healthy)
    return f"{mark} {escape(outcome.service)} {escape(state)}{waits}"


# Compute services whose queued tasks the brain holds while they are down instead of
# failing them (airig/brain/scheduling/placement.py): what a restart or an update tells.
COMPUTE_SERVICES = ("ollama", "comfyui", "whisper")


def queued_work(service: str, healthy: bool) -> str:
    """What happened to the queued work of ``service`` (a compute service) meanwhile."""
    if not service.startswith(COMPUTE_SERVICES):
        return ""
    if healthy:
        return "; its queued tasks waited in the brain's queue meanwhile (none failed) and run now"
    return (
        "; its queued tasks wait in the brain's queue until it answers (at most "
        "AIRIG_MAX_WAIT_S, then they fail)"
    )
