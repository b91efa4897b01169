"""Model names and the 'registry' catalogue of the Ollama stand-in.

Name rules are upstream's (ollama v0.20.6):
  - internal/modelref/modelref.go ParseRef: trim spaces, "" is "model is required", a
    `:local` / `:cloud` (or `:<tag>-cloud`) suffix names the source, both at once is
    ErrConflictingSourceSuffix.
  - types/model/name.go ParseNameBare: the tag is cut at the last ":" only when it comes
    after the last "/"; then model, namespace, host are cut at "/" from the right; a
    separator with nothing on one side gives the part "!MISSING!" (cutPromised); a
    `scheme://` before the host is dropped into ProtocolScheme. Merge fills the defaults
    (registry.ollama.ai / library / latest).
  - types/model/name.go IsValid -> IsFullyQualified -> isValidPart: every part 1..80
    bytes (host 1..350), first byte [A-Za-z0-9_], then [A-Za-z0-9_-] plus "." (not in a
    namespace) and ":" (host only).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
MISSING_PART = "!MISSING!"  # name.go MissingPart
INVALID_MODEL_NAME = "invalid model name"  # types/errtypes/errtypes.go InvalidModelNameErrMsg
MODEL_REQUIRED = "model is required"  # internal/modelref/modelref.go ErrModelRequired
CONFLICTING_SOURCE = "use either :local or :cloud, not both"  # ErrConflictingSourceSuffix

# The models the stand-in's "registry" serves (every other pull is refused as upstream's
# registry 404 is: "pull model manifest: file does not exist"). It holds every default of
# AIRIG_OLLAMA_MODELS in .env.example and every model the tests pull; STANDIN_REGISTRY_MODELS
# (comma list) adds more. tests/unit/test_standin_ollama_names.py checks .env.example.
DEFAULT_CATALOGUE = (
    "qwen2.5:7b-instruct-q4_K_M",  # .env.example AIRIG_OLLAMA_MODELS
    "nomic-embed-text:latest",  # .env.example AIRIG_OLLAMA_MODELS
    "qwen2.5:0.5b",
    "qwen2.5:7b",
    "llama3.2:1b",
    "llama3.1:8b",
    "tinyllama:latest",
    "qwen2.5vl:7b",  # a vision model (is_vision_model), the one the kit's hints name
    "llava:7b",
)


class NameError_(ValueError):
    """A name upstream refuses; `str()` is upstream's error text."""


class ModelRequired(NameError_):
    def __init__(self) -> None:
        super().__init__(MODEL_REQUIRED)


class InvalidName(NameError_):
    def __init__(self) -> None:
        super().__init__(INVALID_MODEL_NAME)


class ConflictingSource(NameError_):
    def __init__(self, raw: str) -> None:
        # fmt.Errorf("%w: %q", ErrConflictingSourceSuffix, raw)
        super().__init__(f'{CONFLICTING_SOURCE}: "{raw}"')


def _is_name_char(char: str) -> bool:
    # name.go isAlphanumericOrUnderscore (ASCII only: any other byte fails)
    return char == "_" or (char.isascii() and char.isalnum())


def is_valid_part(kind: str, part: str) -> bool:
    """name.go isValidPart for kind host | namespace | model | tag."""
    if not 1 <= len(part.encode()) <= (350 if kind == "host" else 80):
        return False
    if not _is_name_char(part[0]):
        return False
    for char in part[1:]:
        if char in "_-":
            continue
        if char == ".":
            if kind == "namespace":
                return False
        elif char == ":":
            if kind != "host":
                return False
        elif not _is_name_char(char):
            return False
    return True


def _cut_promised(text: str, sep: str) -> tuple[str, str, bool]:
    """name.go cutPromised: cut at the last `sep`; an empty side becomes MISSING_PART."""
    index = text.rfind(sep)
    if index < 0:
        return text, "", False
    before, after = text[:index], text[index + len(sep) :]
    return before or MISSING_PART, after or MISSING_PART, True


@dataclass(frozen=True)
class ModelName:
    host: str
    namespace: str
    model: str
    tag: str

    @classmethod
    def parse_bare(cls, text: str) -> ModelName:
        """name.go ParseNameBare: the parts as written, "" where none was given."""
        tag = ""
        if text.rfind(":") > text.rfind("/"):
            text, tag, _ = _cut_promised(text, ":")
        text, model, promised = _cut_promised(text, "/")
        if not promised:
            return cls("", "", text, tag)
        text, namespace, promised = _cut_promised(text, "/")
        if not promised:
            return cls("", text, model, tag)
        _scheme, found, host = text.partition("://")
        return cls(host if found else text, namespace, model, tag)

    @classmethod
    def parse(cls, text: str) -> ModelName:
        """name.go ParseName (Merge with the defaults) + IsValid; InvalidName if not."""
        bare = cls.parse_bare(text)
        name = cls(
            bare.host or DEFAULT_HOST,
            bare.namespace or DEFAULT_NAMESPACE,
            bare.model,
            bare.tag or DEFAULT_TAG,
        )
        if not name.is_valid():
            raise InvalidName
        return name

    def is_valid(self) -> bool:
        parts = zip(("host", "namespace", "model", "tag"), self.parts(), strict=True)
        return all(is_valid_part(kind, part) for kind, part in parts)

    def parts(self) -> tuple[str, str, str, str]:
        return self.host, self.namespace, self.model, self.tag

    @property
    def display(self) -> str:
        """The shortest form, as `ollama list` prints it (name.go DisplayShortest)."""
        prefix = ""
        if self.host.lower() != DEFAULT_HOST:
            prefix = f"{self.host}/{self.namespace}/"
        elif self.namespace.lower() != DEFAULT_NAMESPACE:
            prefix = f"{self.namespace}/"
        return f"{prefix}{self.model}:{self.tag}"


def _source_suffix(raw: str) -> tuple[str, str]:
    """modelref.go parseSourceSuffix: (base, "local" | "cloud" | "")."""
    index = raw.rfind(":")
    if index < 0:
        return raw, ""
    suffix_raw = raw[index + 1 :].strip()
    suffix = suffix_raw.lower()
    if suffix in ("cloud", "local"):
        return raw[:index], suffix
    if "/" not in suffix_raw and suffix.endswith("-cloud"):
        return raw[: index + 1] + suffix_raw[: -len("-cloud")], "cloud"
    return raw, ""


def parse_ref(raw: str) -> tuple[ModelName, str]:
    """server/model_resolver.go parseAndValidateModelRef: (name, source). Raises
    ModelRequired, ConflictingSource or InvalidName (upstream's three refusals)."""
    raw = raw.strip()
    if not raw:
        raise ModelRequired
    base, source = _source_suffix(raw)
    if source and _source_suffix(base)[1]:
        raise ConflictingSource(raw)
    return ModelName.parse(base), source


def pull_name(raw: str) -> ModelName:
    """server/model_resolver.go parseNormalizePullModelRef: a `:cloud` ref becomes the
    legacy stub name (modelref.go toLegacyCloudPullName)."""
    raw = raw.strip()
    if not raw:
        raise ModelRequired
    base, source = _source_suffix(raw)
    if source and _source_suffix(base)[1]:
        raise ConflictingSource(raw)
    if source == "cloud":
        base = base + "-cloud" if base.rfind(":") > base.rfind("/") else base + ":cloud"
    return ModelName.parse(base)


def env_list(name: str) -> set[str]:
    return {item.strip() for item in os.environ.get(name, "").split(",") if item.strip()}


def _names(items: set[str] | tuple[str, ...]) -> set[ModelName]:
    found = set()
    for item in items:
        try:
            found.add(ModelName.parse(item))
        except InvalidName:
            continue
    return found


def fails_midstream(name: ModelName) -> bool:
    """STANDIN_FAIL_MIDSTREAM (names or bare model names) or a name starting
    "midstream-fail": the registry has it, but its blob download breaks halfway."""
    listed = env_list("STANDIN_FAIL_MIDSTREAM")
    return name.model.startswith("midstream-fail") or bool({name.display, name.model} & listed)


def in_catalogue(name: ModelName) -> bool:
    """Whether the stand-in's registry has `name` (exact host/namespace/model/tag, as a
    registry serves manifests by tag)."""
    unknown = env_list("STANDIN_UNKNOWN_MODELS")
    if {name.display, name.model} & unknown:
        return False
    if fails_midstream(name):
        return True
    known = _names(DEFAULT_CATALOGUE) | _names(env_list("STANDIN_REGISTRY_MODELS"))
    return name in known
