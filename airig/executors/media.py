"""What the media executors share: the Debian tools they run, images read off the data
volume, and upstream outputs that arrive as JSON text.

ffmpeg / ffprobe (package ffmpeg), pdftoppm / pdftotext (poppler-utils) and tesseract
(tesseract-ocr) are run as subprocesses; the worker image installs them
(03-agents/Dockerfile). Nothing here decodes media by hand: images are only sniffed (their
header: format and size) so that a file that is not an image fails before a model loads,
and a TIFF or GIF is turned into a PNG by ffmpeg before a model sees it (``model_image``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import TypeAdapter, ValidationError

from airig.common.image_header import IMAGE_TYPES, bytes_reader, image_size
from airig.common.task_schemas import MAX_IMAGES, DataPath
from airig.executors.context import (
    ExecContext,
    TaskError,
    output_folder_path,
    resolve_data_path,
    run_abortable,
)

# Which Debian package brings each tool (the hint when one is missing).
PACKAGES = {
    "ffmpeg": "ffmpeg",
    "ffprobe": "ffmpeg",
    "pdftoppm": "poppler-utils",
    "pdftotext": "poppler-utils",
    "pdfinfo": "poppler-utils",
    "tesseract": "tesseract-ocr",
}

# The largest image sent to a model or to tesseract (ExecContext.max_image_bytes, from
# AIRIG_MAX_IMAGE_BYTES; default 20 MiB). Ollama itself sets no limit, but the image travels
# base64-encoded inside one JSON request (4/3 of its size) that the client builds and the
# server holds in memory whole, and a vision model scales it down to a few megapixels
# anyway: 20 MiB is a 50-megapixel JPEG or a large lossless screenshot, above what any model
# uses, while a runaway file (a raw frame dump, a mislabelled video) fails at once.

# Which formats go to Ollama as they are. The kit runs two Ollama engines (02-compute/
# images.yaml) that decode different sets: 0.20.6 and 0.24.0 decode in Go (model/model.go
# registers image/jpeg, image/png and x/image's bmp, tiff and webp: no GIF), 0.32.15 hands
# the bytes to llama-server, whose stb_image reads JPEG, PNG, BMP and GIF but no TIFF (WebP
# Ollama turns into PNG itself, llm/llama_server.go llamaServerMediaBytes). PNG, JPEG, WebP
# and BMP both read; a TIFF (a scanner's, a camera's export) or a GIF one of them refuses,
# so those go as a PNG that ffmpeg makes (``model_image``), with the demuxer that reads them.
DIRECT_FORMATS = ("png", "jpeg", "webp", "bmp")
CONVERTED_FORMATS = {"tiff": "tiff_pipe", "gif": "gif"}
# Every image is checked against the pixel budget (ExecContext.max_image_pixels, from
# AIRIG_MAX_IMAGE_PIXELS) by its header before anything decodes it: a decompression bomb
# (a 540 KB PNG declaring 60000 x 60000) made tesseract take 1.5 GB and went to Ollama as
# it was. The default, 64 megapixels, takes a 61-megapixel camera's frame, a 48-megapixel
# phone's or an A4 page scanned at 800 dpi, and is five times what the largest vision model
# reads (Qwen2.5-VL's preprocessor scales an image to at most max_pixels = 12845056; its
# Ollama port to 2 << 20): decoded at up to 8 bytes a pixel (16-bit RGBA) it is 512 MB,
# within the worker's 2 GiB (AIRIG_WORKER_MEM_LIMIT).
# ffmpeg reads a TIFF or GIF whole into memory before it decodes it: no file larger than
# one uncompressed 16-bit RGBA frame of the budget's size is read (max_decode_bytes).
DECODE_BYTES_PER_PIXEL = 8
# The PNG a model gets fits in MAX_SIDE x MAX_SIDE (never enlarged), 8 bits a channel: at
# most 16 MiB, under AIRIG_MAX_IMAGE_BYTES' default, and still above what the vision model
# uses (Ollama's qwen25vl/process_image.go scales an image to vision.max_pixels, 2<<20).
MAX_SIDE = 2048
PNG_FORMATS = "rgb24|rgba|gray|ya8"


@dataclass
class ToolResult:
    returncode: int
    stdout: bytes
    stderr: str


def run_tool(ctx: ExecContext, argv: list[str], cwd: Path | None = None) -> ToolResult:
    """Run one tool within the attempt's time limit; a cancel or timeout kills it."""
    tool = argv[0]
    if shutil.which(tool) is None:
        package = PACKAGES.get(tool, tool)
        raise TaskError(
            f"{tool} is not installed on this worker",
            error_type="tool_missing",
            retryable=False,
            hint=f"install Debian's {package} package (the kit's image has it: rebuild it)",
        )
    proc = subprocess.Popen(  # noqa: S603 - argv is built by the executors, never a shell
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
    )

    def kill() -> None:
        if proc.poll() is None:
            proc.kill()

    try:
        out, err = run_abortable(ctx, proc.communicate, kill)
    finally:
        kill()
    return ToolResult(proc.returncode, out, err.decode("utf-8", "replace"))


def last_line(text: str, limit: int = 300) -> str:
    """The tool's last non-empty stderr line: where ffmpeg and poppler say what is wrong."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "no message")[:limit]


def bad_input(message: str, hint: str = "", **details: Any) -> TaskError:
    return TaskError(message, error_type="bad_input", retryable=False, hint=hint, details=details)


def input_file(ctx: ExecContext, relative: str, what: str) -> Path:
    path = resolve_data_path(ctx.data_dir, relative)
    if not path.is_file():
        raise bad_input(
            f"{what} {relative!r} is not on the data volume", hint=f"put it under {ctx.data_dir}"
        )
    return path


def output_folder(
    ctx: ExecContext, given: str | None, default: str, what: str = "out_dir"
) -> tuple[Path, str]:
    """The folder to write into (made): inside outputs/ of the data volume once its links
    are resolved, never index/ (context.output_folder_path); and its path relative to the
    data volume."""
    relative = given or default
    folder = output_folder_path(ctx.data_dir, relative, what)
    if folder.exists() and not folder.is_dir():
        raise bad_input(f"{what} {relative!r} is a file", hint="name a folder")
    folder.mkdir(parents=True, exist_ok=True)
    return folder, data_relative(ctx, folder)


def data_relative(ctx: ExecContext, path: Path) -> str:
    return path.resolve().relative_to(ctx.data_dir.resolve()).as_posix()


def safe_stem(path: str) -> str:
    """A default output folder's name from an input's: its letters and digits of any script
    kept (NFC), the rest ``_``, at most 100 UTF-8 bytes cut at a character boundary."""
    stem = unicodedata.normalize("NFC", Path(path).stem)
    safe = re.sub(r"[^\w.-]+", "_", stem).lstrip(".-")
    return safe.encode()[:100].decode("utf-8", "ignore") or "input"


# ------------------------------------------------------------------ JSON text from templates
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n?\s*```\s*$", re.DOTALL)


def loads_lenient(value: Any) -> Any:
    """A template's insert as data: a string holding JSON (an LLM's may be wrapped in a
    ```json fence) becomes that JSON; any other string stays text; lists and mappings are
    kept as they are."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    if text[:1] in ("{", "[", '"') or text in ("null", "true", "false") or _is_number(text):
        try:
            return json.loads(text)
        except ValueError:
            return value
    return value


def _is_number(text: str) -> bool:
    return bool(re.fullmatch(r"-?\d+(\.\d+)?([eE][+-]?\d+)?", text))


_DATA_PATH: TypeAdapter[str] = TypeAdapter(DataPath)


def image_paths(value: str | list[str]) -> list[str]:
    """The paths an ``images`` field names: a list, or JSON text of a list of paths or of
    objects with a ``path`` (a frames / pages output, or its ``frames`` / ``pages``)."""
    data = loads_lenient(value) if isinstance(value, str) else value
    if isinstance(data, dict):
        for key in ("frames", "pages", "images"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if isinstance(data, str):
        data = [data]
    if not isinstance(data, list) or not data:
        raise bad_input("images must be a list of paths on the data volume")
    paths = []
    for item in data:
        path = item.get("path") if isinstance(item, dict) else item
        if not isinstance(path, str):
            raise bad_input(f"images: {item!r:.80} is neither a path nor an object with 'path'")
        try:
            paths.append(_DATA_PATH.validate_python(path))
        except ValidationError:
            raise bad_input(f"images: {path!r:.200} is not a path inside the data volume") from None
    if len(paths) > MAX_IMAGES:
        raise bad_input(
            f"{len(paths)} images; one task takes at most {MAX_IMAGES}",
            hint="split the images over several tasks",
        )
    return paths


# ------------------------------------------------------------------ images
@dataclass
class ImageFile:
    path: str  # relative to the data volume
    data: bytes  # what a model is sent: empty for a TIFF or GIF until model_image converts it
    format: str
    width: int
    height: int
    converted_from: str | None = None  # "tiff" / "gif" once model_image made it a PNG


def read_image(ctx: ExecContext, relative: str) -> ImageFile:
    """An image off the data volume, refused when it is not an image, declares more pixels
    than the budget (its header alone is read for that, before anything decodes it: a
    vision model, tesseract, ffmpeg) or is too large. A TIFF or GIF is only checked here;
    ``model_image`` converts it."""
    path = input_file(ctx, relative, "image")
    size = path.stat().st_size
    with path.open("rb") as handle:
        try:
            fmt, width, height = image_size(lambda at, count: _read_at(handle, at, count))
        except ValueError as exc:
            raise bad_input(
                f"image {relative!r} does not decode: {exc}", hint=f"give {IMAGE_TYPES}"
            ) from None
        check_pixels(ctx, f"image {relative!r} declares {width} x {height} pixels", width * height)
        if fmt in CONVERTED_FORMATS:
            return _checked_for_conversion(ctx, relative, fmt, size, width, height)
        limit = ctx.max_image_bytes
        if size > limit:
            raise bad_input(
                f"image {relative!r} is {size} bytes; the limit is {limit} (AIRIG_MAX_IMAGE_BYTES)",
                hint="scale it down (e.g. ffmpeg -i in.png -vf scale=1600:-1 out.jpg)",
            )
        handle.seek(0)
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew since: what is sent is never more than the limit
        raise bad_input(f"image {relative!r} changed while it was read", hint="give it again")
    return ImageFile(relative, data, fmt, width, height)


def check_pixels(ctx: ExecContext, what: str, pixels: int, hint: str = "") -> None:
    """Refuse ``pixels`` over the budget (AIRIG_MAX_IMAGE_PIXELS): one line saying ``what``
    declares them and the limit."""
    budget = ctx.max_image_pixels
    if pixels <= budget:
        return
    raise bad_input(
        f"{what} ({megapixels(pixels)} megapixels); the limit is {megapixels(budget)} "
        "megapixels (AIRIG_MAX_IMAGE_PIXELS)",
        hint=hint
        or "scale it down first (e.g. ffmpeg -i in.png -vf scale=4000:-1 out.png), or raise "
        "AIRIG_MAX_IMAGE_PIXELS in .env",
        pixels=pixels,
        limit=budget,
    )


def megapixels(pixels: int) -> str:
    """64000000 -> "64", 14400000000 -> "14,400", 76800 -> "0.077"."""
    value = pixels / 1_000_000
    return f"{value:.2g}" if value < 1 else f"{value:,.1f}".removesuffix(".0")


def _checked_for_conversion(
    ctx: ExecContext, relative: str, fmt: str, size: int, width: int, height: int
) -> ImageFile:
    """A TIFF or GIF within the pixel budget that ffmpeg may read: it reads the file whole
    into memory before it decodes it, so no file larger than one uncompressed 16-bit RGBA
    frame of the budget's size (``max_decode_bytes``)."""
    limit = max_decode_bytes(ctx)
    if size > limit:
        raise bad_input(
            f"image {relative!r} is {size} bytes; a {fmt.upper()} is converted for the model "
            f"up to {limit} bytes",
            hint="scale it down first (e.g. ffmpeg -i in.tif -vf scale=4000:-1 out.png)",
        )
    return ImageFile(relative, b"", fmt, width, height)


def max_decode_bytes(ctx: ExecContext) -> int:
    return int(ctx.max_image_pixels * DECODE_BYTES_PER_PIXEL)


def model_image(ctx: ExecContext, image: ImageFile) -> ImageFile:
    """The image as every Ollama of the kit decodes it: PNG, JPEG, WebP and BMP as they
    are; a TIFF or GIF as a PNG ffmpeg makes of its first page or frame, fitted into
    MAX_SIDE x MAX_SIDE, on stdout (nothing written to the data volume). The demuxer is
    the sniffed format's, so a file's name never decides how it is read."""
    if image.format not in CONVERTED_FORMATS:
        return image
    path = resolve_data_path(ctx.data_dir, image.path)
    fit = f"scale='min(iw,{MAX_SIDE})':'min(ih,{MAX_SIDE})':force_original_aspect_ratio=decrease"
    argv = [
        "ffmpeg", "-v", "error", "-nostdin",
        # ffmpeg's own bound too, should its reading of the header differ from ours
        "-max_pixels", str(ctx.max_image_pixels),
        "-protocol_whitelist", "file",
        "-f", CONVERTED_FORMATS[image.format], "-i", f"file:{path}",
        "-frames:v", "1", "-an", "-sn", "-vf", f"{fit},format={PNG_FORMATS}",
        "-f", "image2pipe", "-c:v", "png", "pipe:1",
    ]  # fmt: skip
    result = run_tool(ctx, argv)
    ctx.check()
    try:
        if result.returncode != 0:
            raise ValueError(_decode_error(result.stderr))
        _, width, height = _sized_png(result.stdout)
    except ValueError as exc:
        raise bad_input(
            f"image {image.path!r} ({image.format.upper()}) does not decode: {exc}",
            hint=f"give {IMAGE_TYPES}",
        ) from None
    if len(result.stdout) > ctx.max_image_bytes:
        raise bad_input(
            f"image {image.path!r} is {len(result.stdout)} bytes as a PNG; the limit is "
            f"{ctx.max_image_bytes} (AIRIG_MAX_IMAGE_BYTES)",
            hint="raise AIRIG_MAX_IMAGE_BYTES, or give a JPEG of it",
        )
    return ImageFile(image.path, result.stdout, "png", width, height, image.format)


def _decode_error(stderr: str) -> str:
    """ffmpeg's reason: its first error line names the decoder's complaint, the later ones
    only what failed after it ("Error configuring filter graph")."""
    lines = [_FFMPEG_CONTEXT.sub("", line).strip() for line in stderr.splitlines()]
    lines = [line for line in lines if line]
    return lines[0][:300] if lines else "ffmpeg made no image"


# "[tiff @ 0x55d0...] " before a line: which of ffmpeg's components spoke, and its address
_FFMPEG_CONTEXT = re.compile(r"^(\s*\[[^\]]* @ 0x[0-9a-fA-F]+\])+")


def _sized_png(data: bytes) -> tuple[str, int, int]:
    fmt, width, height = sniff_image(data)
    if fmt != "png":
        raise ValueError("ffmpeg made no PNG")
    return fmt, width, height


def sniff_image(data: bytes) -> tuple[str, int, int]:
    """Format, width and height from an image's header; ValueError when it is none."""
    return image_size(bytes_reader(data))


def _read_at(handle: IO[bytes], offset: int, count: int) -> bytes:
    """``count`` bytes at ``offset``; none past the end (a header's offset is untrusted)."""
    try:
        handle.seek(offset)
    except (OverflowError, OSError):
        return b""
    return handle.read(count)
