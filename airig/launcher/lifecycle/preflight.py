"""Host checks before anything starts, shared by `up` (stop at the first blocker) and
`doctor` (run them all, print ✔/✘ with a fix line each)."""

from __future__ import annotations

import errno
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airig.common.errors import AirigError
from airig.common.secrets import is_placeholder
from airig.launcher.compose import postgres
from airig.launcher.compose.docker import Docker
from airig.launcher.compose.plan import gateway_key_path
from airig.launcher.envfile import missing_keys
from airig.launcher.settings import PORTS, Settings


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _run(name: str, fn: Callable[[], str]) -> Check:
    try:
        return Check(name, True, fn())
    except AirigError as exc:
        return Check(name, False, exc.message, exc.hint)


def docker_checks(docker: Docker) -> list[Check]:
    checks = [_run("docker command", docker.binary)]
    daemon = _run(
        "docker daemon", lambda: "Docker " + docker.engine_info().get("ServerVersion", "?")
    )
    checks.append(daemon)
    compose = _run("compose v2", lambda: "Compose " + ".".join(map(str, docker.compose_version())))
    checks.append(compose)
    return checks


def env_check(settings: Settings) -> Check:
    if not settings.env_file.is_file():
        return Check(
            ".env", False, ".env is missing", "cp .env.example .env (up creates it for you)"
        )
    missing = missing_keys(settings.env_file, settings.example_file)
    if missing:
        return Check(
            ".env",
            False,
            f"missing keys: {', '.join(missing)}",
            "run up: it adds them with defaults",
        )
    secrets = {
        "BRAIN_ADMIN_TOKEN": settings.brain_admin_token,
        "WORKER_BOOTSTRAP_TOKEN": settings.worker_bootstrap_token,
    }
    if postgres.enabled(settings):  # the database's and the brain's URL's password
        secrets["POSTGRES_PASSWORD"] = settings.postgres_password
    placeholders = [key for key, value in secrets.items() if is_placeholder(value)]
    if placeholders:
        return Check(
            ".env",
            False,
            f"placeholder secrets: {', '.join(placeholders)}",
            "run up: it generates them",
        )
    return Check(".env", True, "present and complete")


def escalation_check(settings: Settings) -> Check:
    """AIRIG_ESCALATION=on needs a model and a readable key file before anything starts
    (the gateway would only fail its healthcheck later). The key is never printed."""
    name = "escalation"
    if settings.escalation != "on" or settings.joined:
        return Check(name, True, "off: nothing leaves this machine")
    if not settings.gateway_model.strip():
        return Check(
            name, False, "AIRIG_ESCALATION=on but AIRIG_GATEWAY_MODEL is empty",
            "set AIRIG_GATEWAY_MODEL in .env to the provider's model, or AIRIG_ESCALATION=off",
        )  # fmt: skip
    fix = (
        "put the provider's API key alone in a file (chmod 600), set AIRIG_GATEWAY_KEY_FILE "
        "to its path in .env, or set AIRIG_ESCALATION=off"
    )
    if not settings.gateway_key_file:
        return Check(name, False, "AIRIG_ESCALATION=on but AIRIG_GATEWAY_KEY_FILE is empty", fix)
    path = gateway_key_path(settings)
    if not path.is_file():
        return Check(name, False, f"AIRIG_GATEWAY_KEY_FILE: no file at {path}", fix)
    try:
        empty = not path.read_bytes().strip()
    except OSError as exc:
        return Check(
            name, False, f"AIRIG_GATEWAY_KEY_FILE: cannot read {path}: {exc.strerror}", fix
        )
    if empty:
        return Check(name, False, f"AIRIG_GATEWAY_KEY_FILE: {path} is empty", fix)
    if is_placeholder(settings.gateway_token):
        return Check(
            name, False, "AIRIG_GATEWAY_TOKEN is still change-me", "run up: it generates it"
        )
    shared = " (others may read it: chmod 600)" if path.stat().st_mode & 0o077 else ""
    return Check(
        name,
        True,
        f"on: {settings.gateway_provider} {settings.gateway_model}, key file {path}{shared}",
    )


def disk_check(settings: Settings, docker_root: str | None) -> Check:
    need = settings.min_free_disk_gb
    path = Path(docker_root) if docker_root and Path(docker_root).exists() else settings.root
    free_gb = shutil.disk_usage(path).free / 1e9
    detail = f"{free_gb:.0f} GB free under {path}"
    if free_gb < need:
        return Check(
            "free disk",
            False,
            detail + f" (need {need})",
            "free space or lower AIRIG_MIN_FREE_DISK_GB",
        )
    return Check("free disk", True, detail)


def port_checks(settings: Settings, own_ports: set[int]) -> list[Check]:
    """Each host port must be free, unless one of our own containers already holds it."""
    address = settings.bind_address
    checks = []
    for key, port in settings.ports().items():
        service = PORTS[key][1]
        if service == "brain" and settings.joined:
            continue  # a joined rig runs no brain: its port is not published
        if port in own_ports:
            checks.append(Check(f"port {port}", True, f"held by airig's {service} (already up)"))
        elif port_free(address, port):
            checks.append(Check(f"port {port}", True, f"free for {service}"))
        else:
            holder = port_holder(port) or "another program"
            checks.append(
                Check(
                    f"port {port}",
                    False,
                    f"{address}:{port} ({service}) is taken by {holder}",
                    f"stop it, or set {key} to a free port in .env",
                )
            )
    return checks


def port_free(address: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError as exc:
            return exc.errno not in (errno.EADDRINUSE, errno.EACCES)
    return True


def port_holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """Name the process listening on a TCP port, from /proc (Linux; None when unknown)."""
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            rows = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    if not inodes:
        return None
    for pid_dir in proc.iterdir():
        if pid_dir.name.isdigit() and _holds(pid_dir, inodes):
            comm = (pid_dir / "comm").read_text().strip() if (pid_dir / "comm").exists() else "?"
            return f"{comm} (pid {pid_dir.name})"
    return "a process this user cannot see (try sudo ss -ltnp)"


def _holds(pid_dir: Path, inodes: set[str]) -> bool:
    try:
        for fd in (pid_dir / "fd").iterdir():
            link = os.readlink(fd)
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return True
    except OSError:
        return False
    return False
