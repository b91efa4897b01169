"""The ComfyUI model manifest (``02-compute/comfyui/models.yaml``), validated.

Each entry names one file: where to download it (``url``), which ComfyUI model folder
it belongs in (``folder``, e.g. checkpoints), the file name there (``filename``), and
what it must be (``sha256``, ``size`` in bytes). A bad entry fails with its index and
filename so the user knows which line to fix.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, HttpUrl, ValidationError
from pydantic_core import ErrorDetails

from airig.common.errors import ConfigError

_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+ -]*")


def _path_component(value: str) -> str:
    """One plain path component: no separators, no '..', nothing hidden."""
    if not _SAFE_NAME.fullmatch(value) or value in {".", ".."}:
        raise ValueError(f"{value!r} must be a plain name (letters, digits, _ . + - space)")
    return value


def _lower_hex(value: str) -> str:
    return value.lower()


class ComfyModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: HttpUrl
    folder: Annotated[str, AfterValidator(_path_component)]
    filename: Annotated[str, AfterValidator(_path_component)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$"), AfterValidator(_lower_hex)]
    size: Annotated[int, Field(gt=0)]

    @property
    def name(self) -> str:
        """How events and errors name this model: ``<folder>/<filename>``."""
        return f"{self.folder}/{self.filename}"


class ComfyManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[ComfyModel] = Field(default_factory=list)


def _describe(error: ErrorDetails, raw_models: object) -> str:
    location = error["loc"]
    if len(location) >= 2 and location[0] == "models" and isinstance(location[1], int):
        index = location[1]
        entry = raw_models[index] if isinstance(raw_models, list) else None
        label = entry.get("filename") if isinstance(entry, dict) else None
        field = ".".join(str(part) for part in location[2:]) or "entry"
        return f"entry {index + 1}{f' ({label})' if label else ''}: {field}: {error['msg']}"
    return f"{'.'.join(str(p) for p in location) or 'file'}: {error['msg']}"


def load_manifest(path: Path) -> ComfyManifest:
    """Read and validate the manifest; ConfigError listing every bad entry."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"ComfyUI model manifest {path} not found", "set AIRIG_COMFYUI_MANIFEST"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"ComfyUI model manifest {path} is not valid YAML: {exc}") from None
    raw = {} if raw is None else raw
    try:
        manifest = ComfyManifest.model_validate(raw)
    except ValidationError as exc:
        models = raw.get("models") if isinstance(raw, dict) else None
        problems = "; ".join(_describe(e, models) for e in exc.errors())
        raise ConfigError(
            f"ComfyUI model manifest {path}: {problems}",
            "each entry needs url, folder, filename, sha256 (64 hex, quoted) and size (bytes)",
        ) from None
    names = [m.name for m in manifest.models]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"ComfyUI model manifest {path}: duplicate entries {duplicates}")
    return manifest
