"""`logs [SERVICE]`: find the stack that runs a service and show its logs."""

from __future__ import annotations

from airig.common.errors import ConfigError
from airig.launcher.console import console
from airig.launcher.docker import Docker
from airig.launcher.plan import plan_for_running
from airig.launcher.settings import Settings


def show_logs(
    settings: Settings, docker: Docker, service: str | None, tail: int, follow: bool
) -> None:
    plan = plan_for_running(settings)
    stacks = list(plan.stacks)
    if service:
        stacks = [
            s
            for s in plan.stacks
            if any(matches_service(x.service, service) for x in docker.services(s))
        ]
        if not stacks:
            known = sorted({x.service for s in plan.stacks for x in docker.services(s)})
            raise ConfigError(
                f"no running service named {service!r}",
                f"one of: {', '.join(known)}" if known else "nothing is running: start it first",
            )
        stack = stacks[0]
        service = next(
            x.service for x in docker.services(stack) if matches_service(x.service, service)
        )
        stacks = [stack]
    for stack in stacks:
        if follow:
            for line in docker.follow_logs(stack, service, tail):
                console.print(line.rstrip("\n"), markup=False, highlight=False)
        else:
            text = docker.logs(stack, service, tail)
            if text:
                console.print(text, markup=False, highlight=False)


def matches_service(actual: str, wanted: str) -> bool:
    """`ollama` finds the active variant (`ollama-cpu`, `ollama-gpu-nvidia` …)."""
    return (
        actual == wanted or actual.startswith(f"{wanted}-") and "init" not in actual[len(wanted) :]
    )
