"""The ocr task's onnx engine (PP-OCRv4 on onnxruntime, executors/ocr_onnx.py): the real
models read real pages on the CPU (no mock of the OCR), the provider choice against fake
onnxruntime provider lists, auto's choice, and hostile images."""

from __future__ import annotations

import logging
import struct
import sys
import zlib

import pytest
from pydantic import ValidationError
from support_media import make_image, make_text_png

from airig.common.task_schemas import OcrPayload
from airig.executors import ocr, ocr_onnx
from airig.executors.base import run_task
from airig.executors.context import TaskError
from airig.executors.ocr_onnx import CPU, CUDA, cuda_device, lines_of, requested_providers


@pytest.fixture
def ctx(make_ctx):
    return make_ctx(timeout_s=120)


def fails(payload: dict, ctx) -> TaskError:
    with pytest.raises(TaskError) as caught:
        run_task("ocr", payload, ctx)
    assert not caught.value.retryable, caught.value.to_dict()
    return caught.value


def words(text: str) -> set[str]:
    return {word.strip(".,").lower() for word in text.split()}


# ------------------------------------------------------------------ the real engine
def test_the_onnx_engine_reads_a_printed_page_on_the_cpu(ctx, caplog):
    make_text_png(ctx.data_dir / "scan.png", ["Invoice number 4711", "Brown fox jumps"])
    with caplog.at_level(logging.INFO, logger="airig.executors.ocr"):
        output = run_task("ocr", {"image": "scan.png", "engine": "onnx"}, ctx).output
    assert output["engine"] == "onnx"
    assert output["providers"] == [CPU]
    assert "engine_warning" not in output
    assert {"invoice", "number", "4711", "brown", "fox", "jumps"} <= words(output["text"])
    # two lines, in reading order
    first, second = output["text"].splitlines()[:2]
    assert "4711" in first and "fox" in second
    [record] = [r for r in caplog.records if r.getMessage() == "ocr engine onnx"]
    assert record.providers == [CPU] and record.providers_requested == [CPU]


def test_auto_on_a_cpu_worker_reads_english_with_tesseract_and_says_why(ctx):
    make_text_png(ctx.data_dir / "scan.png", ["Hello Airig"])
    output = run_task("ocr", {"images": ["scan.png"]}, ctx).output
    assert output["engine"] == "tesseract"
    assert output["engine_reason"] == (
        "no model given; on the CPU tesseract reads print faster than the onnx engine"
    )
    assert "providers" not in output


def test_auto_on_a_cpu_worker_takes_the_onnx_engine_for_chinese_or_without_tesseract(
    ctx, monkeypatch
):
    make_text_png(ctx.data_dir / "scan.png", ["Hello Airig"])
    output = run_task("ocr", {"image": "scan.png", "language": "chi_sim"}, ctx).output
    assert output["engine"] == "onnx" and output["providers"] == [CPU]
    assert "Chinese" in output["engine_reason"]
    monkeypatch.setattr(ocr.shutil, "which", lambda name: None)
    output = run_task("ocr", {"image": "scan.png"}, ctx).output
    assert output["engine"] == "onnx"
    assert output["engine_reason"] == "no model given; no tesseract on this worker"
    assert {"hello", "airig"} <= words(output["text"])
    assert output["pages"] == [{"path": "scan.png", "text": output["text"]}]


def test_auto_on_an_nvidia_worker_takes_the_onnx_engine_on_cuda(ctx, monkeypatch):
    """A GPU worker whose onnxruntime has the CUDA provider: auto asks for CUDA, then CPU."""
    import onnxruntime

    class OnCuda(FakeSession):
        def get_providers(self):
            return [CUDA, CPU]

    make_text_png(ctx.data_dir / "scan.png", ["Hello"])
    ctx.gpu_index = 0
    monkeypatch.setattr(ocr_onnx, "available_providers", lambda: [CUDA, CPU])
    monkeypatch.setattr(onnxruntime, "InferenceSession", OnCuda)
    monkeypatch.setattr(ocr_onnx, "read_text", lambda *_: "text")  # the fake sessions run nothing
    try:
        output = run_task("ocr", {"image": "scan.png"}, ctx).output
    finally:
        ocr_onnx._engine_cached.cache_clear()
    assert output["engine"] == "onnx" and output["providers"] == [CUDA, CPU]
    assert output["engine_reason"] == (
        "no model given; the onnx engine on the GPU (onnxruntime's CUDA provider)"
    )
    assert "engine_warning" not in output and "providers_requested" not in output


def test_auto_takes_tesseract_for_a_language_the_onnx_model_does_not_read(ctx):
    make_text_png(ctx.data_dir / "scan.png", ["Hello"])
    error = fails({"image": "scan.png", "language": "xx"}, ctx)  # tesseract ran: no 'xx'
    assert "tesseract-ocr-xx" in error.hint


def test_auto_takes_tesseract_where_the_engine_is_not_installed(ctx, monkeypatch):
    make_text_png(ctx.data_dir / "scan.png", ["Hello Airig"])
    # what `import cv2` says in a slim image without Debian's libgl1
    libgl = "libGL.so.1: cannot open shared object file: No such file or directory"
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)  # import fails
    assert "does not load on this worker" in ocr_onnx.missing()
    monkeypatch.setattr(ocr_onnx, "missing", lambda: f"the onnx engine does not load: {libgl}")
    output = run_task("ocr", {"image": "scan.png"}, ctx).output
    assert output["engine"] == "tesseract"
    assert output["engine_reason"] == f"no model given; the onnx engine does not load: {libgl}"
    error = fails({"image": "scan.png", "engine": "onnx"}, ctx)
    assert libgl in error.message and "libgl1" in error.hint


# ------------------------------------------------------------------ providers
def test_a_gpu_worker_with_the_cuda_provider_asks_for_cuda_then_cpu():
    available = ["TensorrtExecutionProvider", CUDA, CPU]
    assert requested_providers(available, gpu_index=0) == [CUDA, CPU]
    assert requested_providers(available, gpu_index=None) == [CPU]  # a CPU worker
    assert requested_providers([CPU], gpu_index=2) == [CPU]  # onnxruntime without CUDA
    assert requested_providers(["ROCMExecutionProvider", CPU], gpu_index=0) == [CPU]


def test_the_cuda_device_is_0_in_a_pinned_container_and_the_host_index_on_the_host():
    assert cuda_device(3, {"NVIDIA_VISIBLE_DEVICES": "3"}) == 0
    assert cuda_device(3, {"CUDA_VISIBLE_DEVICES": "GPU-abc"}) == 0
    assert cuda_device(3, {"NVIDIA_VISIBLE_DEVICES": "all"}) == 3
    assert cuda_device(3, {}) == 3


class FakeSession:
    """What onnxruntime does with a CUDA request it cannot serve: no error, CPU only."""

    def __init__(self, path, sess_options=None, providers=None):
        self.asked = providers
        self._model_path = path

    def get_providers(self):
        return [CPU]


def test_a_cuda_provider_onnxruntime_dropped_is_reported_not_hidden(ctx, monkeypatch, caplog):
    import onnxruntime

    make_text_png(ctx.data_dir / "scan.png", ["Hello"])
    ctx.gpu_index = 0
    monkeypatch.setattr(ocr_onnx, "available_providers", lambda: [CUDA, CPU])
    monkeypatch.setattr(onnxruntime, "InferenceSession", FakeSession)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "0")
    loaded: list = []
    real = ocr_onnx._load
    monkeypatch.setattr(ocr_onnx, "_load", lambda *a: loaded.append(a) or real(*a))
    monkeypatch.setattr(ocr_onnx, "read_text", lambda *_: "text")  # the fake sessions run nothing
    with caplog.at_level(logging.INFO, logger="airig.executors.ocr"):
        output = run_task("ocr", {"image": "scan.png", "engine": "onnx"}, ctx).output
    ocr_onnx._engine_cached.cache_clear()  # the fake sessions stay out of other tests
    assert loaded == [((CUDA, CPU), 0)]
    assert output["providers"] == [CPU]
    assert output["providers_requested"] == [CUDA, CPU]
    assert "CUDAExecutionProvider did not start" in output["engine_warning"]
    [record] = [r for r in caplog.records if r.getMessage() == "ocr engine onnx"]
    assert record.levelno == logging.WARNING
    assert record.providers_requested == [CUDA, CPU] and record.providers == [CPU]


def test_the_sessions_ask_onnxruntime_for_exactly_the_chosen_providers(monkeypatch):
    import onnxruntime

    asked: list = []

    class Recording(FakeSession):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            asked.append(self.asked)

        def get_providers(self):
            return [CUDA, CPU]

    monkeypatch.setattr(onnxruntime, "InferenceSession", Recording)
    try:
        engine = ocr_onnx._engine_cached((CUDA, CPU), 1)
    finally:
        ocr_onnx._engine_cached.cache_clear()
    assert asked == [[(CUDA, {"device_id": 1}), CPU]] * 3  # detection, orientation, text
    assert engine.used == (CUDA, CPU) and engine.dropped == []
    assert engine.describe() == {"providers": [CUDA, CPU]}


# ------------------------------------------------------------------ lines
def test_boxes_on_one_row_are_one_line_left_to_right():
    def box(x, y, text):
        return [[[x, y], [x + 50, y], [x + 50, y + 20], [x, y + 20]], text, 0.9]

    result = [box(200, 12, "world"), box(10, 10, "hello"), box(10, 60, "next")]
    assert lines_of(result) == "hello world\nnext"
    assert lines_of([]) == ""


# ------------------------------------------------------------------ hostile input
def test_a_truncated_image_fails_in_one_line(ctx):
    png = make_text_png(ctx.data_dir / "scan.png", ["Hello"]).read_bytes()
    (ctx.data_dir / "cut.png").write_bytes(png[: len(png) // 2])
    error = fails({"image": "cut.png", "engine": "onnx"}, ctx)
    assert error.error_type == "bad_input"
    assert "'cut.png' does not decode" in error.message and "\n" not in error.message


def test_a_one_pixel_image_reads_as_no_text(ctx):
    from PIL import Image

    Image.new("RGB", (1, 1), "white").save(ctx.data_dir / "dot.png")
    output = run_task("ocr", {"image": "dot.png", "engine": "onnx"}, ctx).output
    assert output["text"] == "" and output["engine"] == "onnx"


def test_a_zero_size_image_is_refused(ctx):
    (ctx.data_dir / "empty.png").write_bytes(b"")
    error = fails({"image": "empty.png", "engine": "onnx"}, ctx)
    assert "empty.png" in error.message


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def test_a_pixel_bomb_is_refused_before_it_decodes(ctx):
    """A PNG declaring 60000 x 60000 (3.6 gigapixels, about 11 GB as RGB) in a few bytes."""
    header = struct.pack(">IIBBBBB", 60_000, 60_000, 8, 2, 0, 0, 0)
    bomb = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(b""))
    (ctx.data_dir / "bomb.png").write_bytes(bomb + _chunk(b"IEND", b""))
    error = fails({"image": "bomb.png", "engine": "onnx"}, ctx)
    assert "60000 x 60000" in error.message and "AIRIG_MAX_IMAGE_PIXELS" in error.message


def test_a_large_page_is_decoded_scaled_down(make_ctx):
    """A page within the budget but larger than the engine reads is reduced at decode."""
    ctx = make_ctx(timeout_s=120)
    make_image(ctx.data_dir / "big.png", "color=c=white", "5000x1000")
    output = run_task("ocr", {"image": "big.png", "engine": "onnx"}, ctx).output
    assert output["text"] == ""


# ------------------------------------------------------------------ the payload
def test_the_payload_refuses_an_unknown_engine_and_onnx_with_a_language_it_cannot_read():
    with pytest.raises(ValidationError) as caught:
        OcrPayload.model_validate({"image": "a.png", "engine": "paddle"})
    assert "'auto', 'vision', 'onnx' or 'tesseract'" in str(caught.value)
    with pytest.raises(ValidationError) as caught:
        OcrPayload.model_validate({"image": "a.png", "engine": "onnx", "language": "deu"})
    assert "use engine 'tesseract'" in str(caught.value)
    OcrPayload.model_validate({"image": "a.png", "engine": "onnx", "language": "eng+chi_sim"})


def test_nul_in_a_path_fails_the_task_and_in_the_language_the_payload(ctx):
    make_text_png(ctx.data_dir / "scan.png", ["Hello Airig"])
    error = fails({"image": "scan\x00.png", "engine": "onnx"}, ctx)
    assert error.error_type == "bad_input" and "\n" not in error.message
    with pytest.raises(ValidationError):
        OcrPayload.model_validate({"image": "scan.png", "language": "eng\x00"})
    # options are Ollama's (the vision model's): the onnx engine takes none, NUL or not
    payload = {"image": "scan.png", "engine": "onnx", "options": {"stop": ["\x00"]}}
    assert {"hello", "airig"} <= words(run_task("ocr", payload, ctx).output["text"])


@pytest.mark.parametrize(
    ("payload", "field", "says"),
    [
        ({"engine": "paddle"}, "payload.engine", "'auto', 'vision', 'onnx' or 'tesseract'"),
        ({"engine": "onnx\x00"}, "payload.engine", "'auto', 'vision', 'onnx' or 'tesseract'"),
        ({"engine": "onnx", "language": "deu"}, "payload", "use engine 'tesseract'"),
    ],
)
def test_a_plan_with_an_ocr_engine_that_cannot_run_is_refused_at_submission(
    tmp_path, payload, field, says
):
    """One line per error, naming the task and the field, before any worker sees it."""
    import json

    from airig.brain.plans.load import load_plan
    from airig.brain.plans.validate import Limits, PlanInvalid

    task = {"id": "read", "type": "ocr", "payload": {"image": "inputs/a.png", **payload}}
    body = json.dumps({"name": "p", "tasks": [task]}).encode()
    with pytest.raises(PlanInvalid) as caught:
        load_plan(body, "application/json", Limits(), tmp_path)
    [error] = caught.value.errors
    assert error["task"] == "read" and error["field"] == field
    assert says in error["message"] and "\n" not in error["message"]


def test_a_tiff_is_read_on_its_first_page(ctx):
    from PIL import Image

    first = make_text_png(ctx.data_dir / "one.png", ["Harbour report"])
    second = make_text_png(ctx.data_dir / "two.png", ["Second sheet"])
    with Image.open(first) as a, Image.open(second) as b:
        a.convert("L").save(ctx.data_dir / "scan.tiff", save_all=True,
                            append_images=[b.convert("L")])  # fmt: skip
    output = run_task("ocr", {"image": "scan.tiff", "engine": "onnx"}, ctx).output
    assert {"harbour", "report"} <= words(output["text"])
    assert "second" not in words(output["text"])
