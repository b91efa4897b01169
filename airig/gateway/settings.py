"""The gateway's one settings object, read from the environment once per process.

The provider's key comes from a file (a Compose secret at /run/secrets/provider_key),
else from ``AIRIG_GATEWAY_API_KEY`` (for a plain process). It is kept as a SecretStr so
no repr, log line or validation error can print it.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from airig.common import shared_settings as shared
from airig.common.errors import ConfigError
from airig.common.secrets import is_placeholder

KEY_ENV = "AIRIG_GATEWAY_API_KEY"


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    # Loopback for a plain process; compose sets 0.0.0.0 inside the container, which is
    # reachable only on ai-network (no port is published on the host).
    listen_host: str = Field("127.0.0.1", alias="AIRIG_GATEWAY_LISTEN_HOST")
    port: int = Field(8070, alias="AIRIG_GATEWAY_PORT", ge=1, le=65535)
    # Keys the launcher reads too: declared in airig/common/shared_settings.py.
    provider: shared.Provider = shared.setting(shared.GATEWAY_PROVIDER)
    model: str = shared.setting(shared.GATEWAY_MODEL)
    # Empty = the provider's own API (the client's default).
    base_url: str = shared.setting(shared.GATEWAY_BASE_URL)
    key_file: Path = shared.setting(shared.GATEWAY_KEY_FILE)  # the Compose secret's path
    api_key: SecretStr = Field(SecretStr(""), alias=KEY_ENV)
    # What the brain shows (Authorization: Bearer); not the provider's key.
    token: SecretStr = shared.setting(shared.GATEWAY_TOKEN)
    concurrency: int = Field(4, alias="AIRIG_GATEWAY_CONCURRENCY", ge=1, le=256)
    timeout_s: float = Field(120.0, alias="AIRIG_GATEWAY_TIMEOUT_S", gt=0, le=3600)
    # Completed answers kept for a repeated request_id (see idempotency.py).
    cache_size: int = Field(1024, alias="AIRIG_GATEWAY_CACHE_SIZE", ge=1)
    # A handoff with images: up to 20 MiB of base64 (external_images.KIT) and its text.
    max_body_bytes: int = Field(24 * 1024 * 1024, alias="AIRIG_GATEWAY_MAX_BODY_BYTES", gt=0)

    def require(self) -> None:
        """Refuse to serve without a model or a token: an open gateway would spend the
        owner's money for anyone on ai-network."""
        if is_placeholder(self.token.get_secret_value()):
            raise ConfigError(
                "AIRIG_GATEWAY_TOKEN is missing or still 'change-me'",
                "run `python start_services.py up`: it generates the token in .env",
            )
        if not self.model.strip():
            raise ConfigError("AIRIG_GATEWAY_MODEL is empty", "set the provider's model in .env")


def load_key(settings: GatewaySettings) -> str:
    """The provider's key: the key file's content, else AIRIG_GATEWAY_API_KEY; "" when
    neither holds one (the gateway then answers every call with a non-retryable 502 and
    /health says key_loaded: false). The environment copy is removed from this process's
    environment once read, so nothing the process starts inherits it."""
    key = ""
    try:
        key = settings.key_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        key = ""
    if not key:
        key = settings.api_key.get_secret_value().strip()
    os.environ.pop(KEY_ENV, None)
    return key
