"""`join`: this machine's GPUs work for another machine's brain (docs/second-rig.md).

Everything that can be wrong with the two values is found before anything starts: the
URL (https, or plain http with --insecure; never loopback, which the worker containers
cannot reach), the brain answering, and the token being a live join token
(``GET /v1/whoami``). Then the same sequence as `up` (host checks, GPU detection, the
network, 01-infra, 02-compute with its verified models), and 03-agents with
``compose.join.yaml``: per-GPU and CPU workers pointed at the remote brain, no brain.
The two values are kept in .env (AIRIG_JOIN_BRAIN_URL, AIRIG_JOIN_TOKEN), so `status`,
`down` and a later `up` on this rig know that it joined. The token comes from --token-file,
the environment (AIRIG_JOIN_TOKEN) or a hidden prompt, and still from --token, where `ps`
and the shell's history show it (`join` says so).
"""

from __future__ import annotations

import getpass
import ipaddress
import re
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

import requests
from rich.console import Console

from airig.common.errors import ConfigError
from airig.launcher.brain_client import url_host
from airig.launcher.compose.docker import Docker
from airig.launcher.envfile import read_env, set_values
from airig.launcher.lifecycle.up import Launcher, UpResult
from airig.launcher.settings import Settings, load_settings

JOIN_KEYS = ("AIRIG_JOIN_BRAIN_URL", "AIRIG_JOIN_TOKEN")
SECOND_RIG = "docs/second-rig.md"
PROXY_FIX = (
    f"put the brain behind an https reverse proxy and join its https URL ({SECOND_RIG}), "
    "or add --insecure on a network you trust"
)
NEW_TOKEN_FIX = "on the brain's machine: python start_services.py token create --join"
# What join tokens look like (secrets.token_urlsafe): nothing that needs quoting in .env
# or a header.
TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9._~+/=-]{8,256}$")
TOKEN_WAYS = "AIRIG_JOIN_TOKEN, --token-file PATH, or leave it out to be asked"
ARGV_NOTE = f"--token shows in `ps` and your shell's history; next time use {TOKEN_WAYS}"


def check_brain_url(url: str, insecure: bool = False) -> str:
    """The brain URL, normalised (no trailing '/'); a ConfigError when it cannot work."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or not _port_ok(parts):
        raise ConfigError(
            f"--brain {url!r} is not an http(s) URL",
            "give the brain's address, e.g. https://brain.example.lan or http://192.168.1.10:8080",
        )
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ConfigError(
            f"--brain {url!r} carries a user, query or fragment",
            "give only scheme, host, port (and a proxy's path): the token goes in --token",
        )
    host = parts.hostname
    if host == "localhost" or _is_loopback(host):
        raise ConfigError(
            f"--brain {url!r} is a loopback address: inside the worker containers it is "
            "the container itself",
            "use an address of the brain's machine that containers reach: its LAN address, "
            "or the Docker bridge gateway (e.g. 172.17.0.1) for a brain on this machine",
        )
    if parts.scheme == "http" and not insecure:
        raise ConfigError(
            f"plain http to {host} would carry the join token and every task unencrypted",
            PROXY_FIX,
        )
    return f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")


def _port_ok(parts: SplitResult) -> bool:
    try:
        parts.port  # noqa: B018 - the property raises ValueError for a bad port
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_token_text(token: str, source: str = "--token") -> None:
    if not TOKEN_PATTERN.match(token):
        raise ConfigError(
            f"{source} does not look like a join token",
            f"copy it whole from `token create --join` ({NEW_TOKEN_FIX})",
        )


def join_token(
    given: str | None, token_file: Path | None, environ: Mapping[str, str], terminal: bool
) -> tuple[str, str]:
    """(the join token, where it came from): --token, --token-file, AIRIG_JOIN_TOKEN, else
    a hidden prompt when stdin is a terminal; a ConfigError when none gives it."""
    if given is not None and token_file is not None:
        raise ConfigError(
            "--token and --token-file both give the join token", "give --token-file only"
        )
    if given is not None:
        return given, "--token"
    if token_file is not None:
        return _read_token_file(token_file), f"--token-file {token_file}"
    if environ.get(JOIN_KEYS[1]):
        return environ[JOIN_KEYS[1]].strip(), JOIN_KEYS[1]
    if terminal:
        typed = getpass.getpass("Join token (from `token create --join`; not shown): ")
        return typed.strip(), "the token typed"
    raise ConfigError(
        "no join token given",
        f"set {JOIN_KEYS[1]}, give --token-file PATH, or run `join` in a terminal to be asked",
    )


def _read_token_file(path: Path) -> str:
    """The token in ``path`` (surrounding blanks and the newline dropped); 4 KiB at most
    is read, a token is far shorter."""
    try:
        with path.open("rb") as file:
            return file.read(4096).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = (exc.strerror or type(exc).__name__) if isinstance(exc, OSError) else "not UTF-8"
        raise ConfigError(
            f"cannot read --token-file {path}: {why}",
            "give the file holding the token `token create --join` printed",
        ) from None


def check_brain(url: str, token: str, timeout_s: float = 10.0) -> str:
    """The join token's name, once the brain answered and took it as a live join token.
    The token is sent only after ``/health`` answered like an airig brain."""
    health = _get(f"{url}/health", {}, timeout_s)
    said = _json(health)
    if said.get("status") == "degraded":
        # an airig brain whose store cannot be written (full or read-only disk): say that,
        # not "is this an airig brain?"
        raise ConfigError(
            f"the brain at {url} is degraded: its store is "
            f"{str(said.get('store', 'unwritable'))[:40]} "
            f"({str(said.get('free', '?'))[:20]} free on its disk)",
            "free space on the brain machine's disk (its `triage` says where); the brain "
            "resumes by itself, then join again",
        )
    if health.status_code != 200 or said.get("status") != "ok":
        raise ConfigError(
            f"{url} does not answer like an airig brain (GET /health: HTTP {health.status_code})",
            "check the URL: the brain machine's address and BRAIN_PORT, or your proxy's",
        )
    who = _get(f"{url}/v1/whoami", {"Authorization": f"Bearer {token}"}, timeout_s)
    if who.status_code == 401:
        raise ConfigError("the brain refused this join token (unknown or revoked)", NEW_TOKEN_FIX)
    if who.status_code != 200:
        raise ConfigError(
            f"the brain answered GET /v1/whoami with HTTP {who.status_code}",
            "update airig on the brain's machine to this version",
        )
    scope = str(_json(who).get("scope"))
    if scope != "join":
        raise ConfigError(f"this is a {scope} token, not a join token", NEW_TOKEN_FIX)
    return str(_json(who).get("name", ""))


def _get(url: str, headers: dict[str, str], timeout_s: float) -> requests.Response:
    try:
        return requests.get(url, headers=headers, timeout=timeout_s)
    except requests.exceptions.SSLError:
        raise ConfigError(
            f"TLS to {url} failed: its certificate is not trusted on this machine",
            f"use a certificate from a CA this machine trusts ({SECOND_RIG})",
        ) from None
    except requests.RequestException as exc:
        raise ConfigError(
            f"cannot reach the brain at {url} ({type(exc).__name__})",
            "check the address; on the brain's machine AIRIG_BIND_ADDRESS must publish "
            f"BRAIN_PORT where this machine reaches it ({SECOND_RIG})",
        ) from None


def _json(response: requests.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def join_rig(
    root: Path,
    brain: str,
    token: str,
    insecure: bool,
    profile: str | None,
    dry_run: bool,
    console: Console,
    ensure_env: Callable[[Path], None],
    docker: Docker | None = None,
    token_source: str = "--token",
) -> tuple[Settings, UpResult]:
    """Check the two values, then bring this rig up as a joined rig (nothing before the
    checks pass; .env restored when the start fails)."""
    url = check_brain_url(brain, insecure)
    check_token_text(token, token_source)
    check_brain(url, token)
    flags = {"AIRIG_PROFILE": profile, JOIN_KEYS[0]: url, JOIN_KEYS[1]: token}
    docker = docker or Docker()
    if dry_run:
        settings = load_settings(root, flags)
        return settings, Launcher(settings, docker, console).up(dry_run=True)
    ensure_env(root)
    settings = load_settings(root, flags)
    launcher = Launcher(settings, docker, console)
    _refuse_own_brain(launcher)
    env = settings.env_file
    before = {key: read_env(env).get(key, "") for key in JOIN_KEYS}
    set_values(env, {JOIN_KEYS[0]: url, JOIN_KEYS[1]: token})
    try:
        return settings, launcher.up()
    except BaseException:
        set_values(env, before)  # the launcher rolled back what it started
        raise


def _refuse_own_brain(launcher: Launcher) -> None:
    """A rig that runs a brain is the brain's machine: joining would orphan its workers."""
    from airig.launcher.compose.plan import plan_for_running

    agents = plan_for_running(launcher.settings).stack("03-agents")
    if any(s.service == "brain" for s in launcher.docker.services(agents)):
        raise ConfigError(
            f"this rig runs its own brain (project {agents.project})",
            "stop it first with `python start_services.py down`, then join; or give this "
            "kit copy another AIRIG_PROJECT_PREFIX",
        )


def public_brain_url(settings: Settings) -> str:
    """The URL other machines join: AIRIG_BRAIN_PUBLIC_URL (a reverse proxy), else the
    brain's published address (this machine's name when that is every interface)."""
    explicit = settings.brain_public_url.rstrip("/")
    if explicit:
        return explicit
    address = settings.bind_address
    host = socket.gethostname() if address in ("0.0.0.0", "::", "") else address
    return f"http://{url_host(host)}:{settings.brain_port}"


def join_command(settings: Settings, token: str) -> tuple[str, list[str]]:
    """The exact command to run on the other machine, and warnings about reaching us."""
    url = public_brain_url(settings)
    parts = urlsplit(url)
    command = f"python start_services.py join --brain {url} --token {token}"
    warnings = []
    host = parts.hostname or ""
    if host == "localhost" or _is_loopback(host):
        warnings.append(
            f"the brain's port is published on {host} only: other machines cannot reach it. "
            f"Set AIRIG_BIND_ADDRESS in .env and run up again, or set AIRIG_BRAIN_PUBLIC_URL "
            f"to your reverse proxy's https URL ({SECOND_RIG})"
        )
    elif parts.scheme == "http":
        command += " --insecure"
        warnings.append(
            "plain http: the join token and every task cross the network unencrypted. "
            f"On an untrusted network put an https reverse proxy in front ({SECOND_RIG})"
        )
    return command, warnings


def join_state(settings: Settings) -> dict[str, str]:
    """For `status` on a joined rig: the brain, this rig's name, and whether the brain
    still takes its join token."""
    url = settings.join_brain_url
    try:
        check_brain(url, settings.join_token, timeout_s=3.0)
        token = "accepted"
    except ConfigError as exc:
        token = exc.message
    return {"brain_url": url, "rig": settings.rig_name, "token": token}
