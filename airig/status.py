"""What is running, and the doctor's report: tables for people, JSON for bug reports."""

from __future__ import annotations

import platform
import sys

from rich.table import Table

from airig import __version__
from airig.compose_plan import ComposePlan
from airig.docker_adapter import Docker, ServiceState
from airig.envfile import SECRET_KEYS
from airig.errors import AirigError
from airig.preflight import Check

SKIP_URL = {"ollama-init", "comfyui-init", "whisper-init", "volumes-init"}


def service_rows(docker: Docker, plan: ComposePlan) -> list[dict]:
    rows = []
    for stack in plan.stacks:
        for svc in docker.services(stack):
            rows.append({"stack": stack.name, **_row(svc)})
    return rows


def _row(svc: ServiceState) -> dict:
    urls = []
    for mapping in svc.ports:
        host, _, _target = mapping.partition("->")
        address, _, port = host.rpartition(":")
        shown = "localhost" if address in ("0.0.0.0", "::", "") else address
        urls.append(f"http://{shown}:{port}")
    return {
        "service": svc.service,
        "container": svc.container,
        "state": svc.state,
        "health": svc.health or ("-" if svc.state == "running" else ""),
        "exit_code": svc.exit_code,
        "urls": sorted(set(urls)),
    }


def services_table(rows: list[dict], title: str = "airig services") -> Table:
    table = Table(title=title)
    for col in ("stack", "service", "state", "health", "url"):
        table.add_column(col)
    for r in rows:
        ok = (r["state"] == "running" and r["health"] in ("healthy", "-")) or (
            r["state"] == "exited" and r["exit_code"] == 0
        )
        state = r["state"] if r["state"] != "exited" else f"exited ({r['exit_code']})"
        colour = "green" if ok else "red"
        table.add_row(
            r["stack"], r["service"], f"[{colour}]{state}[/]", r["health"], " ".join(r["urls"])
        )
    return table


def brain_workers(env_file) -> list[dict] | None:
    """The brain's worker list, or None when the brain is not up (status still works)."""
    from airig.client import BrainClient

    try:
        client = BrainClient.from_env(env_file)
        client.timeout_s = 3.0
        return client.workers()
    except AirigError:
        return None


def workers_table(workers: list[dict]) -> Table:
    """Workers with their GPU's temperature and the brain's warnings (thermal guard)."""
    table = Table(title="workers")
    for col in ("worker", "classes", "gpu", "temp", "running", "resident models", "warnings"):
        table.add_column(col)
    for w in workers:
        gpus = w.get("gpus") or []
        temps = [g["temperature_c"] for g in gpus if g.get("temperature_c") is not None]
        gpu = "cpu" if w.get("gpu_index") is None else ",".join(str(g["index"]) for g in gpus)
        name = w["name"] if w.get("alive") else f"[red]{w['name']} (silent)[/]"
        warnings = "; ".join(w.get("warnings") or [])
        table.add_row(
            name, ",".join(w.get("classes") or []), gpu or str(w.get("gpu_index")),
            " ".join(f"{t:.0f}°C" for t in temps) or "-", str(w.get("running", 0)),
            ", ".join(w.get("resident_models") or []) or "-",
            f"[yellow]⚠ {warnings}[/]" if warnings else "",
        )  # fmt: skip
    return table


def layout_table(rows: list[dict[str, str]]) -> Table:
    table = Table(title="worker layout")
    for col in ("worker", "gpus", "ollama", "classes"):
        table.add_column(col)
    for row in rows:
        table.add_row(row["worker"], row["gpus"], row["ollama"], row["classes"])
    return table


def checks_table(checks: list[Check]) -> Table:
    table = Table(title="airig doctor", show_lines=False)
    table.add_column("")
    table.add_column("check")
    table.add_column("result")
    table.add_column("fix")
    for c in checks:
        mark = "[green]✔[/]" if c.ok else "[red]✘[/]"
        table.add_row(mark, c.name, c.detail, c.fix)
    return table


def redacted_env(values: dict[str, str]) -> dict[str, str]:
    """The settings for a bug report, secrets replaced."""
    return {
        k: ("<redacted>" if k in SECRET_KEYS or "TOKEN" in k or "KEY" in k else v)
        for k, v in values.items()
    }


def bundle(checks: list[Check], settings_values: dict[str, str], extra: dict) -> dict:
    return {
        "airig": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "checks": [c.to_dict() for c in checks],
        "settings": redacted_env(settings_values),
        **extra,
    }


def safe(fn, default):
    """Run a probe for the doctor; its AirigError becomes data, not a crash."""
    try:
        return fn()
    except AirigError as exc:
        return default(exc)
