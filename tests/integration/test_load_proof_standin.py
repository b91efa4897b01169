"""Ollama's load proof for real: ollama-init's run against the Ollama stand-in process
(127.0.0.1), which loads on the CPU unless STANDIN_VRAM_FRACTION says otherwise."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import requests
from standins import conftest_helpers as helpers

from airig.provision.events import Emitter
from airig.provision.runner import Mode, Service, run
from airig.provision.settings import ProvisionSettings

standins = helpers.standins  # the factory fixture, used by name below
QWEN, EMBED = "qwen2.5:7b-instruct-q4_K_M", "nomic-embed-text"


@pytest.fixture
def init(standins, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """ollama-init with AIRIG_LOAD_PROOF=gpu against a fresh stand-in: (code, events, url)."""
    monkeypatch.setenv("AIRIG_LOAD_PROOF", "gpu")
    monkeypatch.setenv("OLLAMA_IMAGE_PROVED", "ollama/ollama:0.20.6")

    def go(models: list[str], env: dict[str, str] | None = None):
        server = standins("ollama", env={"STANDIN_MODEL_BYTES": "300000", **(env or {})},
                          root=tmp_path / "ollama" / "models")  # fmt: skip
        settings = ProvisionSettings(
            ollama_url=server.url,
            ollama_models_dir=server.root,
            airig_ollama_models=models,
            airig_verify_cache=tmp_path / "verified.json",
            airig_server_wait_seconds=10,
            airig_verify_settle_seconds=0.05,
        )
        out = io.StringIO()
        code = run(Service.ollama, Mode.ensure, settings=settings, emitter=Emitter("ollama", out))
        return code, [json.loads(line) for line in out.getvalue().splitlines()], server.url

    return go


def proof_line(events: list[dict]) -> dict:
    [line] = [e for e in events if e["event"] == "load_proof"]
    assert events[-1] is line  # after every model verified
    return line


def test_weights_on_the_cpu_fail_the_init_with_exit_3(init) -> None:
    code, events, url = init([QWEN, EMBED])
    assert code == 3
    assert {e["model"] for e in events if e["event"] == "verified"} == {QWEN, EMBED}
    line = proof_line(events)
    assert (line["status"], line["size_vram"], line["image"]) == (
        "failed",
        0,
        "ollama/ollama:0.20.6",
    )
    assert line["model"] in {QWEN, f"{EMBED}:latest"}
    assert line["said"].startswith("weights not on the GPU: /api/ps size_vram 0 of size ")
    assert requests.get(f"{url}/api/ps", timeout=5).json() == {"models": []}  # unloaded


def test_weights_on_the_gpu_pass_and_the_model_is_unloaded(init) -> None:
    code, events, url = init([QWEN], {"STANDIN_VRAM_FRACTION": "1"})
    line = proof_line(events)
    assert (code, line["status"], line["model"]) == (0, "passed", QWEN)
    assert line["size_vram"] > 0
    assert requests.get(f"{url}/api/ps", timeout=5).json() == {"models": []}


def test_an_embedding_only_model_is_proved_through_embed(init) -> None:
    code, events, _ = init([EMBED], {"STANDIN_VRAM_FRACTION": "1"})
    line = proof_line(events)
    assert (code, line["status"], line["model"]) == (0, "passed", f"{EMBED}:latest")
    assert "embedding only" in line["said"]
