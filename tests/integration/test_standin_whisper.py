"""Contract tests of the speaches (Whisper) stand-in against speaches v0.8.3
(src/speaches/routers/, dependencies.py, model_manager.py).

Each test names the upstream file and function whose behaviour it pins."""

from __future__ import annotations

import hashlib
import io
import wave
from pathlib import Path

import requests
from standins import conftest_helpers as helpers

standins = helpers.standins  # the factory fixture, used by name below


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wav_bytes(seconds: float, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(b"\x00\x00" * int(seconds * rate))
    return buffer.getvalue()


def test_whisper_download_200_then_201_and_local_listing(standins):
    server = standins("whisper", env={"STANDIN_MODEL_BYTES": "4096"})
    model = "Systran/faster-whisper-small"
    assert requests.get(f"{server.url}/v1/models", timeout=5).json()["data"] == []
    first = requests.post(f"{server.url}/v1/models/{model}", timeout=10)
    assert (first.status_code, first.text) == (200, f"Model '{model}' downloaded")
    again = requests.post(f"{server.url}/v1/models/{model}", timeout=10)
    assert (again.status_code, again.text) == (201, f"Model '{model}' already exists")
    assert [m["id"] for m in requests.get(f"{server.url}/v1/models").json()["data"]] == [model]
    repo = server.root / "models--Systran--faster-whisper-small"
    revision = (repo / "refs" / "main").read_text()
    model_bin = repo / "snapshots" / revision / "model.bin"
    assert model_bin.is_symlink() and model_bin.resolve().name == sha256_file(model_bin)
    missing = requests.post(f"{server.url}/v1/models/Systran/nonexistent-tiny", timeout=5)
    assert missing.status_code == 404 and "not found" in missing.json()["detail"]


def test_whisper_transcription(standins):
    server = standins("whisper", env={"STANDIN_MODEL_BYTES": "4096"})
    audio = wav_bytes(1.5)
    form = {"model": "Systran/faster-whisper-small", "language": "en"}
    files = {"file": ("clip.wav", audio, "audio/wav")}
    absent = requests.post(f"{server.url}/v1/audio/transcriptions", data=form, files=files)
    assert absent.status_code == 404 and "is not installed locally" in absent.json()["detail"]
    requests.post(f"{server.url}/v1/models/{form['model']}", timeout=10)
    text = requests.post(f"{server.url}/v1/audio/transcriptions", data=form, files=files).json()
    assert text == {"text": f"Stand-in transcript of 1.50 seconds of wav ({len(audio)} bytes)."}
    verbose = requests.post(
        f"{server.url}/v1/audio/transcriptions",
        files=files,
        data={**form, "response_format": "verbose_json"},
    ).json()
    assert verbose["duration"] == 1.5 and verbose["segments"][0]["end"] == 1.5
    assert verbose["language"] == "en" and verbose["text"] == text["text"]


def test_whisper_download_refuses_ids_the_hub_does_not_list(standins, tmp_path):
    """routers/models.py download_remote_model: an id no registry lists is 404, even when
    a copy of it is already on disk (the old stand-in answered 200 or 201)."""
    root = tmp_path / "hub"
    first = standins("whisper", env={"STANDIN_REGISTRY_MODELS": "someone/custom"}, root=root)
    assert requests.post(f"{first.url}/v1/models/someone/custom", timeout=10).status_code == 200
    first.stop()
    server = standins("whisper", root=root)
    for model in ("someone/custom", "someone/not-on-the-hub", "Systran/faster-whisper-huge"):
        resp = requests.post(f"{server.url}/v1/models/{model}", timeout=10)
        assert (resp.status_code, resp.json()) == (404, {"detail": f"Model '{model}' not found"})
    gone = requests.delete(f"{server.url}/v1/models/someone/absent", timeout=5)
    assert (gone.status_code, gone.json()) == (
        404,
        {"detail": "Model repo not found: someone/absent"},
    )


def test_whisper_api_ps_loads_and_unloads_as_misc_py(standins):
    """routers/misc.py (v0.8.3): POST /api/ps/{id} 201 / 409 "Model already loaded";
    DELETE 204 / 404 "Model not found" / 409 with SelfDisposingModel.unload's ValueError."""
    server = standins("whisper", env={"STANDIN_MODEL_BYTES": "4096"})
    model = "Systran/faster-whisper-tiny"
    requests.post(f"{server.url}/v1/models/{model}", timeout=10).raise_for_status()
    assert requests.get(f"{server.url}/api/ps", timeout=5).json() == {"models": []}
    load = requests.post(f"{server.url}/api/ps/{model}", timeout=10)
    assert (load.status_code, load.content) == (201, b"")
    again = requests.post(f"{server.url}/api/ps/{model}", timeout=10)
    assert (again.status_code, again.text) == (409, "Model already loaded")
    assert requests.get(f"{server.url}/api/ps", timeout=5).json() == {"models": [model]}
    unload = requests.delete(f"{server.url}/api/ps/{model}", timeout=5)
    assert (unload.status_code, unload.content) == (204, b"")
    missing = requests.delete(f"{server.url}/api/ps/{model}", timeout=5)
    assert (missing.status_code, missing.text) == (404, "Model not found")
    # faster-whisper cannot load an id the hub lacks and the disk lacks: an unhandled 500,
    # but load_model registered it first, so it stays listed and refuses both verbs.
    ghost = "someone/not-a-whisper-model"
    failed = requests.post(f"{server.url}/api/ps/{ghost}", timeout=10)
    assert (failed.status_code, failed.text) == (500, "Internal Server Error")
    assert requests.post(f"{server.url}/api/ps/{ghost}", timeout=10).status_code == 409
    stuck = requests.delete(f"{server.url}/api/ps/{ghost}", timeout=5)
    assert (stuck.status_code, stuck.text) == (
        409,
        f"Model {ghost} is not loaded. self.ref_count=0",
    )


def test_whisper_transcription_loads_the_model_until_its_ttl(standins):
    """model_manager.py SelfDisposingModel._decrement_ref: ttl > 0 unloads on a timer, 0
    at once, -1 never (the kit's WHISPER_TTL default: the brain decides residency)."""
    form = {"model": "Systran/faster-whisper-tiny"}
    files = {"file": ("clip.wav", wav_bytes(0.5), "audio/wav")}
    for ttl, listed in (("300", [form["model"]]), ("0", []), ("-1", [form["model"]])):
        server = standins("whisper", env={"STANDIN_MODEL_BYTES": "4096", "WHISPER__TTL": ttl})
        requests.post(f"{server.url}/v1/models/{form['model']}", timeout=10).raise_for_status()
        url = f"{server.url}/v1/audio/transcriptions"
        assert requests.post(url, data=form, files=files, timeout=10).status_code == 200
        assert requests.get(f"{server.url}/api/ps", timeout=5).json()["models"] == listed
        server.stop()


def test_whisper_refuses_audio_it_cannot_decode(standins):
    """dependencies.py audio_file_dependency: PyAV's InvalidDataError (random bytes, an
    empty file, a truncated RIFF header) is 415, before the form fields are checked."""
    server = standins("whisper", env={"STANDIN_MODEL_BYTES": "4096"})
    url = f"{server.url}/v1/audio/transcriptions"
    form = {"model": "Systran/faster-whisper-tiny"}
    refusal = {"detail": "Failed to decode audio. The provided file type is not supported."}
    for data in (b"not audio at all", b"", wav_bytes(1.0)[:30], bytes(range(256)) * 4):
        for fields in (form, {}):  # the audio dependency runs before `model` is validated
            resp = requests.post(url, data=fields, files={"file": ("a.wav", data)}, timeout=10)
            assert (resp.status_code, resp.json()) == (415, refusal), (data[:8], fields)
    requests.post(f"{server.url}/v1/models/{form['model']}", timeout=10).raise_for_status()
    header_only = wav_bytes(0)
    ok = requests.post(url, data=form, files={"file": ("empty.wav", header_only)}, timeout=10)
    assert ok.json() == {"text": "Stand-in transcript of 0.00 seconds of wav (44 bytes)."}
    mp3 = b"ID3\x04\x00" + bytes(32000)
    assert requests.post(url, data=form, files={"file": ("a.mp3", mp3)}, timeout=10).ok


def test_whisper_response_formats(standins):
    """routers/stt.py ResponseFormat: text, json, verbose_json, srt, vtt; others are 422."""
    server = standins("whisper", env={"STANDIN_MODEL_BYTES": "4096"})
    model = "Systran/faster-whisper-tiny"
    requests.post(f"{server.url}/v1/models/{model}", timeout=10).raise_for_status()
    url = f"{server.url}/v1/audio/transcriptions"
    files = {"file": ("clip.wav", wav_bytes(1.5), "audio/wav")}

    def ask(fmt: str) -> requests.Response:
        return requests.post(url, data={"model": model, "response_format": fmt}, files=files)

    text = ask("text").text
    assert ask("srt").text == f"1\n00:00:00,000 --> 00:00:01,500\n{text}\n\n"
    assert ask("vtt").text == f"WEBVTT\n\n00:00:00.000 --> 00:00:01.500\n{text}\n\n"
    bad = ask("mp3")
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "response_format"]
