"""Ollama model names and where their manifests live on disk.

Follows upstream ``types/model/name.go``: ``[host/][namespace/][kind/]model[:tag]`` with
defaults ``registry.ollama.ai``, ``library`` and ``latest``; the manifest of a name is
``manifests/<host>/<namespace>/[<kind>/]<model>/<tag>`` under the models directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from airig.common.errors import ConfigError

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
KINDS = frozenset({"skill", "agent", "mcp"})

_PART = {
    "host": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,349}"),
    "namespace": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,79}"),
    "model": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}"),
    "tag": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}"),
}


def _name_pattern() -> str:
    """``OllamaName.parse``'s rules as one JSON-schema pattern: what a valid name looks
    like, for the OpenAPI schema (the parser stays the check)."""
    part = {key: regex.pattern for key, regex in _PART.items()}
    host, namespace, model, tag = part["host"], part["namespace"], part["model"], part["tag"]
    kind = "(?:" + "|".join(sorted(KINDS)) + ")"
    last = f"{model}(?::{tag})?"
    shapes = [
        last,  # model[:tag]
        f"{namespace}/{last}",  # namespace/model[:tag]
        f"{namespace}/{kind}/{last}",  # namespace/kind/model[:tag]
        f"{host}/(?!{kind}/){namespace}/{last}",  # host/namespace/model[:tag]
        f"{host}/{namespace}/{kind}/{last}",  # host/namespace/kind/model[:tag]
    ]
    # parse() strips surrounding white space first (Python's and the pattern's \s agree).
    return r"^\s*(?:" + "|".join(f"(?:{shape})" for shape in shapes) + r")\s*$"


OLLAMA_NAME_PATTERN = _name_pattern()


@dataclass(frozen=True)
class OllamaName:
    host: str
    namespace: str
    model: str
    tag: str
    kind: str = ""

    @classmethod
    def parse(cls, text: str) -> OllamaName:
        """Parse as Ollama does; ConfigError naming the text when it is not a valid name."""
        rest = text.strip()
        tag = DEFAULT_TAG
        if rest.rfind(":") > rest.rfind("/"):
            rest, tag = rest.rsplit(":", 1)
        parts = rest.split("/")
        host, namespace, kind = DEFAULT_HOST, DEFAULT_NAMESPACE, ""
        if len(parts) >= 3 and parts[-2] in KINDS:
            kind = parts.pop(-2)
        if len(parts) == 3:
            host = parts[0].split("://", 1)[-1]
        if len(parts) >= 2:
            namespace = parts[-2]
        name = cls(host, namespace, parts[-1], tag, kind)
        if len(parts) > 3 or not name._valid():
            raise ConfigError(
                f"invalid Ollama model name {text!r}",
                "use name[:tag] or namespace/name[:tag], e.g. qwen2.5:7b-instruct-q4_K_M",
            )
        return name

    def _valid(self) -> bool:
        fields = {"host": self.host, "namespace": self.namespace, "model": self.model}
        fields["tag"] = self.tag
        return all(_PART[key].fullmatch(value) for key, value in fields.items())

    def manifest_path(self, models_dir: Path) -> Path:
        kind = (self.kind,) if self.kind else ()
        top = models_dir / "manifests" / self.host / self.namespace
        return top.joinpath(*kind, self.model, self.tag)

    @property
    def display(self) -> str:
        """The shortest form, as `ollama list` prints it."""
        prefix = ""
        if self.host != DEFAULT_HOST:
            prefix = f"{self.host}/{self.namespace}/"
        elif self.namespace != DEFAULT_NAMESPACE:
            prefix = f"{self.namespace}/"
        kind = f"{self.kind}/" if self.kind else ""
        return f"{prefix}{kind}{self.model}:{self.tag}"


def blob_path(models_dir: Path, digest: str) -> Path:
    """``sha256:<hex>`` → ``blobs/sha256-<hex>`` (Ollama's file name for a digest)."""
    return models_dir / "blobs" / digest.replace(":", "-", 1)


def manifest_names(models_dir: Path) -> list[tuple[OllamaName, Path]]:
    """Every model whose manifest is on disk."""
    top = models_dir / "manifests"
    found = []
    for path in sorted(top.rglob("*")):
        if not path.is_file() or path.name.startswith("."):
            continue
        parts = path.relative_to(top).parts
        if len(parts) == 4:
            found.append((OllamaName(parts[0], parts[1], parts[2], parts[3]), path))
        elif len(parts) == 5:
            found.append((OllamaName(parts[0], parts[1], parts[3], parts[4], parts[2]), path))
    return found


def valid_ollama_name(text: str) -> bool:
    """``text`` is a model name by Ollama's own rules (what a worker may report)."""
    try:
        OllamaName.parse(text)
    except ConfigError:
        return False
    return True
