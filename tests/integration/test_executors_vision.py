"""llm with images and ocr's vision engine against the Ollama stand-in (real process):
the images reach Ollama as its API takes them, a text-only model is refused before any
image is sent, and ocr's auto engine falls back to tesseract (real binary)."""

from __future__ import annotations

import base64

import pytest
import requests
from standins.conftest_helpers import StandIn, start_standin
from support_media import make_text_png, need

from airig.executors.base import run_task
from airig.executors.context import TaskError

VISION, TEXT = "qwen2.5vl:7b", "qwen2.5:0.5b"


@pytest.fixture(scope="module")
def ollama(tmp_path_factory) -> StandIn:
    standin = start_standin(
        "ollama",
        tmp_path_factory.mktemp("ollama") / "models",
        {"STANDIN_MODEL_BYTES": "4096", "STANDIN_LOAD_SECONDS": "0"},
    )
    for model in (VISION, TEXT):
        body = {"model": model, "stream": False}
        requests.post(f"{standin.url}/api/pull", json=body, timeout=30).raise_for_status()
    yield standin
    standin.stop()


@pytest.fixture
def ctx(make_ctx, ollama):
    return make_ctx(ollama_url=ollama.url)


@pytest.fixture
def picture(ctx) -> tuple[str, int]:
    need("pdftoppm")
    png = make_text_png(ctx.data_dir / "note.png", ["HELLO VISION"])
    return "note.png", png.stat().st_size


def test_show_reports_vision_only_for_vision_models(ollama):
    def caps(model):
        body = {"model": model}
        return requests.post(f"{ollama.url}/api/show", json=body, timeout=5).json()["capabilities"]

    assert caps(VISION) == ["completion", "vision"]
    assert caps(TEXT) == ["completion"]


def test_generate_with_an_image_describes_what_the_bytes_show(ctx, picture):
    path, size = picture
    result = run_task("llm", {"model": VISION, "prompt": "what is this?", "images": [path]}, ctx)
    # 150 dpi of an A5-landscape page: 1240 x 875 pixels, as pdftoppm rendered it.
    assert f"image1: 1240x875 png {size} bytes;" in result.output["text"]
    assert result.metrics["images"] == 1


def test_chat_images_ride_on_the_last_user_message(ctx, picture):
    path, size = picture
    payload = {
        "model": VISION,
        "messages": [{"role": "user", "content": "describe"}],
        "images": [path, path],
    }
    text = run_task("llm", payload, ctx).output["text"]
    assert "image1: 1240x875" in text and "image2: 1240x875" in text


def test_per_image_runs_once_per_image_from_a_frames_output(ctx, picture):
    path, _ = picture
    (ctx.data_dir / "other.png").write_bytes((ctx.data_dir / path).read_bytes())
    frames = '{"frames": [{"path": "note.png", "t": 0}, {"path": "other.png", "t": 2.5}]}'
    payload = {"model": VISION, "prompt": "describe", "images": frames, "per_image": True}
    output = run_task("llm", payload, ctx).output
    assert [item["path"] for item in output["images"]] == ["note.png", "other.png"]
    assert all("image1: 1240x875" in item["text"] for item in output["images"])
    assert output["text"] == "\n\n".join(item["text"] for item in output["images"])


def test_a_text_model_is_refused_with_its_name_before_any_image_is_sent(ctx, picture):
    path, _ = picture
    with pytest.raises(TaskError) as caught:
        run_task("llm", {"model": TEXT, "prompt": "what is this?", "images": [path]}, ctx)
    error = caught.value
    assert error.error_type == "model_not_vision" and not error.retryable
    assert TEXT in error.message and "qwen2.5vl:7b" in error.hint
    assert "AIRIG_OLLAMA_MODELS" in error.hint


def test_upstream_drops_images_for_a_text_model_silently(ollama, picture, ctx):
    """Why the executor asks /api/show first: Ollama answers from the text alone."""
    image = base64.b64encode((ctx.data_dir / picture[0]).read_bytes()).decode()
    body = {"model": TEXT, "prompt": "what is this?", "images": [image], "stream": False}
    answer = requests.post(f"{ollama.url}/api/generate", json=body, timeout=10)
    assert answer.status_code == 200 and "image1" not in answer.json()["response"]
    bad = {**body, "images": ["not base64!"]}
    refused = requests.post(f"{ollama.url}/api/generate", json=bad, timeout=10)
    assert refused.status_code == 400
    assert refused.json()["error"].startswith("illegal base64 data at input byte")


def test_ocr_vision_and_auto(make_ctx, ollama, picture):
    need("tesseract")
    path, _ = picture
    ctx = make_ctx(ollama_url=ollama.url, gpu_index=0)  # a GPU worker: auto may use vision
    seen = run_task("ocr", {"image": path, "model": VISION}, ctx).output
    assert seen["engine"] == "vision" and "image1: 1240x875" in seen["text"]
    # a CPU worker reads with tesseract even when the vision model is there
    on_cpu = run_task("ocr", {"image": path, "model": VISION}, make_ctx(ollama_url=ollama.url))
    assert on_cpu.output["engine"] == "tesseract" and "HELLO VISION" in on_cpu.output["text"]
    assert "CPU worker" in on_cpu.output["engine_reason"]
    fallback = run_task("ocr", {"image": path, "model": TEXT}, ctx).output
    assert fallback["engine"] == "tesseract" and "HELLO VISION" in fallback["text"]
    assert "no vision capability" in fallback["engine_reason"]
    with pytest.raises(TaskError) as caught:
        run_task("ocr", {"image": path, "model": TEXT, "engine": "vision"}, ctx)
    assert caught.value.error_type == "model_not_vision"


def test_an_absent_model_is_not_found(ctx, picture):
    with pytest.raises(TaskError) as caught:
        run_task("llm", {"model": "llava:13b", "prompt": "x", "images": [picture[0]]}, ctx)
    assert caught.value.error_type == "model_not_found"
