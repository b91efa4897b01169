"""transcribe and Whisper resource executors against the speaches stand-in (real process)."""

from __future__ import annotations

import functools
import threading
import time
import wave

import pytest
import requests
from standins.conftest_helpers import start_standin

from airig.executors.base import run_task
from airig.executors.context import TaskError

MODEL = "Systran/faster-whisper-tiny"


@pytest.fixture(scope="module")
def whisper_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    standin = start_standin("whisper", root, {"STANDIN_MODEL_BYTES": "1024"})
    requests.post(f"{standin.url}/v1/models/{MODEL}", timeout=30).raise_for_status()
    yield standin.url
    standin.stop()


@pytest.fixture
def make_ctx(make_ctx, whisper_url, tmp_path):
    """The shared builder, Whisper at the stand-in, one second of silence in data/audio."""
    (tmp_path / "data" / "audio").mkdir()
    with wave.open(str(tmp_path / "data" / "audio" / "one_second.wav"), "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(16000)
        audio.writeframes(b"\0\0" * 16000)

    return functools.partial(make_ctx, whisper_url=whisper_url)


def test_json_transcript_comes_back_and_is_saved(make_ctx):
    ctx = make_ctx()
    result = run_task("transcribe", {"audio": "audio/one_second.wav", "model": MODEL}, ctx)
    assert "1.00 seconds" in result.output["text"]
    assert result.files == ["transcript.json"]
    assert (ctx.output_dir / "transcript.json").read_text().startswith("{")


def test_verbose_json_carries_segments_and_language(make_ctx):
    payload = {
        "audio": "audio/one_second.wav",
        "model": MODEL,
        "language": "de",
        "response_format": "verbose_json",
    }
    result = run_task("transcribe", payload, make_ctx())
    assert result.output["language"] == "de"
    assert result.output["segments"][0]["end"] == pytest.approx(1.0)


def test_plain_text_format(make_ctx):
    payload = {"audio": "audio/one_second.wav", "model": MODEL, "response_format": "text"}
    result = run_task("transcribe", payload, make_ctx())
    assert result.output["text"].startswith("Stand-in transcript")
    assert result.files == ["transcript.txt"]


def test_a_model_not_installed_is_not_retryable(make_ctx):
    payload = {"audio": "audio/one_second.wav", "model": "Systran/faster-whisper-large-v3"}
    with pytest.raises(TaskError) as caught:
        run_task("transcribe", payload, make_ctx())
    assert (caught.value.error_type, caught.value.retryable) == ("model_not_found", False)


def test_missing_audio_and_escapes_are_bad_input(make_ctx, tmp_path):
    (tmp_path / "outside.wav").write_bytes(b"x")
    (tmp_path / "data" / "link.wav").symlink_to(tmp_path / "outside.wav")
    for audio in ("audio/none.wav", "link.wav"):
        with pytest.raises(TaskError) as caught:
            run_task("transcribe", {"audio": audio, "model": MODEL}, make_ctx())
        assert (caught.value.error_type, caught.value.retryable) == ("bad_input", False)


def loaded(url: str) -> list[str]:
    """speaches' GET /api/ps (routers/misc.py get_running_models)."""
    response = requests.get(f"{url}/api/ps", timeout=5)
    response.raise_for_status()
    return response.json()["models"]


def test_load_and_unload_go_through_api_ps(make_ctx, whisper_url):
    """routers/misc.py: POST /api/ps/{id} 201 then 409 "Model already loaded"; DELETE 204
    then 404 "Model not found". The kit reports each answer as it means."""
    base = "Systran/faster-whisper-base"
    requests.post(f"{whisper_url}/v1/models/{base}", timeout=30).raise_for_status()
    assert base not in loaded(whisper_url)
    load = {"action": "load", "service": "whisper", "model": base}
    first = run_task("resource", load, make_ctx())
    assert first.output == {"service": "whisper", "action": "load", "model": base, "loaded": True}
    assert base in loaded(whisper_url)
    again = run_task("resource", load, make_ctx())
    assert (again.output["loaded"], again.output["note"]) == (True, "already loaded")
    unload = {"action": "unload", "service": "whisper", "model": base}
    gone = run_task("resource", unload, make_ctx())
    assert gone.output["unloaded"] and "note" not in gone.output
    assert base not in loaded(whisper_url)
    twice = run_task("resource", unload, make_ctx())
    assert twice.output["unloaded"] and twice.output["note"] == "was not loaded"


def test_unload_of_a_model_that_is_not_loaded_is_a_no_op(make_ctx, whisper_url):
    never = "Systran/faster-whisper-base.en"
    assert never not in loaded(whisper_url)  # the route exists and does not list it
    payload = {"action": "unload", "service": "whisper", "model": never}
    result = run_task("resource", payload, make_ctx())
    assert result.output["unloaded"] and result.output["note"] == "was not loaded"
    response = requests.delete(f"{whisper_url}/api/ps/{never}", timeout=5)
    assert (response.status_code, response.text) == (404, "Model not found")


def test_unload_of_a_model_in_use_is_busy(make_ctx, tmp_path):
    """SelfDisposingModel.unload refuses while a request holds the model: 409, which the
    kit reports as service_busy (retry later, do not pull it from under the request)."""
    standin = start_standin(
        "whisper",
        tmp_path / "busy-hub",
        {"STANDIN_MODEL_BYTES": "1024", "STANDIN_TRANSCRIBE_SECONDS": "2"},
    )
    try:
        requests.post(f"{standin.url}/v1/models/{MODEL}", timeout=30).raise_for_status()
        ctx = make_ctx(whisper_url=standin.url)
        job = {"audio": "audio/one_second.wav", "model": MODEL}
        worker = threading.Thread(target=run_task, args=("transcribe", job, ctx))
        worker.start()
        deadline = time.monotonic() + 10
        while MODEL not in loaded(standin.url):
            assert time.monotonic() < deadline, "the transcription never loaded the model"
            time.sleep(0.05)
        unload = {"action": "unload", "service": "whisper", "model": MODEL}
        with pytest.raises(TaskError) as caught:
            run_task("resource", unload, make_ctx(whisper_url=standin.url))
        assert caught.value.error_type == "service_busy"
        assert f"Model {MODEL} is still in use. self.ref_count=1" in str(caught.value)
        worker.join(10)
    finally:
        standin.stop()


def test_loading_a_model_that_is_not_installed_fails_for_good(make_ctx, whisper_url):
    missing = "someone/not-a-whisper-model"
    load = {"action": "load", "service": "whisper", "model": missing}
    for _attempt in range(2):  # the worker retries a retryable error
        with pytest.raises(TaskError) as caught:
            run_task("resource", load, make_ctx())
        assert (caught.value.error_type, caught.value.retryable) == ("model_not_found", False)
