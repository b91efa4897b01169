"""Gather triage's facts: containers (docker SDK via the adapter), start and stop events,
Ollama / ComfyUI probes, the brain's workers and active alerts, and `models verify` (the
provisioners' own check). Every collector turns its failure into an ``unreachable``
entry, never a raise.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from airig.common import durations
from airig.common.errors import AirigError
from airig.launcher.compose.docker import Docker, engine_errors
from airig.launcher.compose.plan import plan_for_running
from airig.launcher.compose.service_names import matches_service, matching, resolve
from airig.launcher.settings import Settings
from airig.launcher.views.triage.backend import gpu_paths
from airig.launcher.views.triage.facts import ContainerFacts, DeviceRequest, Facts, Healthcheck

if TYPE_CHECKING:
    from airig.launcher.brain_client import BrainClient

NS = 1e9
LOG_LINES = 40
PROBE_TIMEOUT_S = 3.0
# what the classifiers read from a container's environment (never its secrets): the
# workers' names, and what selects a compute service's backend (backend.py)
KEPT_ENV = frozenset({
    "WORKER_NAME", "WORKER_NAME_PREFIX", "WORKER_SERVICE", "OLLAMA_HOST",
    "OLLAMA_VULKAN", "ROCR_VISIBLE_DEVICES", "CLI_ARGS",
})  # fmt: skip


def parse_since(text: str) -> float:
    """``--since`` (``90s``, ``30m``, ``1h``, ``2d``, ``1w``) as seconds; one line for
    anything else (``airig/common/durations.py``: the kit's one grammar)."""
    return float(durations.seconds(text, "--since"))


def collect(
    settings: Settings, docker: Docker, service: str | None, since_s: float, verify: bool
) -> Facts:
    unreachable: list[tuple[str, str]] = []
    try:
        containers = _containers(settings, docker, since_s)
    except AirigError as exc:
        return Facts(unreachable=(("Docker", exc.message),))
    if not containers:
        why = "no container of this rig's projects: start it with python start_services.py"
        return Facts(unreachable=(("the kit", why),))
    names = {c.service for c in containers}
    brain = _brain_client(settings, containers, unreachable)
    alerts = _alerts(brain, unreachable) if brain else None
    wanted = names if service is None else set(matching(names, service))
    # a name only an alert knows (its service's containers are gone) is still asked about
    if not wanted and not any(a.get("subject") == service for a in alerts or ()):
        resolve(names, service or "")  # the one-line refusal, naming what runs
    chosen = tuple(c for c in containers if c.service in wanted)
    ollama = {c.name: p for c in chosen if (p := _ollama_ps(c)) is not None}
    comfy = {c.name: p for c in chosen if (p := _comfy_devices(c)) is not None}
    agents = service is None or any(n == "brain" or n.startswith("worker") for n in wanted)
    workers = _workers(brain, unreachable) if agents and brain else None
    bad_models = _bad_models(chosen, unreachable) if verify else None
    return Facts(
        containers=chosen,
        ollama_ps=ollama,
        comfyui_devices=comfy,
        workers=workers,
        expected_workers=expected_workers(settings) if agents else {},
        bad_models=bad_models,
        unreachable=tuple(unreachable),
        alerts=None if alerts is None else relevant_alerts(alerts, service, chosen, agents),
        proof_moves=_proof_moves(settings, service),
    )


def _proof_moves(settings: Settings, service: str | None) -> dict[str, dict[str, Any]]:
    """The services the last `up` moved off their GPU image by a failed proof."""
    from airig.launcher.proofs.cache import proof_report

    moved = proof_report(settings.state_dir)["moved"]
    if service is None:
        return dict(moved)
    return {name: move for name, move in moved.items() if service.startswith(name)}


def _containers(settings: Settings, docker: Docker, since_s: float) -> list[ContainerFacts]:
    plan = plan_for_running(settings)
    found: list[ContainerFacts] = []
    for stack in plan.stacks:
        with engine_errors(f"listing {stack.name}"):
            listed = docker.sdk().containers.list(
                all=True, filters={"label": f"com.docker.compose.project={stack.project}"}
            )
        found += [_facts(stack.name, c, docker, since_s) for c in listed]
    return found


def _facts(stack: str, container: Any, docker: Docker, since_s: float) -> ContainerFacts:
    attrs = container.attrs
    state, config = attrs.get("State") or {}, attrs.get("Config") or {}
    host = attrs.get("HostConfig") or {}
    health = state.get("Health") or {}
    env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
    starts, stops, dies = _events(container, docker, since_s)
    devices = _devices(host)
    requests = _device_requests(host)
    return ContainerFacts(
        stack=stack,
        service=(config.get("Labels") or {}).get("com.docker.compose.service", container.name),
        name=container.name,
        status=state.get("Status", ""),
        health=health.get("Status", ""),
        exit_code=state.get("ExitCode"),
        restart_count=attrs.get("RestartCount", 0),
        oom_killed=bool(state.get("OOMKilled")),
        gpu_requested=bool(requests or gpu_paths(devices)),
        image=config.get("Image", ""),
        devices=devices,
        device_requests=requests,
        hostname=config.get("Hostname", ""),
        published=_published(attrs),
        env={k: v for k, v in env.items() if k in KEPT_ENV or k.startswith("WHISPER__")},
        healthcheck=_healthcheck(config.get("Healthcheck")),
        starts=tuple(starts),
        stops=tuple(stops),
        dies=tuple(dies),
        restart_policy=(host.get("RestartPolicy") or {}).get("Name") or "",
        log_tail=_log_tail(container),
        health_log=tuple(str(e.get("Output", "")).strip() for e in health.get("Log") or []),
    )


def _devices(host: dict[str, Any]) -> tuple[str, ...]:
    """HostConfig.Devices in Compose's short form (host:container:permissions)."""
    return tuple(
        f"{d.get('PathOnHost', '')}:{d.get('PathInContainer', '')}:{d.get('CgroupPermissions', '')}"
        for d in host.get("Devices") or []
    )


def _device_requests(host: dict[str, Any]) -> tuple[DeviceRequest, ...]:
    return tuple(
        DeviceRequest(r.get("Driver") or "", tuple(r.get("DeviceIDs") or ()), r.get("Count") or 0)
        for r in host.get("DeviceRequests") or []
    )


def _healthcheck(raw: dict[str, Any] | None) -> Healthcheck | None:
    if not raw or raw.get("Test") in (None, ["NONE"]):
        return None
    return Healthcheck(
        interval_s=raw.get("Interval", 30 * NS) / NS,
        timeout_s=raw.get("Timeout", 30 * NS) / NS,
        retries=raw.get("Retries", 3),
        start_period_s=raw.get("StartPeriod", 0) / NS,
    )


def _events(
    container: Any, docker: Docker, since_s: float
) -> tuple[list[float], list[float], list[tuple[float, int]]]:
    """Epoch seconds of the container's `start` and `stop` events within the window, and
    of its `die` events with their exit code."""
    now = time.time()
    starts: list[float] = []
    stops: list[float] = []
    dies: list[tuple[float, int]] = []
    try:
        with engine_errors("reading events"):
            events = docker.sdk().events(
                since=int(now - since_s), until=int(now), decode=True,
                filters={"container": container.id, "event": ["start", "stop", "die"]},
            )  # fmt: skip
            for e in events:
                action = e.get("Action") or e.get("status")
                when = float(e.get("time", 0))
                if action == "die":
                    dies.append((when, _exit_code(e)))
                else:
                    (stops if action == "stop" else starts).append(when)
    except AirigError:
        pass
    return starts, stops, dies


def _exit_code(event: dict[str, Any]) -> int:
    """A `die` event's exit code (Actor.Attributes.exitCode, a string); -1 if unreadable."""
    actor = event.get("Actor")
    attributes = actor.get("Attributes") if isinstance(actor, dict) else None
    code = attributes.get("exitCode") if isinstance(attributes, dict) else None
    try:
        return int(str(code))
    except ValueError:
        return -1


def _log_tail(container: Any) -> tuple[str, ...]:
    try:
        with engine_errors("reading logs"):
            raw = container.logs(tail=LOG_LINES)
    except AirigError:
        return ()
    return tuple(bytes(raw).decode("utf-8", "replace").splitlines())


def _published(attrs: dict[str, Any]) -> dict[str, str]:
    ports = (attrs.get("NetworkSettings") or {}).get("Ports") or {}
    urls = {}
    for port, bindings in ports.items():
        for binding in bindings or []:
            address = binding.get("HostIp") or "127.0.0.1"
            address = "127.0.0.1" if address in ("0.0.0.0", "::") else address
            address = f"[{address}]" if ":" in address else address
            urls[port] = f"http://{address}:{binding['HostPort']}"
    return urls


def _ollama_ps(c: ContainerFacts) -> tuple[dict[str, Any], ...] | None:
    if not c.service.startswith("ollama") or c.service.endswith("-init") or c.status != "running":
        return None
    url = c.published.get("11434/tcp")
    if url is None:
        return None
    import ollama

    try:  # the ollama library's ps(): models with size and size_vram
        answer = ollama.Client(host=url, timeout=PROBE_TIMEOUT_S).ps()
    except Exception:  # noqa: BLE001 — a probe that does not answer is no finding here
        return None
    return tuple(m.model_dump() for m in answer.models)


def _comfy_devices(c: ContainerFacts) -> tuple[dict[str, Any], ...] | None:
    if not c.service.startswith("comfyui") or c.service.endswith("-init") or c.status != "running":
        return None
    url = c.published.get("8188/tcp")
    if url is None:
        return None
    import requests

    try:
        answer = requests.get(f"{url}/system_stats", timeout=PROBE_TIMEOUT_S)
        answer.raise_for_status()
        return tuple(answer.json().get("devices") or ())
    except (requests.RequestException, ValueError, AttributeError):
        return None


def expected_workers(settings: Settings) -> dict[str, int]:
    """The plan's workers: the CPU replicas and one per GPU overlay service `up` wrote."""
    import yaml

    from airig.launcher.compose.plan import GPU_OVERLAY

    expected = {"worker-cpu": settings.cpu_workers}
    try:
        overlay = yaml.safe_load((settings.state_dir / GPU_OVERLAY).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return expected
    for name in overlay.get("services") or {}:
        if str(name).startswith("worker-"):
            expected[str(name)] = 1
    return expected


def _brain_client(
    settings: Settings, containers: list[ContainerFacts], unreachable: list[tuple[str, str]]
) -> BrainClient | None:
    """The brain's client when this rig runs the brain (a joined rig's brain is elsewhere)."""
    if settings.joined or not any(c.service == "brain" for c in containers):
        return None
    from airig.launcher.brain_client import BrainClient

    try:
        client = BrainClient.from_settings(settings)
    except AirigError as exc:
        unreachable.append(("the brain", exc.message))
        return None
    client.timeout_s = PROBE_TIMEOUT_S
    return client


def _workers(
    client: BrainClient, unreachable: list[tuple[str, str]]
) -> tuple[dict[str, Any], ...] | None:
    try:
        return tuple(client.workers())
    except AirigError as exc:
        _once(unreachable, ("the brain", exc.message))
        return None


def _alerts(
    client: BrainClient, unreachable: list[tuple[str, str]]
) -> tuple[dict[str, Any], ...] | None:
    try:
        return tuple(client.alerts())
    except AirigError as exc:
        _once(unreachable, ("the brain", exc.message))
        return None


def _once(unreachable: list[tuple[str, str]], entry: tuple[str, str]) -> None:
    if entry not in unreachable:
        unreachable.append(entry)


# alert kinds whose subject is a compute service (the brain's probes), the rest are agents'
SERVICE_ALERTS = frozenset({"service_down", "gpu_fallback"})


def relevant_alerts(
    alerts: tuple[dict[str, Any], ...],
    service: str | None,
    chosen: tuple[ContainerFacts, ...],
    agents: bool,
) -> tuple[dict[str, Any], ...]:
    """Every alert for a whole-kit triage; for `triage SERVICE`, those about that service
    (`whisper` the alert's subject, `whisper-cpu` its variant) and, for the brain or a
    worker, the agents' own."""
    if service is None:
        return alerts

    def about(alert: dict[str, Any]) -> bool:
        subject = str(alert.get("subject"))
        if alert.get("kind") not in SERVICE_ALERTS:
            return agents
        return subject == service or any(matches_service(c.service, subject) for c in chosen)

    return tuple(a for a in alerts if about(a))


def _bad_models(
    chosen: tuple[ContainerFacts, ...], unreachable: list[tuple[str, str]]
) -> tuple[dict[str, Any], ...] | None:
    """`models verify`'s own path: the provisioner in a one-off init container."""
    from rich.console import Console

    from airig.launcher.compose.provision_runs import Service, default_client, run_services

    wanted = [s for s in Service if any(c.service.startswith(s.value) for c in chosen)]
    if not wanted:
        return ()
    try:
        summary = run_services(default_client(), wanted, ["--verify-only"], Console(quiet=True))
    except AirigError as exc:
        unreachable.append(("models verify", exc.message))
        return None
    return tuple(vars(row) for row in summary.failed)
