"""The user's .env: create it from .env.example, keep it complete, fill in secrets.

Peers lose users here: new keys missing after an update, placeholder secrets left in
place, special characters breaking values. We parse with python-dotenv (the same syntax
Compose reads), add keys that .env.example gained without touching the user's values,
and replace ``change-me`` secrets with generated ones exactly once.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from dotenv import dotenv_values

from airig.common.errors import ConfigError
from airig.common.secrets import PLACEHOLDER

# AIRIG_GATEWAY_TOKEN: the brain's token at the escalation gateway, and POSTGRES_PASSWORD,
# its database's (AIRIG_BRAIN_STORE=postgres): generated even while they are unused, so
# turning escalation or PostgreSQL on needs no second step.
SECRET_KEYS = (
    "BRAIN_ADMIN_TOKEN", "WORKER_BOOTSTRAP_TOKEN", "AIRIG_GATEWAY_TOKEN", "POSTGRES_PASSWORD",
)  # fmt: skip


@dataclass
class EnvReport:
    created: bool = False
    added_keys: list[str] = field(default_factory=list)
    generated_secrets: list[str] = field(default_factory=list)


def read_env(path: Path) -> dict[str, str]:
    """Parse a .env file; a line python-dotenv cannot parse is a ConfigError."""
    try:
        values = dotenv_values(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", "check the file's permissions") from None
    return {k: ("" if v is None else v) for k, v in values.items()}


def missing_keys(env: Path, example: Path) -> list[str]:
    have = read_env(env)
    return [k for k in read_env(example) if k not in have]


def ensure_env(env: Path, example: Path, create: bool = True) -> EnvReport:
    """Make .env present and complete; generate placeholder secrets. Idempotent."""
    report = EnvReport()
    if not example.is_file():
        raise ConfigError(f"{example} is missing", "restore it with `git checkout .env.example`")
    if not env.exists():
        if not create:
            raise ConfigError(f"{env} does not exist", "cp .env.example .env")
        env.write_text(example.read_text())
        report.created = True
    report.added_keys = _append_missing(env, example)
    report.generated_secrets = _generate_secrets(env)
    return report


def _append_missing(env: Path, example: Path) -> list[str]:
    defaults = read_env(example)
    have = read_env(env)  # once: read per key it cost `up` 2.5 s (benchmarks/launcher.py)
    missing = [k for k in defaults if k not in have]
    if missing:
        lines = ["", "# added from .env.example by airig (new settings)"]
        lines += [f"{k}={_quote(defaults[k])}" for k in missing]
        text = env.read_text()
        sep = "" if text.endswith("\n") or not text else "\n"
        env.write_text(text + sep + "\n".join(lines) + "\n")
    return missing


def _generate_secrets(env: Path) -> list[str]:
    values = read_env(env)
    # only keys the file has (an older .env.example may lack the gateway's token)
    todo = [k for k in SECRET_KEYS if k in values and values[k] in ("", PLACEHOLDER)]
    if not todo:
        return []
    out = []
    for line in env.read_text().splitlines():
        key = line.split("=", 1)[0].strip()
        if key in todo and "=" in line and not line.lstrip().startswith("#"):
            # url-safe: no quoting issues in .env, URLs or Authorization headers
            line = f"{key}={secrets.token_urlsafe(32)}"
        out.append(line)
    env.write_text("\n".join(out) + "\n")
    env.chmod(0o600)
    return todo


def set_values(env: Path, values: dict[str, str]) -> None:
    """Set keys in .env in place (a commented-out line stays as it is), appending the
    keys it lacks; the file stays private (it holds secrets)."""
    out, seen = [], set()
    for line in env.read_text().splitlines():
        key = line.split("=", 1)[0].strip()
        # every occurrence: with a key twice, the last one wins when .env is read
        if key in values and "=" in line and not line.lstrip().startswith("#"):
            line = f"{key}={_quote(values[key])}"
            seen.add(key)
        out.append(line)
    out += [f"{key}={_quote(value)}" for key, value in values.items() if key not in seen]
    env.write_text("\n".join(out) + "\n")
    env.chmod(0o600)


def _quote(value: str) -> str:
    # single quotes keep spaces, '#' and '$' literal for both python-dotenv and Compose
    return f"'{value}'" if any(c in value for c in ' #$"') else value
