"""The one error family of airig.

Every failure a user can cause or fix is an ``AirigError`` with a one-line message and a
hint. The CLI catches them at its edge and prints them; nothing else prints tracebacks.
"""

from __future__ import annotations


class AirigError(Exception):
    """A failure with a message (what is wrong) and a hint (how to fix it)."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class ConfigError(AirigError):
    """The .env file, a flag or a plan is wrong."""


class DockerError(AirigError):
    """Docker or Compose refused or failed."""


class HardwareError(AirigError):
    """The requested GPU profile cannot be used on this host."""


class PreflightError(AirigError):
    """A host check failed before anything was started."""


class ProvisionError(AirigError):
    """A model could not be pulled or did not verify."""
