"""`logs [SERVICE]`: find the stack that runs a service and show its logs.

The lines are written as Compose gives them: never wrapped or re-rendered by rich, so
a JSON line stays one line for `grep` and `jq`.
"""

from __future__ import annotations

from airig.launcher.compose.docker import Docker
from airig.launcher.compose.plan import plan_for_running
from airig.launcher.compose.service_names import locate
from airig.launcher.console import console
from airig.launcher.settings import Settings


def show_logs(
    settings: Settings, docker: Docker, service: str | None, tail: int, follow: bool
) -> None:
    plan = plan_for_running(settings)
    stacks = list(plan.stacks)
    if service:
        by_stack = {s.name: [x.service for x in docker.services(s)] for s in stacks}
        stack_name, service = locate(by_stack, service)
        stacks = [s for s in stacks if s.name == stack_name]
    for stack in stacks:
        if follow:
            for line in docker.follow_logs(stack, service, tail):
                _write(line)
        else:
            text = docker.logs(stack, service, tail)
            if text:
                _write(text)


def _write(text: str) -> None:
    """``text`` as it is, ending in one newline, flushed (a follower sees it now)."""
    out = console.file
    out.write(text if text.endswith("\n") else text + "\n")
    out.flush()
