"""The ``onnx`` OCR engine: PaddleOCR's PP-OCRv4 detection and recognition models run by
onnxruntime, as RapidOCR's wheel (``rapidocr-onnxruntime``) ships them, so it reads
offline with nothing to pull.

Which onnxruntime execution providers a worker asks for is decided here, not left to
RapidOCR: a worker with a GPU assigned whose onnxruntime offers the CUDA provider (the
``onnxruntime-gpu`` package, which the NVIDIA image installs in place of ``onnxruntime``)
asks for ``["CUDAExecutionProvider", "CPUExecutionProvider"]``; every other worker for the
CPU provider alone. onnxruntime falls back to the CPU without an error when the CUDA
provider cannot start (no CUDA or cuDNN libraries, no card in the container): the
providers each session really got are read back, logged, put in the task's output, and a
CUDA provider asked for but dropped is said in ``engine_warning``, never hidden.

The NVIDIA workers' image (AIRIG_IMAGE-cuda, 03-agents/ocr-cuda.sh) is python:3.12-slim with
NVIDIA's CUDA 12 and cuDNN 9 libraries as pip wheels under site-packages/nvidia, where the
dynamic loader does not look: ``onnxruntime.preload_dlls()`` (onnxruntime-gpu >= 1.21) loads
them before the first CUDA session. An older onnxruntime without it relies on the loader's
path; a preload that raises leaves the engine on the CPU with the reason said, and what it
printed about a library it could not load is kept for the warning.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airig.common.task_schemas import ONNX_OCR_LANGUAGES
from airig.executors.context import ExecContext, resolve_data_path
from airig.executors.media import ImageFile, bad_input

log = logging.getLogger("airig.executors.ocr")

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
# PP-OCRv4's recognition model (the one in RapidOCR's wheel) reads Chinese and Latin
# script: tesseract's codes for what it can read. Any other language goes to tesseract.
LANGUAGES = frozenset(ONNX_OCR_LANGUAGES)
# RapidOCR scales a page's longest side down to 2000 pixels before detection; decoding a
# larger picture only to throw its pixels away costs memory (a 64-megapixel page is
# 192 MB as RGB), so it is reduced right after decoding, with PIL's box filter.
DECODE_MAX_SIDE = 4000
# Boxes whose vertical centres lie within this share of their height are one line.
SAME_LINE = 0.5
# What of preload_dlls' own printed lines ("Failed to load libcudnn.so.9: …") a warning
# quotes: the first few, each cut, so a library path cannot fill an output.
PRELOAD_LINES = 3
PRELOAD_LINE_CHARS = 300


@dataclass(frozen=True)
class Engine:
    """A loaded RapidOCR with the providers it asked for and those its sessions got."""

    ocr: Any
    requested: tuple[str, ...]
    used: tuple[str, ...]  # the providers every session runs on, the first one first
    device_id: int | None
    # CUDA's libraries before the sessions (``preload_cuda``): "" (no CUDA asked for),
    # "preloaded", "no preload_dlls" or "failed"; ``why``: what went wrong, said when CUDA
    # is dropped
    preload: str = ""
    why: str = ""

    @property
    def dropped(self) -> list[str]:
        """Providers asked for that onnxruntime did not give every session."""
        return [name for name in self.requested if name not in self.used]

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {"providers": list(self.used)}
        if self.dropped:
            described["providers_requested"] = list(self.requested)
        return described


def missing() -> str:
    """Why the engine cannot load on this worker ("" when it can): its package absent, or
    a library OpenCV links (libGL.so.1, which a slim image lacks without Debian's libgl1)."""
    try:
        import onnxruntime  # noqa: F401
        import rapidocr_onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"the onnx engine does not load on this worker: {exc}"
    return ""


def reads(language: str) -> bool:
    """Whether PP-OCRv4's model reads ``language`` (tesseract's codes, ``eng+chi_sim``)."""
    return all(part in LANGUAGES for part in language.split("+"))


def available_providers() -> list[str]:
    import onnxruntime

    return list(onnxruntime.get_available_providers())


def requested_providers(available: Sequence[str], gpu_index: int | None) -> list[str]:
    """The providers to ask for: CUDA first on a worker with a GPU whose onnxruntime has
    the CUDA provider, the CPU always (onnxruntime places there what CUDA cannot run)."""
    if gpu_index is not None and CUDA in available:
        return [CUDA, CPU]
    return [CPU]


def cuda_device(gpu_index: int, environ: Mapping[str, str]) -> int:
    """The CUDA device number of the worker's card. A container pinned to one card
    (``NVIDIA_VISIBLE_DEVICES`` set by the NVIDIA runtime from Compose's device_ids) or a
    process given ``CUDA_VISIBLE_DEVICES`` sees it as device 0; a worker on the bare host
    sees every card, numbered as the host numbers them."""
    pinned = environ.get("CUDA_VISIBLE_DEVICES") or environ.get("NVIDIA_VISIBLE_DEVICES")
    if pinned and pinned.strip().lower() not in ("all", "none", "void"):
        return 0
    return gpu_index


@dataclass(frozen=True)
class Preload:
    """What ``preload_cuda`` did: ``state`` as ``Engine.preload``; ``ok`` False only when
    preload_dlls raised (the sessions then stay on the CPU); ``why`` its error, or the
    lines it printed about libraries it could not load."""

    state: str
    ok: bool = True
    why: str = ""


def preload_cuda(onnxruntime: Any) -> Preload:
    """Load CUDA's and cuDNN's libraries from the NVIDIA wheels before the first CUDA
    session (onnxruntime's CUDA provider dlopens them by name: the loader does not look in
    site-packages). onnxruntime before 1.21 has no preload_dlls: the loader's own path
    then. preload_dlls prints, not raises, a library it cannot load: those lines are kept."""
    preload = getattr(onnxruntime, "preload_dlls", None)
    if not callable(preload):
        return Preload("no preload_dlls")
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            preload()
    except Exception as exc:  # a third party's loader, any failure: said, never fatal
        return Preload("failed", ok=False, why=f"onnxruntime.preload_dlls() raised "
                       f"{type(exc).__name__}: {_one_line(str(exc))}")  # fmt: skip
    lines = [_one_line(line) for line in printed.getvalue().splitlines()]
    failed = [line for line in lines if "fail" in line.lower()]
    return Preload("preloaded", why="; ".join(failed[:PRELOAD_LINES]))


def _one_line(text: str) -> str:
    """``text`` for a log field and the task's output: one line, printable (a NUL or an
    escape sequence from a library path would reach the store and the dashboard), cut."""
    printable = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(printable.split())[:PRELOAD_LINE_CHARS]


def engine_for(ctx: ExecContext) -> Engine:
    """The engine for this worker, loaded once per process and provider list."""
    requested = requested_providers(available_providers(), ctx.gpu_index)
    device = None
    if CUDA in requested and ctx.gpu_index is not None:  # CUDA is asked for on a GPU only
        device = cuda_device(ctx.gpu_index, os.environ)
    engine = _load(tuple(requested), device)
    level = logging.WARNING if engine.dropped else logging.INFO
    log.log(
        level,
        "ocr engine onnx",
        extra={
            "providers_requested": list(engine.requested),
            "providers": list(engine.used),
            "device_id": engine.device_id,
            "gpu": ctx.gpu_index,
            "preload": engine.preload,
            "why": engine.why,
        },
    )
    return engine


_LOCK = threading.Lock()


@functools.cache
def _engine_cached(requested: tuple[str, ...], device: int | None) -> Engine:
    from rapidocr_onnxruntime import RapidOCR

    # RapidOCR builds CPU sessions; on a GPU worker they are replaced by sessions asking
    # for exactly ``requested`` on the worker's card (RapidOCR would ask for device 0).
    preloaded = Preload("")
    if CUDA in requested:
        import onnxruntime

        preloaded = preload_cuda(onnxruntime)
    ocr = RapidOCR(print_verbose=False)
    holders = [ocr.text_det.infer, ocr.text_cls.infer, ocr.text_rec.session]
    if CUDA in requested and preloaded.ok:  # else RapidOCR's CPU sessions stay
        import onnxruntime

        providers: list[Any] = [(CUDA, {"device_id": device}), CPU]
        for holder in holders:
            path = holder.session._model_path
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 3  # onnxruntime's own fallback warning shows
            holder.session = onnxruntime.InferenceSession(
                path, sess_options=options, providers=providers
            )
    used: list[str] | None = None
    for holder in holders:
        got = list(holder.session.get_providers())
        # the providers all three sessions share, in the first one's order
        used = got if used is None else [name for name in used if name in got]
    return Engine(ocr, requested, tuple(used or []), device, preloaded.state, preloaded.why)


def _load(requested: tuple[str, ...], device: int | None) -> Engine:
    with _LOCK:  # two tasks of one worker starting together load it once
        return _engine_cached(requested, device)


def read_text(ctx: ExecContext, engine: Engine, image: ImageFile) -> str:
    """The text of one image (checked by ``read_image``: an image, within the pixel
    budget), lines in reading order."""
    picture = _decode(ctx, image)
    try:
        result, _ = engine.ocr(picture)
    except Exception as exc:  # onnxruntime's and OpenCV's errors have no common base
        raise bad_input(
            f"the onnx OCR engine could not read image {image.path!r}: "
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1:] or ''}"
        ) from None
    return lines_of(result or [])


def _decode(ctx: ExecContext, image: ImageFile) -> Any:
    from PIL import Image, UnidentifiedImageError

    # read_image checked the size the header declares; PIL's own bomb guard is set to
    # the same budget, so a file whose frames declare more than its header stops here too.
    Image.MAX_IMAGE_PIXELS = ctx.max_image_pixels
    source: Any = (
        io.BytesIO(image.data) if image.data else resolve_data_path(ctx.data_dir, image.path)
    )
    try:
        with Image.open(source) as opened:
            opened.draft("RGB", (DECODE_MAX_SIDE, DECODE_MAX_SIDE))  # JPEG: decode smaller
            picture = opened.convert("RGB")
    except (
        UnidentifiedImageError,
        Image.DecompressionBombError,
        OSError,
        ValueError,
        SyntaxError,
    ) as exc:
        raise bad_input(
            f"image {image.path!r} does not decode: {exc}",
            hint="give a complete PNG, JPEG, WebP, BMP, GIF or TIFF file",
        ) from None
    if max(picture.size) > DECODE_MAX_SIDE:
        picture.thumbnail((DECODE_MAX_SIDE, DECODE_MAX_SIDE), Image.Resampling.BOX)
    return picture


def lines_of(result: Sequence[Sequence[Any]]) -> str:
    """RapidOCR's boxes ``[corners, text, score]`` as lines: boxes whose vertical centres
    are close are one line, left to right, joined by a space (a line's words may come as
    several boxes where the gap is wide)."""
    boxes = []
    for corners, text, *_ in result:
        ys = [point[1] for point in corners]
        xs = [point[0] for point in corners]
        top, bottom = min(ys), max(ys)
        boxes.append(((top + bottom) / 2, max(bottom - top, 1.0), min(xs), str(text)))
    boxes.sort(key=lambda box: (box[0], box[2]))
    lines: list[list[tuple[float, float, float, str]]] = []
    for box in boxes:
        if lines and abs(box[0] - lines[-1][0][0]) <= SAME_LINE * max(box[1], lines[-1][0][1]):
            lines[-1].append(box)
        else:
            lines.append([box])
    return "\n".join(
        " ".join(text for *_, text in sorted(line, key=lambda box: box[2])).strip()
        for line in lines
    ).strip()
