"""The ComfyUI manifest: the shipped file loads, and every bad entry is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from airig.common.errors import ConfigError
from airig.provision.manifest import load_manifest

REPO = Path(__file__).resolve().parents[3]
GOOD = {
    "url": "https://example.org/v1-5.safetensors",
    "folder": "checkpoints",
    "filename": "v1-5.safetensors",
    "sha256": "AB" * 32,
    "size": 1234,
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(text)
    return path


def entry_yaml(**changes: object) -> str:
    fields = {**GOOD, **changes}
    body = "\n".join(f"    {key}: {value}" for key, value in fields.items() if value is not None)
    return "  - " + body.lstrip()


def test_shipped_manifest_is_valid_and_empty() -> None:
    assert load_manifest(REPO / "02-compute" / "comfyui" / "models.yaml").models == []


def test_good_entry_loads_with_lowercase_digest(tmp_path: Path) -> None:
    [model] = load_manifest(write(tmp_path, "models:\n" + entry_yaml())).models
    assert model.sha256 == "ab" * 32 and model.name == "checkpoints/v1-5.safetensors"


def test_empty_file_means_no_models(tmp_path: Path) -> None:
    assert load_manifest(write(tmp_path, "# nothing yet\n")).models == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sha256": "abc"}, r"entry 2 \(two.safetensors\): sha256: String should match"),
        ({"size": 0}, "size: Input should be greater than 0"),
        ({"size": None}, "size: Field required"),
        ({"url": "ftp://x/y"}, "url: URL scheme should be"),
        ({"folder": "../etc"}, "folder: Value error"),
        ({"filename": "sub/x.safetensors"}, "filename: Value error"),
        ({"color": "blue"}, "color: Extra inputs are not permitted"),
    ],
)
def test_bad_entries_are_named(tmp_path: Path, change: dict, message: str) -> None:
    text = (
        "models:\n" + entry_yaml() + "\n" + entry_yaml(**{"filename": "two.safetensors", **change})
    )
    with pytest.raises(ConfigError, match=message) as caught:
        load_manifest(write(tmp_path, text))
    assert "entry 2" in caught.value.message and "entry 1 " not in caught.value.message


def test_duplicates_fail(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="duplicate"):
        load_manifest(write(tmp_path, "models:\n" + entry_yaml() + "\n" + entry_yaml()))


def test_missing_and_unparseable_files_fail(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_manifest(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_manifest(write(tmp_path, "models: [\n"))
    with pytest.raises(ConfigError, match="models: Input should be a valid list"):
        load_manifest(write(tmp_path, "models: 3\n"))
