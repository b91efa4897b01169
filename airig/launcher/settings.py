"""The launcher's one settings object.

Precedence: command-line flag > process environment > .env > built-in default. Each value
remembers where it came from, so the launcher can say which source won (peers leave users
guessing why a GPU profile was or was not chosen).
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

from airig.common.errors import ConfigError
from airig.launcher.envfile import read_env

PROFILES = ("cpu", "gpu-nvidia", "gpu-amd")
STACKS = ("01-infra", "02-compute", "03-agents")

DEFAULTS: dict[str, str] = {
    "AIRIG_PROFILE": "",
    "AIRIG_BIND_ADDRESS": "127.0.0.1",
    "AIRIG_MIN_FREE_DISK_GB": "20",
    "AIRIG_WAIT_TIMEOUT": "1800",
    "AIRIG_NETWORK": "ai-network",
    "AIRIG_CPU_WORKERS": "2",
    "AIRIG_IMAGE": "airig/airig:0.1.0",
    "FILES_PORT": "8090",
    "OLLAMA_PORT": "11434",
    "COMFYUI_PORT": "8188",
    "WHISPER_PORT": "8000",
    "BRAIN_PORT": "8080",
    # Rigs: names of this rig's compose projects and volumes, its name at the brain, and
    # the brain it joined (empty: it runs its own). See README, "Second rig".
    "AIRIG_PROJECT_PREFIX": "airig",
    "AIRIG_RIG_NAME": "",
    "AIRIG_JOIN_BRAIN_URL": "",
    "AIRIG_JOIN_TOKEN": "",
    "AIRIG_BRAIN_PUBLIC_URL": "",
}
# Compose project names allow lowercase letters, digits, '-' and '_'; volume names follow.
PREFIX_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
# Host port variable -> (stack, service it publishes), for preflight and the summary.
PORTS: dict[str, tuple[str, str]] = {
    "FILES_PORT": ("01-infra", "files"),
    "OLLAMA_PORT": ("02-compute", "ollama"),
    "COMFYUI_PORT": ("02-compute", "comfyui"),
    "WHISPER_PORT": ("02-compute", "whisper"),
    "BRAIN_PORT": ("03-agents", "brain"),
}


@dataclass
class Settings:
    root: Path
    values: dict[str, str]
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def env_file(self) -> Path:
        return self.root / ".env"

    @property
    def example_file(self) -> Path:
        return self.root / ".env.example"

    @property
    def state_dir(self) -> Path:
        """Generated files (compose overlays); ignored by git."""
        return self.root / ".airig"

    def get(self, key: str) -> str:
        return self.values.get(key, DEFAULTS.get(key, ""))

    def get_int(self, key: str) -> int:
        raw = self.get(key)
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(
                f"{key}={raw!r} is not a whole number", f"fix {key} in .env"
            ) from None

    def ports(self) -> dict[str, int]:
        return {key: self.get_int(key) for key in PORTS}

    def source_of(self, key: str) -> str:
        return self.sources.get(key, "default")

    @property
    def prefix(self) -> str:
        """Prefix of this rig's compose projects and volumes (two rigs on one engine)."""
        return self.get("AIRIG_PROJECT_PREFIX")

    @property
    def rig_name(self) -> str:
        """This rig's name at the brain: AIRIG_RIG_NAME, else the machine's hostname."""
        from airig.common.protocol import rig_name

        return rig_name(self.get("AIRIG_RIG_NAME") or socket.gethostname())

    @property
    def joined(self) -> bool:
        """True when this rig's workers use another machine's brain (`join`)."""
        return bool(self.get("AIRIG_JOIN_BRAIN_URL"))


def load_settings(root: Path, flags: dict[str, str | None] | None = None) -> Settings:
    """Merge defaults < .env < environment < flags; validate what the launcher relies on."""
    values, sources = dict(DEFAULTS), dict.fromkeys(DEFAULTS, "default")
    env_path = root / ".env"
    layers = [
        (read_env(env_path) if env_path.is_file() else {}, ".env"),
        (
            {k: v for k, v in os.environ.items() if k in DEFAULTS or k.startswith("AIRIG_")},
            "environment",
        ),
        ({k: v for k, v in (flags or {}).items() if v not in (None, "")}, "flag"),
    ]
    for layer, name in layers:
        for key, value in layer.items():
            values[key] = value
            sources[key] = name
    settings = Settings(root=root, values=values, sources=sources)
    _validate(settings)
    return settings


def _validate(settings: Settings) -> None:
    profile = settings.get("AIRIG_PROFILE")
    if profile and profile not in PROFILES:
        where = settings.source_of("AIRIG_PROFILE")
        raise ConfigError(
            f"unknown profile {profile!r} (from {where})",
            f"use one of: {', '.join(PROFILES)}, or leave AIRIG_PROFILE empty to detect",
        )
    for key, port in settings.ports().items():
        if not 1 <= port <= 65535:
            raise ConfigError(f"{key}={port} is not a TCP port", f"set {key} to 1-65535 in .env")
    if settings.get_int("AIRIG_CPU_WORKERS") < 0:
        raise ConfigError("AIRIG_CPU_WORKERS is negative", "set it to 0 or more in .env")
    _validate_rig(settings)


def _validate_rig(settings: Settings) -> None:
    from airig.common.protocol import HOST_PATTERN

    if not PREFIX_PATTERN.match(settings.prefix):
        raise ConfigError(
            f"AIRIG_PROJECT_PREFIX={settings.prefix!r} cannot name compose projects",
            "use lowercase letters, digits, '-' or '_' (e.g. airig2), at most 40",
        )
    raw = settings.get("AIRIG_RIG_NAME")
    if raw and not re.match(HOST_PATTERN, raw):
        raise ConfigError(
            f"AIRIG_RIG_NAME={raw!r} is not a plain name",
            "use letters, digits, '.', '-' or '_' (at most 63), or leave it empty",
        )
    if bool(settings.get("AIRIG_JOIN_BRAIN_URL")) != bool(settings.get("AIRIG_JOIN_TOKEN")):
        raise ConfigError(
            "AIRIG_JOIN_BRAIN_URL and AIRIG_JOIN_TOKEN must be set together",
            "run `python start_services.py join --brain URL --token T` again, or empty both "
            "in .env to run this rig with its own brain",
        )
