"""The brain's active alerts and the knock-on model failures, joined to the findings of
their cause: triage and the brain never disagree (an alert that holds is a finding, never
"nothing wrong"), and each finding names one cause.

Pure functions, like ``classify.py`` (which calls them last).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from airig.common.jsonlog import utc_iso
from airig.launcher.compose.service_names import matches_service
from airig.launcher.views.triage.backend import gpu_label
from airig.launcher.views.triage.facts import (
    AGENTS,
    FLAPPING,
    GPU_FALLBACK,
    MEMORY,
    SERVICE_DOWN,
    STARTUP_CRASH,
    STOPPED,
    ContainerFacts,
    Facts,
    Finding,
)
from airig.launcher.views.triage.match import service_containers, worker_container, worker_fix

# findings that explain a service not answering: the alert joins them as evidence
OUTAGES = frozenset({STARTUP_CRASH, STOPPED, FLAPPING, MEMORY, SERVICE_DOWN})
WORKER_SUBJECTS = frozenset({"worker_down", "worker_failures", "gpu_temperature"})
RUN = "python start_services.py"


def alert_line(alert: dict[str, Any]) -> str:
    since = alert.get("fired_at")
    when = f" since {utc_iso(since)}" if isinstance(since, int | float) else ""
    return f"brain alert {alert.get('kind')} {alert.get('subject')}{when}: {alert.get('message')}"


def _host(found: list[Finding], kind: str, subject: str) -> int | None:
    """The index of the finding that already names this alert's cause, if any."""
    for i, f in enumerate(found):
        if kind == "service_down" and _outage_of(f, subject):
            return i
        if kind == "gpu_fallback" and f.cls == GPU_FALLBACK and matches_service(f.service, subject):
            return i
        if kind in WORKER_SUBJECTS and f.cls == AGENTS and f.service == subject.split("/")[0]:
            return i
    return None


def with_alerts(found: list[Finding], facts: Facts) -> list[Finding]:
    """Each active alert as evidence of the finding of its cause, or as its own finding."""
    found = list(found)
    for alert in facts.alerts or ():
        kind, subject = str(alert.get("kind")), str(alert.get("subject"))
        line = alert_line(alert)
        i = _host(found, kind, subject)
        if i is None:
            found.append(own_finding(kind, subject, line, facts.containers))
        else:
            found[i] = replace(found[i], evidence=(*found[i].evidence, line))
    return found


def own_finding(
    kind: str, subject: str, line: str, containers: tuple[ContainerFacts, ...]
) -> Finding:
    """An alert no other finding explains, with the first action for its kind."""
    if kind == "service_down":
        return _service_down(subject, line, service_containers(subject, containers))
    if kind == "gpu_fallback":
        mine = service_containers(subject, containers)
        service = mine[0].service if mine else subject
        label = gpu_label(mine[0]) if mine else ""
        return Finding(
            GPU_FALLBACK, service, f"{service}{label} was given a GPU but runs on the CPU (the "
            "brain's probe)", (line,),
            f"check the GPU is visible inside it (`{RUN} detect`), then the model fits its "
            "VRAM (a smaller model in .env)",
            f"{RUN} triage {service}: no fallback finding",
            "restore the previous .env value and run `up`",
        )  # fmt: skip
    return _agents(kind, subject, line, containers)


def _service_down(subject: str, line: str, mine: list[ContainerFacts]) -> Finding:
    if not mine:
        return Finding(
            SERVICE_DOWN, subject, f"{subject} does not answer the brain, and no container of "
            "it exists", (line, f"docker: no container of {subject} in this rig's projects"),
            f"`{RUN} up` creates what is missing", f"{RUN} triage {subject}: no finding",
            "nothing to roll back",
        )  # fmt: skip
    c = mine[0]
    states = tuple(
        f"docker: {x.name} ({x.service}) {x.status}{f' ({x.health})' if x.health else ''}"
        for x in mine
    )
    if any(x.status == "running" for x in mine):
        action = (
            f"Docker runs it but the brain cannot reach it over ai-network: read `{RUN} logs "
            f"{c.service}` and `{RUN} logs brain`; if it stays, `{RUN} restart {c.service}`"
        )
    else:
        action = (
            f"start it: `{RUN} restart {c.service}` (`{RUN} logs {c.service}` says why it ended)"
        )
    return Finding(
        SERVICE_DOWN, c.service, f"{c.service} does not answer the brain's probes",
        (line, *states), action,
        f"{RUN} triage {c.service}: no finding once the brain's next probes answer",
        "nothing to roll back (a restart changes no setting)",
    )  # fmt: skip


def _agents(kind: str, subject: str, line: str, containers: Iterable[ContainerFacts]) -> Finding:
    name = subject.split("/")[0]
    c = worker_container(name, containers) if kind in WORKER_SUBJECTS else None
    worker = {"name": name, "alive": kind != "worker_down"}
    actions = {
        "worker_down": worker_fix(
            worker, c, f"read why it stopped (`{RUN} logs {{service}}`), then `{RUN} restart "
            "{service}`",
        ),
        "worker_failures": worker_fix(
            worker, c, f"read the failed attempts' errors in `{RUN} logs {{service}}`"
        ),
        "gpu_temperature": "cool the GPU (airflow, power limit); AIRIG_THERMAL_LIMIT_C in .env "
        "only if the card is rated for more",
        "task_failures": f"`{RUN} plans` lists the plans, `{RUN} plan ID TASK` a task's "
        "error: fix the input or the setting it names",
        "queue_depth": f"`{RUN} status`: workers alive and serving these classes? more CPU "
        "workers: AIRIG_CPU_WORKERS in .env",
        # the brain answers 507/503 and resumes by itself once it can write again
        "store_unwritable": "free space on the disk that holds Docker's volumes (`df -h "
        "$(docker info -f '{{.DockerRootDir}}')`, `docker system df`; "
        f"`{RUN} plans --prune` frees the store itself), or remount it read-write if it "
        "turned read-only; the brain resumes by itself, no restart needed",
    }  # fmt: skip
    return Finding(
        AGENTS, subject, f"the brain alerts {kind} for {subject}", (line,),
        actions.get(kind, f"read `{RUN} logs brain` for {kind}"),
        f"{RUN} triage: this alert cleared", "nothing to roll back",
    )  # fmt: skip


def with_model_sync(found: list[Finding], facts: Facts, syncs: Iterable[Finding]) -> list[Finding]:
    """A model that failed verification while its service could not answer (no container
    of it running, or the brain's probes get no answer) is a knock-on of that outage: its
    evidence joins the outage's finding. Any other is a finding of its own."""
    found = list(found)
    unanswered = {a.get("subject") for a in facts.alerts or () if a.get("kind") == "service_down"}
    for sync in syncs:
        service = sync.service
        mine = service_containers(service, facts.containers)
        down = service in unanswered or not any(c.status == "running" for c in mine)
        host = next((i for i, f in enumerate(found) if _outage_of(f, service)), None)
        if host is None or not down:
            found.append(sync)
            continue
        knock_on = tuple(
            f"knock-on, models verify while {service} was down: {e}" for e in sync.evidence
        )
        found[host] = replace(found[host], evidence=(*found[host].evidence, *knock_on))
    return found


def _outage_of(f: Finding, service: str) -> bool:
    return f.cls in OUTAGES and matches_service(f.service, service)
