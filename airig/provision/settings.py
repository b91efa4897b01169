"""The one settings object of an init container, read from its environment.

Compose passes these variables (see ``02-compute/compose.yaml``); the names are the
contract between the compose files and this package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CommaList = Annotated[list[str], NoDecode]


class ProvisionSettings(BaseSettings):
    """Where each server is, which models it must hold, where its volume is mounted."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False)

    ollama_url: str = "http://ollama:11434"
    airig_ollama_models: CommaList = Field(default_factory=list)
    ollama_models_dir: Path = Path("/ollama/models")

    whisper_url: str = "http://whisper:8000"
    airig_whisper_models: CommaList = Field(default_factory=list)
    whisper_hub_dir: Path = Path("/whisper-cache/hub")

    comfyui_url: str = "http://comfyui:8188"
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
