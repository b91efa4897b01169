from __future__ import annotations

from pathlib import Path

import pytest

from airig.common.errors import ConfigError
from airig.launcher.envfile import ensure_env, missing_keys, read_env
from airig.launcher.settings import load_settings

EXAMPLE = """# comment kept
AIRIG_PROFILE=
OLLAMA_PORT=11434
BRAIN_ADMIN_TOKEN=change-me
WORKER_BOOTSTRAP_TOKEN=change-me
"""


@pytest.fixture
def kit(tmp_path: Path) -> Path:
    (tmp_path / ".env.example").write_text(EXAMPLE)
    return tmp_path


def test_creates_env_and_generates_secrets_once(kit):
    report = ensure_env(kit / ".env", kit / ".env.example")
    assert report.created and report.generated_secrets == [
        "BRAIN_ADMIN_TOKEN",
        "WORKER_BOOTSTRAP_TOKEN",
    ]
    first = read_env(kit / ".env")
    assert (
        len(first["BRAIN_ADMIN_TOKEN"]) >= 40
        and first["BRAIN_ADMIN_TOKEN"] != first["WORKER_BOOTSTRAP_TOKEN"]
    )
    assert "# comment kept" in (kit / ".env").read_text()
    assert (kit / ".env").stat().st_mode & 0o077 == 0  # secrets: owner only
    again = ensure_env(kit / ".env", kit / ".env.example")
    assert not again.created and again.generated_secrets == [] and again.added_keys == []
    assert read_env(kit / ".env") == first


def test_new_keys_are_added_and_user_values_kept(kit):
    (kit / ".env").write_text(
        "OLLAMA_PORT=12000\nBRAIN_ADMIN_TOKEN=mine\nWORKER_BOOTSTRAP_TOKEN=w\n"
    )
    assert missing_keys(kit / ".env", kit / ".env.example") == ["AIRIG_PROFILE"]
    report = ensure_env(kit / ".env", kit / ".env.example")
    assert report.added_keys == ["AIRIG_PROFILE"]
    values = read_env(kit / ".env")
    assert values["OLLAMA_PORT"] == "12000" and values["BRAIN_ADMIN_TOKEN"] == "mine"


def test_missing_example_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="missing"):
        ensure_env(tmp_path / ".env", tmp_path / ".env.example")


def test_precedence_flag_over_environment_over_env_file(kit, monkeypatch):
    (kit / ".env").write_text("AIRIG_PROFILE=gpu-amd\nOLLAMA_PORT=1234\n")
    s = load_settings(kit)
    assert (s.get("AIRIG_PROFILE"), s.source_of("AIRIG_PROFILE")) == ("gpu-amd", ".env")
    monkeypatch.setenv("AIRIG_PROFILE", "gpu-nvidia")
    s = load_settings(kit)
    assert (s.get("AIRIG_PROFILE"), s.source_of("AIRIG_PROFILE")) == ("gpu-nvidia", "environment")
    s = load_settings(kit, {"AIRIG_PROFILE": "cpu"})
    assert (s.get("AIRIG_PROFILE"), s.source_of("AIRIG_PROFILE")) == ("cpu", "flag")
    assert s.get_int("OLLAMA_PORT") == 1234 and s.source_of("BRAIN_PORT") == "default"


@pytest.mark.parametrize(
    "line,match",
    [
        ("AIRIG_PROFILE=gpu-intel", "unknown profile"),
        ("OLLAMA_PORT=99999", "not a TCP port"),
        ("OLLAMA_PORT=abc", "not a whole number"),
        ("AIRIG_CPU_WORKERS=-1", "negative"),
    ],
)
def test_bad_values_name_the_key(kit, line, match, monkeypatch):
    monkeypatch.delenv("AIRIG_PROFILE", raising=False)
    (kit / ".env").write_text(line + "\n")
    with pytest.raises(ConfigError, match=match) as info:
        load_settings(kit)
    assert info.value.hint
