"""The ocr executor: the text in images, read by a vision model, the onnx engine or
tesseract.

``engine: auto`` chooses by what the worker has: on a GPU worker, the vision model when the
payload names one and Ollama has it with the "vision" capability (the seed's path); else,
on a worker whose onnxruntime has the CUDA provider for its GPU (an NVIDIA worker with
``onnxruntime-gpu``), the onnx engine (PaddleOCR's PP-OCRv4 models, ``ocr_onnx.py``); on
the CPU, tesseract, which read the benchmark's print faster and better there
(benchmarks/README.md, "OCR engines"), or the onnx engine for Chinese or where tesseract
is missing. ``engine`` in the output says which ran, ``engine_reason`` why auto chose it,
``providers`` which onnxruntime providers the onnx engine ran on (logged too). A 7B vision
model on a CPU takes minutes a page where the other two take seconds.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from airig.common.task_schemas import LlmPayload, OcrPayload
from airig.executors import ocr_onnx
from airig.executors.context import (
    ExecContext,
    ExecResult,
    TaskError,
    elapsed_ms,
    resolve_data_path,
)
from airig.executors.llm import execute_llm, model_capabilities, not_vision_error
from airig.executors.media import bad_input, image_paths, last_line, read_image, run_tool

OCR_PROMPT = (
    "Transcribe all text in this image exactly as written, in reading order. Keep line "
    "breaks. Output only the text, without comments; output nothing if there is no text."
)


def execute_ocr(payload: OcrPayload, ctx: ExecContext) -> ExecResult:
    start = time.monotonic()
    paths = [payload.image] if payload.image is not None else image_paths(payload.images or [])
    images = [read_image(ctx, path) for path in paths]  # every one checked before any runs
    engine, reason = _choose(payload, ctx)
    if engine == "vision":
        assert payload.model is not None  # _choose picks vision only with a model
        llm = LlmPayload(
            model=payload.model,
            prompt=OCR_PROMPT,
            images=paths,
            per_image=True,
            options=payload.options,
        )
        result = execute_llm(llm, ctx)
        pages = result.output["images"]
        metrics = dict(result.metrics)
    elif engine == "onnx":
        onnx = ocr_onnx.engine_for(ctx)
        pages = []
        for image in images:
            ctx.check()
            pages.append({"path": image.path, "text": ocr_onnx.read_text(ctx, onnx, image)})
        metrics = {}
    else:
        pages = []
        for image in images:
            ctx.check()
            pages.append({"path": image.path, "text": _tesseract(ctx, image.path, payload)})
        metrics = {}
    output: dict[str, Any] = {
        "text": "\n\n".join(page["text"] for page in pages),
        "pages": pages,
        "engine": engine,
    }
    if engine == "vision":
        output["model"] = payload.model
    if engine == "onnx":
        output.update(onnx.describe())
        if onnx.dropped:
            # why, when the preload of CUDA's libraries said it; else the likely causes
            why = onnx.why or "CUDA or cuDNN libraries missing, or no card in the container?"
            output["engine_warning"] = (
                f"asked onnxruntime for {', '.join(onnx.requested)} but it runs on "
                f"{', '.join(onnx.used)} only: {', '.join(onnx.dropped)} did not start "
                f"({why})"
            )
    if reason:
        output["engine_reason"] = reason
    metrics.update({"wall_ms": elapsed_ms(start), "images": len(images)})
    return ExecResult(output=output, metrics=metrics)


def may_use_model(payload: OcrPayload, gpu_index: int | None) -> bool:
    """Whether ``execute_ocr`` on a worker with ``gpu_index`` can run the model at all:
    the worker's swap loads it only then. Tesseract's paths never do: a CPU worker loading
    a 7B vision model it will not call costs about 6 GB of RAM and a minute (issue 35)."""
    if payload.engine == "vision":
        return True
    return payload.engine == "auto" and bool(payload.model) and gpu_index is not None


def _choose(payload: OcrPayload, ctx: ExecContext) -> tuple[str, str]:
    if payload.engine == "tesseract":
        return "tesseract", ""
    if payload.engine == "onnx":
        why = ocr_onnx.missing()
        if why:
            raise bad_input(
                f"engine 'onnx': {why}",
                hint="use engine 'auto' or 'tesseract', or install the kit's server extra "
                "(rapidocr-onnxruntime) and Debian's libgl1",
            )
        return "onnx", ""
    if payload.engine == "vision":
        assert payload.model is not None  # the schema requires it
        capabilities = model_capabilities(ctx, payload.model)
        if capabilities is not None and "vision" not in capabilities:
            raise not_vision_error(payload.model, capabilities)
        return "vision", ""
    if not payload.model:
        return _without_model(payload, ctx, "no model given")
    if ctx.gpu_index is None:
        return _without_model(payload, ctx, "a CPU worker: a vision model is slow there")
    try:
        capabilities = model_capabilities(ctx, payload.model)
    except TaskError as exc:
        ctx.check()
        return _without_model(payload, ctx, f"{payload.model}: {exc.message}")
    if capabilities is not None and "vision" not in capabilities:
        return _without_model(payload, ctx, f"{payload.model} has no vision capability")
    return "vision", ""


def _without_model(payload: OcrPayload, ctx: ExecContext, why: str) -> tuple[str, str]:
    """auto's choice when the vision model is out. The onnx engine where onnxruntime has
    the CUDA provider for the worker's GPU; on the CPU, tesseract for what it reads (it
    read the benchmark's English pages faster and with fewer errors than PP-OCRv4 there,
    benchmarks/README.md "OCR engines"), the onnx engine for Chinese or where tesseract
    is missing."""
    if not ocr_onnx.reads(payload.language):
        return "tesseract", f"{why}; the onnx engine does not read {payload.language!r}"
    missing = ocr_onnx.missing()
    if missing:
        return "tesseract", f"{why}; {missing}"
    on_gpu = ocr_onnx.requested_providers(ocr_onnx.available_providers(), ctx.gpu_index)
    if ocr_onnx.CUDA in on_gpu:
        return "onnx", f"{why}; the onnx engine on the GPU (onnxruntime's CUDA provider)"
    if "chi_sim" in payload.language.split("+"):
        return "onnx", f"{why}; Chinese: the onnx engine (PP-OCRv4) reads it"
    if shutil.which("tesseract") is None:
        return "onnx", f"{why}; no tesseract on this worker"
    return "tesseract", f"{why}; on the CPU tesseract reads print faster than the onnx engine"


def _tesseract(ctx: ExecContext, relative: str, payload: OcrPayload) -> str:
    path = resolve_data_path(ctx.data_dir, relative)
    result = run_tool(ctx, ["tesseract", str(path), "stdout", "-l", payload.language])
    if result.returncode != 0:
        why = last_line(result.stderr)
        if "language" in result.stderr.lower() or "traineddata" in result.stderr:
            raise bad_input(
                f"tesseract has no language {payload.language!r}: {why}",
                hint=f"install Debian's tesseract-ocr-{payload.language} package, or use 'eng'",
            )
        raise bad_input(f"tesseract could not read image {relative!r}: {why}")
    return result.stdout.decode("utf-8", "replace").strip()
