"""The Ollama stand-in's name parser against upstream's own examples.

Cases are ollama v0.20.6 types/model/name_test.go (testCases for IsValid,
TestParseNameParts, TestNameIsValidPart, TestDisplayShortest) and
internal/modelref/modelref.go (ParseRef's source suffixes).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dotenv import dotenv_values
from standins.ollama import names
from standins.ollama.names import ModelName

PART80 = "8" * 80
PART350 = "3" * 350
ROOT = Path(__file__).resolve().parents[2]

# name_test.go testCases: name -> IsValid() of ParseNameBare (no defaults merged)
BARE_VALIDITY = {
    "": False,
    "_why/_the/_lucky:_stiff": True,
    "h/n/m:t": True,
    "host/namespace/model:tag": True,
    "host/namespace/model": False,
    "namespace/model": False,
    "model": False,
    f"{PART80}/{PART80}/{PART80}:{PART80}": True,
    f"{PART350}/{PART80}/{PART80}:{PART80}": True,
    "h/nn/mm:t": True,
    "m": False,
    "n/m:": False,
    "h/n/m": False,
    "@t": False,
    "m@d": False,
    "^": False,
    "mm:": False,
    "/nn/mm": False,
    "//": False,
    "//mm": False,
    "hh//": False,
    "//mm:@": False,
    "00@": False,
    "@": False,
    "-hh/nn/mm:tt": False,
    "hh/-nn/mm:tt": False,
    "hh/nn/-mm:tt": False,
    "hh/nn/mm:-tt": False,
    "host:https/namespace/model:tag": True,
    "host/name:space/model:tag": False,
}


@pytest.mark.parametrize(("text", "valid"), BARE_VALIDITY.items())
def test_bare_names_are_valid_exactly_when_upstream_says(text: str, valid: bool) -> None:
    assert ModelName.parse_bare(text).is_valid() is valid


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        (
            "registry.ollama.ai/library/dolphin-mistral:7b-v2.6-dpo-laser-q6_K",
            ("registry.ollama.ai", "library", "dolphin-mistral", "7b-v2.6-dpo-laser-q6_K"),
        ),
        ("scheme://host:port/namespace/model:tag", ("host:port", "namespace", "model", "tag")),
        ("host:port/namespace/model", ("host:port", "namespace", "model", "latest")),
        ("namespace/model", ("registry.ollama.ai", "namespace", "model", "latest")),
        ("model", ("registry.ollama.ai", "library", "model", "latest")),
        ("xx", ("registry.ollama.ai", "library", "xx", "latest")),
        (f"{PART350}/{PART80}/{PART80}:{PART80}", (PART350, PART80, PART80, PART80)),
    ],
)
def test_parse_merges_upstream_defaults(text: str, parts: tuple[str, ...]) -> None:
    assert ModelName.parse(text).parts() == parts


@pytest.mark.parametrize(
    "text",
    [
        "bad name",  # space
        "a$b:!!",
        "x" * 300,  # model part over 80 bytes
        f"{PART80}8:tag",
        f"model:{PART80}8",
        "h" * 351 + "/n/m:t",
        "ns.dot/model",  # "." is not allowed in a namespace
        "qwen2.5:7b/extra",  # the tag is only cut after the last "/"
        "modèle",  # non-ASCII
        "model:",
        "/model",
        "-model",
    ],
)
def test_parse_refuses_what_upstream_refuses(text: str) -> None:
    with pytest.raises(names.InvalidName, match="^invalid model name$"):
        ModelName.parse(text)


@pytest.mark.parametrize(
    ("kind", "part", "valid"),
    [
        ("host", "", False),
        ("host", "a", True),
        ("host", "a.", True),
        ("host", "a.b", True),
        ("host", "a:123", True),
        ("host", "a:123/aa/bb", False),
        ("namespace", "bb", True),
        ("namespace", "a.", False),
        ("model", "-h", False),
    ],
)
def test_is_valid_part(kind: str, part: str, valid: bool) -> None:
    assert names.is_valid_part(kind, part) is valid


@pytest.mark.parametrize(
    ("text", "shortest"),
    [
        ("registry.ollama.ai/library/model:latest", "model:latest"),
        ("registry.ollama.ai/library/model:tag", "model:tag"),
        ("registry.ollama.ai/namespace/model:tag", "namespace/model:tag"),
        ("host/namespace/model:tag", "host/namespace/model:tag"),
        ("host/library/model:tag", "host/library/model:tag"),
    ],
)
def test_display_shortest(text: str, shortest: str) -> None:
    assert ModelName.parse(text).display == shortest


def test_parse_ref_trims_and_reads_source_suffixes() -> None:
    assert names.parse_ref("  qwen2.5:0.5b ") == (ModelName.parse("qwen2.5:0.5b"), "")
    assert names.parse_ref("qwen2.5:0.5b:local") == (ModelName.parse("qwen2.5:0.5b"), "local")
    assert names.parse_ref("gpt-oss:20b-cloud") == (ModelName.parse("gpt-oss:20b"), "cloud")
    with pytest.raises(names.ModelRequired, match="^model is required$"):
        names.parse_ref("   ")
    with pytest.raises(names.ConflictingSource) as caught:
        names.parse_ref("m:local:cloud")
    assert str(caught.value) == 'use either :local or :cloud, not both: "m:local:cloud"'
    # modelref.go toLegacyCloudPullName: a cloud pull is of the stub tag
    assert names.pull_name("gpt-oss:20b:cloud") == ModelName.parse("gpt-oss:20b-cloud")
    assert names.pull_name("gpt-oss:cloud") == ModelName.parse("gpt-oss:cloud")


def test_catalogue_has_every_default_model_and_the_knobs_change_it(monkeypatch) -> None:
    for key in ("STANDIN_REGISTRY_MODELS", "STANDIN_UNKNOWN_MODELS", "STANDIN_FAIL_MIDSTREAM"):
        monkeypatch.delenv(key, raising=False)
    defaults = dotenv_values(ROOT / ".env.example")["AIRIG_OLLAMA_MODELS"] or ""
    assert defaults, "AIRIG_OLLAMA_MODELS has no default in .env.example"
    for model in defaults.split(","):
        assert names.in_catalogue(ModelName.parse(model)), model
    assert not names.in_catalogue(ModelName.parse("ghost"))
    assert not names.in_catalogue(ModelName.parse("qwen2.5:99b"))  # tags are exact
    monkeypatch.setenv("STANDIN_REGISTRY_MODELS", "ghost, me/private:v1")
    assert names.in_catalogue(ModelName.parse("ghost:latest"))
    assert names.in_catalogue(ModelName.parse("me/private:v1"))
    monkeypatch.setenv("STANDIN_UNKNOWN_MODELS", "tinyllama")
    assert not names.in_catalogue(ModelName.parse("tinyllama"))
    assert names.in_catalogue(ModelName.parse("midstream-fail:1b"))  # found, breaks later
