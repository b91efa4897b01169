"""`doctor`: every check ✔/✘ with a fix line, and a JSON bundle for bug reports."""

from __future__ import annotations

from typing import Any

from airig.common.errors import AirigError
from airig.launcher.compose import postgres
from airig.launcher.compose.container import HEALTHY, ContainerState
from airig.launcher.compose.docker import Docker
from airig.launcher.compose.plan import plan_for_running
from airig.launcher.hardware.choice import choose_profile
from airig.launcher.lifecycle import pg_store
from airig.launcher.lifecycle.preflight import (
    Check,
    disk_check,
    docker_checks,
    env_check,
    escalation_check,
    port_checks,
)
from airig.launcher.lifecycle.up import Launcher
from airig.launcher.settings import Settings
from airig.launcher.views.status import bundle, service_rows


def run_doctor(settings: Settings, docker: Docker) -> tuple[list[Check], dict[str, Any]]:
    checks = docker_checks(docker)
    engine_ok = all(c.ok for c in checks)
    checks += [env_check(settings), escalation_check(settings)]
    extra: dict[str, Any] = {}
    if engine_ok:
        checks += _host_checks(settings, docker)
        if postgres.enabled(settings):
            checks.append(postgres_check(settings, docker))
    checks.append(_profile_check(settings, docker, extra))
    if engine_ok:
        try:
            extra["services"] = service_rows(docker, plan_for_running(settings))
        except AirigError as exc:
            extra["services_error"] = exc.message
    return checks, bundle(checks, settings.report_values(), extra)


def _host_checks(settings: Settings, docker: Docker) -> list[Check]:
    """Disk and ports; an engine that stops answering half-way is a ✘, not a crash."""
    launcher = Launcher(settings, docker, console=None)  # type: ignore[arg-type]
    try:
        checks = [disk_check(settings, docker.engine_info().get("DockerRootDir"))]
        return checks + port_checks(settings, launcher.own_ports())
    except AirigError as exc:
        return [Check("docker daemon", False, exc.message, exc.hint)]


def postgres_check(settings: Settings, docker: Docker) -> Check:
    """AIRIG_BRAIN_STORE=postgres: the postgres service's container runs, its healthcheck
    says healthy, and `pg_isready` in it answers now (the check of a minute ago may be
    stale). No password is used or shown: the server's socket, inside its container."""
    name, logs = "postgres", "see `python start_services.py logs postgres`"
    try:
        found = pg_store.container(settings, docker)
    except AirigError as exc:
        return Check(name, False, exc.message, exc.hint)
    if found is None:
        return Check(
            name, False, "AIRIG_BRAIN_STORE=postgres but the postgres service is not running",
            "run `python start_services.py up`; or set AIRIG_BRAIN_STORE=sqlite in .env",
        )  # fmt: skip
    state = ContainerState.from_inspect(getattr(found, "attrs", {}) or {})
    if state.health != HEALTHY:
        return Check(name, False, f"{found.name} is {state.health or state.state}", logs)
    ready, said = pg_store.pg_isready(found)
    if not ready:
        return Check(name, False, f"pg_isready in {found.name}: {said}", logs)
    return Check(name, True, f"{found.name} healthy, pg_isready: {said}")


def _profile_check(settings: Settings, docker: Docker, extra: dict[str, Any]) -> Check:
    try:
        choice = choose_profile(settings, docker, strict=True)
    except AirigError as exc:
        return Check("GPU profile", False, exc.message, exc.hint)
    extra["hardware"] = choice.report.to_dict()
    extra["profile"] = {
        "profile": choice.profile,
        "source": choice.source,
        "reasons": choice.reasons,
    }
    detail = f"{choice.profile} (from {choice.source})"
    if choice.profile == "cpu" and choice.fix:
        return Check("GPU profile", False, detail + ": a GPU is present but unusable", choice.fix)
    return Check("GPU profile", True, detail)
