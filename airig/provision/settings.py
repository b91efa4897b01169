"""The one settings object of an init container, read from its environment.

Compose passes these variables (see ``02-compute/compose.yaml``); the names are the
contract between the compose files and this package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from airig.common import shared_settings as shared

CommaList = Annotated[list[str], NoDecode]


class ProvisionSettings(BaseSettings):
    """Where each server is, which models it must hold, where its volume is mounted."""

    # populate_by_name: the fields below with an alias (keys other sides read too, declared
    # in airig/common/shared_settings.py) are still given by their names.
    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False, populate_by_name=True)

    ollama_url: str = shared.setting(shared.OLLAMA_URL)
    airig_ollama_models: CommaList = shared.setting(shared.OLLAMA_MODELS)  # "" -> []
    ollama_models_dir: Path = Path("/ollama/models")

    whisper_url: str = shared.setting(shared.WHISPER_URL)
    airig_whisper_models: CommaList = shared.setting(shared.WHISPER_MODELS)
    whisper_hub_dir: Path = Path("/whisper-cache/hub")

    comfyui_url: str = shared.setting(shared.COMFYUI_URL)
    airig_comfyui_manifest: Path = Path("/manifest/models.yaml")
    comfyui_root: Path = Path("/comfyui")

    # Where verified digests are remembered (on the model volume, so every run sees it).
    airig_verify_cache: Path | None = None
    # How long to wait for a server to answer its health endpoint before giving up.
    airig_server_wait_seconds: float = 300.0
    # The pause between the two size checks that prove a file is no longer growing.
    airig_verify_settle_seconds: float = 1.0

    @field_validator("airig_ollama_models", "airig_whisper_models", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value
