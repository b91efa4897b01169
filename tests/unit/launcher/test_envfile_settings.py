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
    assert (s.profile, s.source_of("AIRIG_PROFILE")) == ("gpu-amd", ".env")
    monkeypatch.setenv("AIRIG_PROFILE", "gpu-nvidia")
    s = load_settings(kit)
    assert (s.profile, s.source_of("AIRIG_PROFILE")) == ("gpu-nvidia", "environment")
    s = load_settings(kit, {"AIRIG_PROFILE": "cpu"})
    assert (s.profile, s.source_of("AIRIG_PROFILE")) == ("cpu", "flag")
    assert s.ollama_port == 1234 and (s.brain_port, s.source_of("BRAIN_PORT")) == (8080, "default")
    # a flag not given (None or "") leaves the lower layers' value
    s = load_settings(kit, {"AIRIG_PROFILE": None})
    assert (s.profile, s.source_of("AIRIG_PROFILE")) == ("gpu-nvidia", "environment")


def test_values_are_typed_and_empty_means_what_compose_reads(kit, monkeypatch):
    for key in ("AIRIG_PROFILE", "AIRIG_BASE_IMAGE", "AIRIG_GPU_PROBE_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    (kit / ".env").write_text(
        "AIRIG_PROFILE=\nAIRIG_BASE_IMAGE=\nAIRIG_GPU_PROBE_TIMEOUT=\n"
        "AIRIG_BRAIN_GPUS=0, 3\nAIRIG_OLLAMA_MODELS=a:1b, b ,\nAIRIG_CPU_WORKERS=0\n"
    )
    s = load_settings(kit)
    assert s.profile is None  # empty: detect
    # ${AIRIG_BASE_IMAGE:-python:3.12-slim}: empty is the default, as compose reads it
    assert (s.base_image, s.gpu_probe_timeout) == ("python:3.12-slim", 120.0)
    assert (s.brain_gpus, s.ollama_models, s.cpu_workers) == ((0, 3), ("a:1b", "b"), 0)
    assert s.value_of("AIRIG_BRAIN_GPUS") == "0,3" and s.value_of("OLLAMA_PORT") == "11434"
    with pytest.raises(KeyError):
        s.value_of("NOT_A_KNOB")


def test_the_bug_report_keeps_the_keys_the_launcher_does_not_read(kit, monkeypatch):
    monkeypatch.setenv("AIRIG_SOMETHING_NEW", "x")
    (kit / ".env").write_text("OLLAMA_KEEP_ALIVE=-1\nBRAIN_ADMIN_TOKEN=t0ken\n")
    values = load_settings(kit).report_values()
    assert values["OLLAMA_KEEP_ALIVE"] == "-1" and values["AIRIG_SOMETHING_NEW"] == "x"
    assert values["BRAIN_ADMIN_TOKEN"] == "t0ken" and values["AIRIG_NETWORK"] == "ai-network"
    assert "t0ken" not in repr(load_settings(kit))  # secrets stay out of tracebacks


@pytest.mark.parametrize(
    "line,match",
    [
        ("AIRIG_PROFILE=gpu-apple", "unknown profile"),
        ("OLLAMA_PORT=99999", "not a TCP port"),
        ("OLLAMA_PORT=abc", "not a whole number"),
        ("AIRIG_CPU_WORKERS=-1", "negative"),
        ("AIRIG_GPU_PROBE_TIMEOUT=nan", "not a positive number of seconds"),
        ("AIRIG_GPU_PROBE_TIMEOUT=0", "not a positive number of seconds"),
        ("AIRIG_BRAIN_GPUS=0,x", "not a list of GPU indexes"),
        ("AIRIG_PROJECT_PREFIX=Airig", "cannot name compose projects"),
        ("AIRIG_RIG_NAME=my rig", "not a plain name"),
        ("AIRIG_JOIN_TOKEN=t0ken-without-url", "must be set together"),
    ],
)
def test_bad_values_name_the_key(kit, line, match, monkeypatch):
    monkeypatch.delenv("AIRIG_PROFILE", raising=False)
    (kit / ".env").write_text(line + "\n")
    with pytest.raises(ConfigError, match=match) as info:
        load_settings(kit)
    assert info.value.hint and "\n" not in str(info.value)


def test_a_refusal_names_the_value_and_where_it_came_from(kit, monkeypatch):
    monkeypatch.setenv("OLLAMA_PORT", "99999")
    with pytest.raises(ConfigError) as info:
        load_settings(kit)
    assert (info.value.message, info.value.hint) == (
        "OLLAMA_PORT=99999 is not a TCP port (from environment)",
        "set OLLAMA_PORT to 1-65535 in .env",
    )
    monkeypatch.delenv("OLLAMA_PORT")
    with pytest.raises(ConfigError) as info:
        load_settings(kit, {"AIRIG_PROFILE": "gpu-apple"})
    assert info.value.message == "AIRIG_PROFILE='gpu-apple' is an unknown profile (from flag)"
