"""What is running, and the doctor's report: tables for people, JSON for bug reports.

Table cells hold text from Docker, the brain and the host: it is escaped, so a bracket in
it ("[/dev/dri]") is shown, not read as rich markup.
"""

from __future__ import annotations

import platform
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

from rich.markup import escape
from rich.table import Table

from airig import __version__
from airig.common.errors import AirigError
from airig.launcher.compose.container import ContainerState, is_ok
from airig.launcher.compose.docker import Docker
from airig.launcher.compose.plan import ComposePlan
from airig.launcher.lifecycle.preflight import Check
from airig.launcher.settings import REPORTABLE, Settings

SKIP_URL = {"ollama-init", "comfyui-init", "whisper-init", "volumes-init"}
# The user-info of a URL anywhere in a text (scheme://user:password@, scheme://token@); up to
# the last @ before the path, as a password may hold an unencoded @
URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)(?P<userinfo>[^/\s]+)@", re.I)
REDACTED = "<redacted>"
T = TypeVar("T")


def service_rows(docker: Docker, plan: ComposePlan) -> list[dict[str, Any]]:
    """Every stack's services, stack by stack, from one engine query for all of them."""
    by_project = docker.project_services(s.project for s in plan.stacks)
    return [
        {"stack": stack.name, **_row(svc)}
        for stack in plan.stacks
        for svc in by_project[stack.project]
    ]


def _row(svc: ContainerState) -> dict[str, Any]:
    urls = []
    for mapping in svc.ports:
        host, _, _target = mapping.partition("->")
        address, _, port = host.rpartition(":")
        shown = "localhost" if address in ("0.0.0.0", "::", "") else address
        urls.append(f"http://{shown}:{port}")
    # The operator dashboard is served by the brain itself.
    urls += [f"{u}/dashboard" for u in urls if svc.service == "brain"]
    return {
        "service": svc.service,
        "container": svc.container,
        "state": svc.state,
        "health": svc.health or ("-" if svc.state == "running" else ""),
        "exit_code": svc.exit_code,
        "urls": sorted(set(urls)),
    }


def services_table(rows: list[dict[str, Any]], title: str = "airig services") -> Table:
    table = Table(title=title)
    # overflow fold: at 80 columns a URL wraps onto the next line instead of losing its
    # port to an ellipsis
    for col in ("stack", "service", "state", "health", "url"):
        table.add_column(col, overflow="fold")
    for r in rows:
        health = "" if r["health"] == "-" else r["health"]
        seen = ContainerState(r.get("service", ""), r.get("container", ""), r["state"], health,
                              r.get("exit_code"))  # fmt: skip
        ok = is_ok(seen)
        state = r["state"] if r["state"] != "exited" else f"exited ({r['exit_code']})"
        colour = "green" if ok else "red"
        table.add_row(
            escape(r["stack"]), escape(r["service"]), f"[{colour}]{escape(state)}[/]",
            escape(r["health"]), escape(" ".join(r["urls"])),
        )  # fmt: skip
    return table


def brain_workers(settings: Settings) -> list[dict[str, Any]] | None:
    """The brain's worker list, or None when the brain is not up (status still works)."""
    from airig.launcher.brain_client import BrainClient

    try:
        client = BrainClient.from_settings(settings)
        client.timeout_s = 3.0
        return client.workers()
    except AirigError:
        return None


def workers_table(workers: list[dict[str, Any]]) -> Table:
    """Workers with their rig (host), GPU temperature and the brain's warnings."""
    table = Table(title="workers")
    columns = ("worker", "host", "classes", "gpu", "temp", "running", "resident models")
    for col in (*columns, "warnings"):
        table.add_column(col)
    for w in workers:
        gpus = w.get("gpus") or []
        temps = [g["temperature_c"] for g in gpus if g.get("temperature_c") is not None]
        gpu = "cpu" if w.get("gpu_index") is None else ",".join(str(g["index"]) for g in gpus)
        name = escape(str(w["name"]))
        if w.get("stopped"):  # deregistered on a clean stop
            name = f"[dim]{name} (stopped)[/]"
        elif not w.get("alive"):
            name = f"[red]{name} (silent)[/]"
        warnings = escape("; ".join(w.get("warnings") or []))
        table.add_row(
            name, escape(w.get("host") or "-"), escape(",".join(w.get("classes") or [])),
            gpu or str(w.get("gpu_index")),
            " ".join(f"{t:.0f}°C" for t in temps) or "-", str(w.get("running", 0)),
            escape(", ".join(w.get("resident_models") or [])) or "-",
            f"[yellow]⚠ {warnings}[/]" if warnings else "",
        )  # fmt: skip
    return table


def brain_store(settings: Settings) -> dict[str, Any] | None:
    """The brain's store size and retention (``GET /v1/store``), or None when the brain
    does not answer (or is too old to have it): status still works."""
    from airig.launcher.brain_client import BrainClient

    try:
        client = BrainClient.from_settings(settings)
        client.timeout_s = 3.0
        return client.store()
    except AirigError:
        return None


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def store_table(store: dict[str, Any]) -> Table:
    """What the brain keeps on disk, and for how long."""
    days = store.get("retention_days") or 0
    kept = f"finished plans kept {days} days" if days else "finished plans kept forever"
    table = Table(title=f"brain store ({kept})")
    table.add_column("part")
    table.add_column("size", justify="right")
    rows = [("database", store["db_bytes"]), ("database WAL", store["wal_bytes"]),
            ("result files", store["results_bytes"])]  # fmt: skip
    rows += [(f"{name} log", size) for name, size in sorted(store.get("logs", {}).items())]
    for part, size in rows:
        table.add_row(escape(part), human_bytes(size))
    return table


def layout_table(rows: list[dict[str, str]]) -> Table:
    table = Table(title="worker layout")
    # whisper: the worker's own whisper-gpuN on gpu-nvidia, else the shared one
    columns = ("worker", "gpus", "ollama", "whisper", "classes")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(escape(row.get(key, "")) for key in columns))
    return table


def checks_table(checks: list[Check]) -> Table:
    table = Table(title="airig doctor", show_lines=False)
    table.add_column("")
    table.add_column("check")
    table.add_column("result")
    table.add_column("fix")
    for c in checks:
        mark = "[green]✔[/]" if c.ok else "[red]✘[/]"
        table.add_row(mark, escape(c.name), escape(c.detail), escape(c.fix))
    return table


def redact_urls(text: str) -> str:
    """``http://user:pass@host`` → ``http://user:<redacted>@host``; a bare ``token@`` goes
    whole. Settings such as AIRIG_PIP_INSTALL_ARGS carry index URLs with passwords."""

    def hide(match: re.Match[str]) -> str:
        user, colon, _password = match["userinfo"].partition(":")
        kept = f"{user}:" if colon else ""
        return f"{match['scheme']}{kept}{REDACTED}@"

    return URL_USERINFO.sub(hide, text)


def scrubbed(value: Any) -> Any:
    """``value`` with URL credentials redacted in every string, however deep."""
    if isinstance(value, str):
        return redact_urls(value)
    if isinstance(value, dict):
        return {k: scrubbed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrubbed(v) for v in value]
    return value


def redacted_env(values: dict[str, str]) -> dict[str, str]:
    """The settings for a bug report: every key, but only the values of keys the kit
    knows hold no secret (``REPORTABLE``); no list of words can tell a secret by its
    name (SESSION_COOKIE, PRIVATE_PEM, a webhook URL)."""
    return {k: (redact_urls(v) if k in REPORTABLE else REDACTED) for k, v in values.items()}


def bundle(
    checks: list[Check], settings_values: dict[str, str], extra: dict[str, Any]
) -> dict[str, Any]:
    report = {
        "airig": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "checks": [c.to_dict() for c in checks],
        "settings": redacted_env(settings_values),
        **extra,
    }
    return cast(dict[str, Any], scrubbed(report))


def safe(fn: Callable[[], T], default: Callable[[AirigError], T]) -> T:
    """Run a probe for the doctor; its AirigError becomes data, not a crash."""
    try:
        return fn()
    except AirigError as exc:
        return default(exc)
