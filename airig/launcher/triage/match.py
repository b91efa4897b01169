"""Which container a finding's subject names: a service by its kind or variant
(``service_names.py``), a worker by the name the brain knows it by."""

from __future__ import annotations

from collections.abc import Iterable

from airig.launcher.service_names import matches_service
from airig.launcher.triage.facts import ContainerFacts


def service_containers(subject: str, containers: Iterable[ContainerFacts]) -> list[ContainerFacts]:
    """The containers of service ``subject`` (`whisper` → whisper-cpu's), init ones never."""
    return [c for c in containers if matches_service(c.service, subject)]


def worker_name(c: ContainerFacts) -> str:
    return c.env.get("WORKER_NAME_PREFIX", "") + (c.env.get("WORKER_NAME") or c.hostname)


def runs_worker(c: ContainerFacts, name: str) -> bool:
    """Container ``c`` is the worker the brain knows as ``name``."""
    own = c.env.get("WORKER_NAME") or c.hostname
    return name == worker_name(c) or bool(own) and name.endswith(own)


def worker_container(name: str, containers: Iterable[ContainerFacts]) -> ContainerFacts | None:
    """The container here that runs worker ``name``; None: it is gone, or on another rig."""
    return next(
        (c for c in containers if c.service.startswith("worker") and runs_worker(c, name)), None
    )


def worker_fix(w: dict[str, object], c: ContainerFacts | None, fix: str) -> str:
    """``fix`` for the container that runs worker ``w``; where none here does, what exists
    instead: its own rig, or forgetting a silent worker that is gone for good."""
    if c is not None:
        return fix.format(service=c.service)
    name, host = w.get("name"), w.get("host")
    rig = f"another rig ({host})" if host else "another rig"
    there = f"no container here runs {name}; if it runs on {rig}, run triage there"
    if w.get("alive"):
        return there
    return f"{there}; if it is gone for good, `python start_services.py workers forget {name}`"
