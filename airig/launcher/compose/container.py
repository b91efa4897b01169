"""One container as every verb sees it, and the one answer to "is this service healthy?".

As docker-compose 1.29's ``container.py`` and ``Service.is_healthy()``: `up`, `status`,
`restart`, `tune`, `update` and `triage` read a ``ContainerState`` (from the engine's
container list, or from an inspect where the restart count matters) and ask ``verdict``;
`restart`, `tune` and `update` wait with ``wait_healthy``. A container that exited,
restarts or was restarted has failed: under `restart: unless-stopped` a crash loop never
reports unhealthy, it restarts.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HEALTHY = "healthy"
NOT_RUNNING = "not running"
WAIT_TIMEOUT_S = 180.0
POLL_S = 1.0
PROGRESS_S = 15.0  # a health wait says how long it has waited this often

# The engine's container list has no health field before API 1.52, only the Status text:
# "Up 5 minutes (healthy)", "Up 2 seconds (health: starting)", "Exited (1) 3 minutes ago".
STATUS_HEALTH = re.compile(r"\((healthy|unhealthy|health: starting)\)")
STATUS_EXIT = re.compile(r"^(?:Exited|Restarting) \((-?\d+)\)")
SERVICE_LABEL = "com.docker.compose.service"


@dataclass
class ContainerState:
    service: str
    container: str
    state: str  # running | exited | created | restarting | dead …
    health: str  # healthy | unhealthy | starting | "" (no healthcheck)
    exit_code: int | None
    ports: list[str] = field(default_factory=list)
    restarts: int = 0  # the engine's RestartCount (an inspect has it, the list does not)

    def is_running(self) -> bool:
        """Running and, where it has a healthcheck, healthy."""
        return self.state == "running" and self.health in (HEALTHY, "")

    def is_done(self) -> bool:
        """A one-shot container (an init service) that finished its work (an exit code
        the engine did not give is no failure shown)."""
        return self.state == "exited" and self.exit_code in (0, None)

    def failure(self, restarts_before: int = 0) -> str | None:
        """Why this container has failed, in words; None when it has not (yet)."""
        crashed = self.restarts > restarts_before
        if self.state in ("exited", "dead", "restarting") or crashed:
            return f"exited (code {self.exit_code})"
        if self.health == "unhealthy":
            return "unhealthy"
        return None

    @classmethod
    def from_summary(cls, row: Mapping[str, Any]) -> ContainerState:
        """One entry of the engine's container list (``GET /containers/json``): state,
        health and exit code as an inspect gives them, published ports as
        ``IP:PORT->PORT/PROTO``."""
        name = (row.get("Names") or ["/?"])[0].lstrip("/")
        status = row.get("Status") or ""
        health = (row.get("Health") or {}).get("Status")  # API >= 1.52 only
        if health is None:
            found = STATUS_HEALTH.search(status)
            health = found[1].removeprefix("health: ") if found else ""
        exited = STATUS_EXIT.match(status)
        ports = [
            f"{p.get('IP', '')}:{p['PublicPort']}->{p['PrivatePort']}/{p.get('Type', 'tcp')}"
            for p in row.get("Ports") or []
            if p.get("PublicPort")  # an exposed port nothing publishes: no URL
        ]
        return cls(
            service=(row.get("Labels") or {}).get(SERVICE_LABEL, name),
            container=name,
            state=row.get("State") or "",
            health="" if health == "none" else health,
            exit_code=int(exited[1]) if exited else 0,
            ports=ports,
        )

    @classmethod
    def from_inspect(cls, attrs: Mapping[str, Any]) -> ContainerState:
        """An inspected container (``GET /containers/{id}/json``), with its restart count."""
        state = _mapping(attrs.get("State"))
        labels = _mapping(_mapping(attrs.get("Config")).get("Labels"))
        name = str(attrs.get("Name") or "?").lstrip("/")
        health = str(_mapping(state.get("Health")).get("Status") or "")
        return cls(
            service=str(labels.get(SERVICE_LABEL) or name),
            container=name,
            state=str(state.get("Status") or ""),
            health="" if health == "none" else health,
            exit_code=_count(state.get("ExitCode"), None),
            restarts=_count(attrs.get("RestartCount"), 0) or 0,
        )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _count(value: object, default: int | None) -> int | None:
    """An integer the engine gave, else ``default`` (an engine of another make, or a
    field it left out, must not crash a command that only reads)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def verdict(
    states: Sequence[ContainerState],
    *,
    done_ok: bool = False,
    restarts_before: Mapping[str, int] | None = None,
) -> str | None:
    """The service's health from all its containers: ``HEALTHY``, a failure in words, or
    None while one is still starting. ``done_ok``: a one-shot container that exited 0 is
    done, not failed (`up` and `status` over whole stacks with their init services).
    ``restarts_before``: each container's restart count before the caller's own restart,
    so only a restart since counts as a crash."""
    if not states:
        return NOT_RUNNING
    before = restarts_before or {}
    for s in states:
        if done_ok and s.is_done():
            continue
        failed = s.failure(before.get(s.container, 0))
        if failed is not None:
            return failed
    if all(s.is_running() or (done_ok and s.is_done()) for s in states):
        return HEALTHY
    return None


def is_ok(state: ContainerState) -> bool:
    """One container of a running kit: up and healthy, or a one-shot that finished."""
    return verdict([state], done_ok=True) == HEALTHY


def wait_healthy(
    read: Callable[[], list[ContainerState]],
    service: str,
    timeout: float = WAIT_TIMEOUT_S,
    *,
    restarts_before: Mapping[str, int] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    say: Callable[[str], None] = lambda _line: None,
    poll_s: float = POLL_S,
) -> str:
    """Read the service's containers until ``verdict`` has one (``HEALTHY`` or a failure),
    else "still … after N s" at ``timeout``; every PROGRESS_S it says how long it has waited
    and what the containers report."""
    start = clock()
    deadline, next_note = start + timeout, start + PROGRESS_S
    while True:
        states = read()
        found = verdict(states, restarts_before=restarts_before)
        if found is not None:
            return found
        shown = ", ".join(sorted({s.health or s.state for s in states})) or "starting"
        if clock() >= deadline:
            return f"still {shown} after {timeout:g} s"
        if clock() >= next_note:
            say(f"  still waiting for {service} ({shown}, {clock() - start:.0f} s of {timeout:g})")
            next_note = clock() + PROGRESS_S
        sleep(poll_s)
