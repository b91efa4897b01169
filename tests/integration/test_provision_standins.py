"""Provision for real against the stand-in servers (127.0.0.1 only), into tmp dirs.

Each test provisions, verifies, breaks a byte on the "volume", watches `--verify-only`
fail and `--pull` repair it, exactly what the init containers and `models verify|pull`
do inside Docker.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from standins import conftest_helpers as helpers

from airig.provision import download
from airig.provision.events import Emitter
from airig.provision.runner import Mode, Service, run
from airig.provision.settings import ProvisionSettings

standins = helpers.standins  # the factory fixture, used by name below
REPO = Path(__file__).resolve().parents[2]
QWEN, EMBED = "qwen2.5:7b-instruct-q4_K_M", "nomic-embed-text"
SMALL = "Systran/faster-whisper-small"


def provision(service: Service, mode: Mode, settings: ProvisionSettings) -> tuple[int, list]:
    out = io.StringIO()
    code = run(service, mode, settings=settings, emitter=Emitter(service.value, out))
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def outcome(events: list[dict]) -> dict[str, str]:
    """model → 'verified' | 'cached' | the error, from a run's events."""
    result = {}
    for event in events:
        if event["event"] == "verified":
            result[event["model"]] = "cached" if event["cached"] else "verified"
        elif event["event"] == "failed":
            result[event["model"]] = event["error"]
    return result


def flip_byte(path: Path, offset: int = 100) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def settings(tmp_path: Path, **values: object) -> ProvisionSettings:
    base = {
        "airig_verify_cache": tmp_path / "verified.json",
        "airig_server_wait_seconds": 10,
        "airig_verify_settle_seconds": 0.05,
    }
    return ProvisionSettings(**{**base, **values})


# ---------------------------------------------------------------------------- ollama
@pytest.fixture
def ollama_settings(standins, tmp_path: Path):
    def make(env: dict[str, str] | None = None, models: list[str] | None = None):
        server = standins("ollama", env={"STANDIN_MODEL_BYTES": "300000", **(env or {})},
                          root=tmp_path / "ollama" / "models")  # fmt: skip
        return server, settings(
            tmp_path,
            ollama_url=server.url,
            ollama_models_dir=server.root,
            airig_ollama_models=models or [QWEN, EMBED],
        )

    return make


def test_ollama_pulls_verifies_caches_detects_and_repairs(ollama_settings) -> None:
    server, config = ollama_settings()
    code, events = provision(Service.ollama, Mode.ensure, config)
    assert (code, outcome(events)) == (0, {QWEN: "verified", EMBED: "verified"})
    assert any(e["event"] == "progress" and e["model"] == QWEN for e in events)
    assert set(json.loads(config.airig_verify_cache.read_text())["models"]) == {QWEN, EMBED}

    code, events = provision(Service.ollama, Mode.ensure, config)
    assert (code, outcome(events)) == (0, {QWEN: "cached", EMBED: "cached"})
    code, events = provision(Service.ollama, Mode.list, config)
    listed = {e["model"]: (e["configured"], e["present"]) for e in events}
    assert (code, listed) == (0, {f"{QWEN}": (True, True), f"{EMBED}:latest": (True, True)})

    manifest = json.loads((server.root / "manifests/registry.ollama.ai/library/qwen2.5"
                           / "7b-instruct-q4_K_M").read_text())  # fmt: skip
    weights = server.root / "blobs" / manifest["layers"][0]["digest"].replace(":", "-")
    flip_byte(weights)
    code, events = provision(Service.ollama, Mode.verify, config)
    assert code == 1
    assert "sha256 mismatch" in outcome(events)[QWEN] and outcome(events)[EMBED] == "cached"
    assert weights.exists(), "verify-only must change nothing"

    code, events = provision(Service.ollama, Mode.pull, config)
    assert (code, outcome(events)[QWEN]) == (0, "verified")
    assert provision(Service.ollama, Mode.verify, config)[0] == 0


def test_ollama_error_line_mid_stream_fails_naming_model_and_rerun_resumes(
    ollama_settings, tmp_path: Path
) -> None:
    server, config = ollama_settings({"STANDIN_FAIL_MIDSTREAM": EMBED}, [EMBED])
    code, events = provision(Service.ollama, Mode.ensure, config)
    assert code == 1
    assert outcome(events)[EMBED].startswith(f"ollama model '{EMBED}': max retries exceeded")
    partials = list((server.root / "blobs").glob("*-partial*"))
    assert partials, "the failed pull should leave a partial blob to resume from"
    server.stop()

    server, config = ollama_settings(models=[EMBED])
    code, events = provision(Service.ollama, Mode.ensure, config)
    assert (code, outcome(events)) == (0, {EMBED: "verified"})


def test_ollama_server_gone_mid_pull_fails_naming_model_and_rerun_resumes(
    ollama_settings,
) -> None:
    """A network drop: the server dies while the blob streams (slow pull, 12 chunks)."""
    slow = {"STANDIN_MODEL_BYTES": str(12 * 256 * 1024), "STANDIN_PULL_CHUNK_SECONDS": "0.25"}
    server, config = ollama_settings(slow, [QWEN])
    result: dict = {}
    puller = threading.Thread(
        target=lambda: result.update(
            zip(("code", "events"), provision(Service.ollama, Mode.ensure, config), strict=True)
        )
    )
    puller.start()
    blobs = server.root / "blobs"
    deadline = time.monotonic() + 30
    while not any(p.stat().st_size > 256 * 1024 for p in blobs.glob("*-partial")):
        assert time.monotonic() < deadline, "the pull never started"
        time.sleep(0.05)
    server.process.kill()  # the connection drops mid-stream
    puller.join(60)
    assert result["code"] == 1
    error = outcome(result["events"])[QWEN]
    assert error.startswith(f"ollama model {QWEN!r}: connection lost during pull"), error
    kept = max(p.stat().st_size for p in blobs.glob("*-partial"))

    server, config = ollama_settings({"STANDIN_MODEL_BYTES": slow["STANDIN_MODEL_BYTES"]}, [QWEN])
    code, events = provision(Service.ollama, Mode.ensure, config)
    assert (code, outcome(events)) == (0, {QWEN: "verified"})
    # resumed, not restarted: the first figure already counts the bytes kept on disk
    first = next(e for e in events if e["event"] == "progress" and e["model"] == QWEN)
    assert first["completed"] >= kept > 0


def test_ollama_unknown_and_invalid_names_fail_with_the_name(ollama_settings) -> None:
    _, config = ollama_settings(models=["nonexistent-model:1b", "bad name"])
    code, events = provision(Service.ollama, Mode.ensure, config)
    errors = outcome(events)
    assert code == 1
    assert "file does not exist" in errors["nonexistent-model:1b"]
    assert "invalid Ollama model name 'bad name'" in errors["bad name"]


def test_init_container_entry_point_prints_one_line_per_failure(ollama_settings) -> None:
    server, config = ollama_settings(models=["nonexistent-model:1b"])
    env = {
        **os.environ,
        "OLLAMA_URL": server.url,
        "OLLAMA_MODELS_DIR": str(server.root),
        "AIRIG_OLLAMA_MODELS": "nonexistent-model:1b",
        "AIRIG_VERIFY_CACHE": str(config.airig_verify_cache),
        "AIRIG_SERVER_WAIT_SECONDS": "10",
    }
    done = subprocess.run([sys.executable, "-m", "airig.provision", "ollama"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1
    [line] = done.stdout.splitlines()
    assert json.loads(line)["model"] == "nonexistent-model:1b"
    assert "Traceback" not in done.stderr


def test_unreachable_server_fails_in_bounded_time(tmp_path: Path) -> None:
    config = settings(tmp_path, ollama_url=f"http://127.0.0.1:{helpers.free_port()}",
                      airig_ollama_models=[EMBED], airig_server_wait_seconds=1)  # fmt: skip
    code, events = provision(Service.ollama, Mode.ensure, config)
    assert code == 1 and "not healthy after 1 s" in events[-1]["error"]


# ---------------------------------------------------------------------------- whisper
def test_whisper_downloads_verifies_detects_and_repairs(standins, tmp_path: Path) -> None:
    server = standins("whisper", env={"STANDIN_MODEL_BYTES": "200000"})
    config = settings(tmp_path, whisper_url=server.url, whisper_hub_dir=server.root,
                      airig_whisper_models=[SMALL])  # fmt: skip
    assert outcome(provision(Service.whisper, Mode.ensure, config)[1]) == {SMALL: "verified"}
    assert outcome(provision(Service.whisper, Mode.ensure, config)[1]) == {SMALL: "cached"}
    [listed] = provision(Service.whisper, Mode.list, config)[1]
    assert (listed["model"], listed["configured"], listed["present"]) == (SMALL, True, True)

    weights = (server.root / "models--Systran--faster-whisper-small/snapshots").glob("*/model.bin")
    flip_byte(next(weights).resolve())
    code, events = provision(Service.whisper, Mode.verify, config)
    assert code == 1 and "sha256 mismatch" in outcome(events)[SMALL]
    assert provision(Service.whisper, Mode.pull, config)[0] == 0
    assert provision(Service.whisper, Mode.verify, config)[0] == 0


def test_whisper_unknown_model_fails_naming_it(standins, tmp_path: Path) -> None:
    server = standins("whisper")
    config = settings(tmp_path, whisper_url=server.url, whisper_hub_dir=server.root,
                      airig_whisper_models=["org/nonexistent-whisper"])  # fmt: skip
    code, events = provision(Service.whisper, Mode.ensure, config)
    assert code == 1
    assert "'org/nonexistent-whisper': unknown model" in outcome(events)["org/nonexistent-whisper"]


# ---------------------------------------------------------------------------- comfyui
@pytest.fixture
def comfy(standins, tmp_path: Path):
    files = standins("filehost")
    ui = standins("comfyui", root=tmp_path / "comfy")

    def make(size: int = 200_000, sha256: str | None = None) -> ProvisionSettings:
        url = f"{files.url}/files/tiny.safetensors?size={size}"
        digest = sha256 or requests.get(f"{files.url}/files/tiny.safetensors.sha256?size={size}",
                                        timeout=5).text.strip()  # fmt: skip
        manifest = tmp_path / "models.yaml"
        manifest.write_text(
            "models:\n"
            f"  - {{url: '{url}', folder: checkpoints, filename: tiny.safetensors,"
            f" sha256: '{digest}', size: {size}}}\n"
        )
        return settings(tmp_path, comfyui_url=ui.url, comfyui_root=ui.root,
                        airig_comfyui_manifest=manifest)  # fmt: skip

    make.files, make.ui = files, ui
    return make


NAME = "checkpoints/tiny.safetensors"


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """Which downloader ran, in call order: ("comfy-cli", its failure reason or None) and
    ("range", url) for the kit's own requests fallback."""
    calls: list[tuple[str, object]] = []
    real_cli, real_range = download.run_comfy_cli, download.range_download

    def cli(*args):
        reason = real_cli(*args)
        calls.append(("comfy-cli", reason))
        return reason

    def ranged(url, *args, **kwargs):
        calls.append(("range", url))
        return real_range(url, *args, **kwargs)

    monkeypatch.setattr(download, "run_comfy_cli", cli)
    monkeypatch.setattr(download, "range_download", ranged)
    return calls


def file_agents(files: helpers.StandIn, name: str) -> set[str]:
    """The User-Agent products that GET the file itself from the file host."""
    agents = set()
    for line in files.log().splitlines():
        entry = json.loads(line)
        if f"GET /files/{name}?" in entry["msg"]:
            agents.add(entry.get("agent", "").split("/")[0])
    return agents


def require_comfy_cli() -> None:
    """comfy-cli comes with the `provision` extra (.ci/run installs it); CI must not fall
    back silently to the requests downloader."""
    if shutil.which("comfy") is None:
        message = "comfy-cli is not on PATH: pip install -e '.[test,provision]'"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def test_comfyui_downloads_with_comfy_cli_then_detects_and_repairs(comfy, downloads) -> None:
    require_comfy_cli()
    config = comfy()
    assert outcome(provision(Service.comfyui, Mode.ensure, config)[1]) == {NAME: "verified"}
    assert downloads == [("comfy-cli", None)]  # comfy-cli fetched it, no fallback
    assert file_agents(comfy.files, "tiny.safetensors") == {"python-httpx"}  # comfy-cli's
    folder = comfy.ui.root / "models" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["tiny.safetensors"]
    assert requests.get(f"{comfy.ui.url}/models/checkpoints", timeout=5).json() == [
        "tiny.safetensors"
    ]
    assert outcome(provision(Service.comfyui, Mode.ensure, config)[1]) == {NAME: "cached"}
    (folder / "extra.safetensors").write_bytes(b"x")
    [listed, extra] = provision(Service.comfyui, Mode.list, config)[1]
    assert (listed["model"], listed["size"], listed["present"]) == (NAME, 200_000, True)
    assert (extra["model"], extra["configured"]) == ("checkpoints/extra.safetensors", False)
    (folder / "extra.safetensors").unlink()

    flip_byte(folder / "tiny.safetensors")
    code, events = provision(Service.comfyui, Mode.verify, config)
    assert code == 1 and "sha256 mismatch" in outcome(events)[NAME]
    assert provision(Service.comfyui, Mode.pull, config)[0] == 0
    assert provision(Service.comfyui, Mode.verify, config)[0] == 0


def test_comfyui_without_comfy_cli_downloads_with_requests(
    comfy, downloads, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback path on its own: no `comfy` on PATH, the kit's Range downloader."""
    empty_path = tmp_path / "no-comfy-bin"
    empty_path.mkdir()
    monkeypatch.setenv("PATH", str(empty_path))
    config = comfy()
    assert outcome(provision(Service.comfyui, Mode.ensure, config)[1]) == {NAME: "verified"}
    url = f"{comfy.files.url}/files/tiny.safetensors?size=200000"
    assert downloads == [("comfy-cli", "comfy-cli is not installed"), ("range", url)]
    assert file_agents(comfy.files, "tiny.safetensors") == {"python-requests"}


def test_comfyui_hash_mismatch_deletes_the_download_and_names_the_model(comfy) -> None:
    config = comfy(sha256="0" * 64)
    code, events = provision(Service.comfyui, Mode.ensure, config)
    assert code == 1
    assert outcome(events)[NAME].startswith(f"comfyui model '{NAME}': sha256 mismatch")
    assert list((comfy.ui.root / "models" / "checkpoints").iterdir()) == []


def test_comfyui_interrupted_download_resumes_with_range(
    standins, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback path: the first GET drops mid-file, the rerun asks for the rest."""
    monkeypatch.setattr(download, "run_comfy_cli", lambda *_: "comfy-cli is not installed")
    files = standins("filehost", env={"STANDIN_DROP_AFTER_BYTES": "70000"})
    ui = standins("comfyui", root=tmp_path / "comfy")
    digest = requests.get(f"{files.url}/files/r.safetensors.sha256?size=200000", timeout=5).text
    manifest = tmp_path / "models.yaml"
    manifest.write_text(
        f"models:\n  - {{url: '{files.url}/files/r.safetensors?size=200000', folder: loras,"
        f" filename: r.safetensors, sha256: {digest.strip()}, size: 200000}}\n"
    )
    config = settings(tmp_path, comfyui_url=ui.url, comfyui_root=ui.root,
                      airig_comfyui_manifest=manifest)  # fmt: skip
    code, events = provision(Service.comfyui, Mode.ensure, config)
    assert code == 1 and "run again to resume" in outcome(events)["loras/r.safetensors"]
    partial = ui.root / "models" / "loras" / "r.safetensors.airig-partial"
    assert 0 < partial.stat().st_size <= 70000

    code, events = provision(Service.comfyui, Mode.ensure, config)
    assert (code, outcome(events)) == (0, {"loras/r.safetensors": "verified"})
    assert '" 206 ' in files.log(), "the rerun must resume with a Range request"
