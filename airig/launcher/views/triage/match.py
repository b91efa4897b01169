"""Which container a finding's subject names: a service by its kind or variant
(``service_names.py``), a worker by the name the brain knows it by."""

from __future__ import annotations

from collections.abc import Iterable

from airig.common.worker_names import slot_of
from airig.launcher.compose.service_names import matches_service
from airig.launcher.views.triage.facts import ContainerFacts


def service_containers(subject: str, containers: Iterable[ContainerFacts]) -> list[ContainerFacts]:
    """The containers of service ``subject`` (`whisper` → whisper-cpu's), init ones never."""
    return [c for c in containers if matches_service(c.service, subject)]


def own_name(c: ContainerFacts) -> str:
    """The name the worker in ``c`` gives itself, by the worker's own rule (its settings):
    WORKER_NAME, else the Compose slot of WORKER_SERVICE (``cpu-2``), else the hostname."""
    service = c.env.get("WORKER_SERVICE", "")
    slot = slot_of(c.name.lstrip("/"), service) if service else None
    return c.env.get("WORKER_NAME") or slot or c.hostname


def worker_name(c: ContainerFacts) -> str:
    return c.env.get("WORKER_NAME_PREFIX", "") + own_name(c)


def runs_worker(c: ContainerFacts, name: str) -> bool:
    """Container ``c`` is the worker the brain knows as ``name``."""
    own = own_name(c)
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
