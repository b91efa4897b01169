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
import struct
import subprocess
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import TypeAdapter, ValidationError

from airig.common.task_schemas import MAX_IMAGES, DataPath
from airig.executors.context import ExecContext, TaskError, resolve_data_path, run_abortable

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
# A converted image is decoded whole by ffmpeg, so its header's size is checked first: a
# TIFF or GIF that declares more pixels is refused before anything decodes it (a
# decompression bomb: a few bytes that declare 100000 x 100000). 64 megapixels takes a
# 61-megapixel camera's frame or an A4 page scanned at 800 dpi; decoded at up to 8 bytes a
# pixel (16-bit RGBA), that is 512 MB, within the worker's 2 GiB (AIRIG_WORKER_MEM_LIMIT).
MAX_DECODE_PIXELS = 64_000_000
# ffmpeg reads such a file whole into memory before it decodes it: no file larger than one
# uncompressed 16-bit RGBA frame of that size is read.
MAX_DECODE_BYTES = MAX_DECODE_PIXELS * 8
# The PNG a model gets fits in MAX_SIDE x MAX_SIDE (never enlarged), 8 bits a channel: at
# most 16 MiB, under AIRIG_MAX_IMAGE_BYTES' default, and still above what the vision model
# uses (Ollama's qwen25vl/process_image.go scales an image to vision.max_pixels, 2<<20).
MAX_SIDE = 2048
PNG_FORMATS = "rgb24|rgba|gray|ya8"
IMAGE_TYPES = "a PNG, JPEG, WebP, BMP, GIF or TIFF file"


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


def output_folder(ctx: ExecContext, given: str | None, default: str) -> tuple[Path, str]:
    """The folder to write into (made), and its path relative to the data volume."""
    relative = given or default
    folder = resolve_data_path(ctx.data_dir, relative)
    if folder.exists() and not folder.is_dir():
        raise bad_input(f"out_dir {relative!r} is a file", hint="name a folder")
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
    """An image off the data volume, refused when it is too large or not an image. A TIFF
    or GIF is only checked here (its header's size); ``model_image`` converts it."""
    path = input_file(ctx, relative, "image")
    size = path.stat().st_size
    with path.open("rb") as handle:
        if _converted_format(handle.read(8)) is not None:
            return _checked_for_conversion(relative, handle, size)
    limit = ctx.max_image_bytes
    if size > limit:
        raise bad_input(
            f"image {relative!r} is {size} bytes; the limit is {limit} (AIRIG_MAX_IMAGE_BYTES)",
            hint="scale it down (e.g. ffmpeg -i in.png -vf scale=1600:-1 out.jpg)",
        )
    data = path.read_bytes()
    try:
        fmt, width, height = sniff_image(data)
    except ValueError as exc:
        raise bad_input(
            f"image {relative!r} does not decode: {exc}", hint=f"give {IMAGE_TYPES}"
        ) from None
    return ImageFile(relative, data, fmt, width, height)


def _checked_for_conversion(relative: str, handle: IO[bytes], size: int) -> ImageFile:
    """A TIFF or GIF whose header is read (seeking: a TIFF's directory is often at its
    end) and whose declared size ffmpeg may decode; nothing decodes it here."""
    try:
        fmt, width, height = _converted_size(lambda at, count: _read_at(handle, at, count))
    except ValueError as exc:
        raise bad_input(
            f"image {relative!r} does not decode: {exc}", hint=f"give {IMAGE_TYPES}"
        ) from None
    hint = "scale it down first (e.g. ffmpeg -i in.tif -vf scale=4000:-1 out.png)"
    if width * height > MAX_DECODE_PIXELS:
        raise bad_input(
            f"image {relative!r} declares {width} x {height} pixels; a {fmt.upper()} is "
            f"converted for the model up to {MAX_DECODE_PIXELS // 1_000_000} megapixels",
            hint=hint,
        )
    if size > MAX_DECODE_BYTES:
        raise bad_input(
            f"image {relative!r} is {size} bytes; a {fmt.upper()} is converted for the model "
            f"up to {MAX_DECODE_BYTES} bytes",
            hint=hint,
        )
    return ImageFile(relative, b"", fmt, width, height)


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
        "-max_pixels", str(MAX_DECODE_PIXELS),
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
    if _converted_format(data) == "tiff":
        return _sized("tiff", *_tiff_size(lambda offset, count: data[offset : offset + count]))
    return _sniff_whole(data)


def _read_at(handle: IO[bytes], offset: int, count: int) -> bytes:
    """``count`` bytes at ``offset``; none past the end (a header's offset is untrusted)."""
    try:
        handle.seek(offset)
    except (OverflowError, OSError):
        return b""
    return handle.read(count)


def _converted_format(head: bytes) -> str | None:
    if head[:4] in TIFF_MAGIC:
        return "tiff"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    return None


def _converted_size(read: Callable[[int, int], bytes]) -> tuple[str, int, int]:
    """A TIFF's or GIF's format and size over ``read(offset, count)``: a TIFF's may be
    anywhere in the file, a GIF's is in its first 10 bytes."""
    if _converted_format(read(0, 8)) == "tiff":
        return _sized("tiff", *_tiff_size(read))
    return _sniff_whole(read(0, 16))


def _sniff_whole(data: bytes) -> tuple[str, int, int]:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(data) < 24 or data[12:16] != b"IHDR":
            raise ValueError("truncated PNG header")
        width, height = struct.unpack(">II", data[16:24])
        return _sized("png", width, height)
    if data.startswith(b"\xff\xd8"):
        return _sized("jpeg", *_jpeg_size(data))
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _sized("webp", *_webp_size(data))
    if data[:6] in (b"GIF87a", b"GIF89a"):
        if len(data) < 10:
            raise ValueError("truncated GIF header")
        width, height = struct.unpack("<HH", data[6:10])
        return _sized("gif", width, height)
    if data[:2] == b"BM" and len(data) >= 26:
        width, height = struct.unpack("<ii", data[18:26])
        return _sized("bmp", width, abs(height))
    raise ValueError("not a PNG, JPEG, WebP, BMP, GIF or TIFF image")


def _sized(fmt: str, width: int, height: int) -> tuple[str, int, int]:
    if width <= 0 or height <= 0:
        raise ValueError(f"{fmt} header gives no size")
    return fmt, width, height


# TIFF (Adobe's TIFF 6.0, section 2; BigTIFF: 8-byte offsets): the byte order, 42 (43 for
# BigTIFF), the first directory's offset; each entry a tag, a type, a count and a value.
TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
TIFF_WIDTH, TIFF_HEIGHT = 256, 257
TIFF_INTS = {3: "H", 4: "I", 16: "Q"}  # SHORT, LONG, LONG8 (BigTIFF)
MAX_TIFF_ENTRIES = 4096  # the size tags come first (entries are sorted by tag)


def _tiff_size(read: Callable[[int, int], bytes]) -> tuple[int, int]:
    """Width and height from a TIFF's first directory, wherever in the file it is."""
    head = read(0, 16)
    order = "<" if head[:2] == b"II" else ">"
    big = head[2:4] in (b"+\x00", b"\x00+")
    if len(head) < (16 if big else 8):
        raise ValueError("truncated TIFF header")
    if big:
        (offset,) = struct.unpack(order + "Q", head[8:16])
        count_format, entry_size, value_at = "Q", 20, 12
    else:
        (offset,) = struct.unpack(order + "I", head[4:8])
        count_format, entry_size, value_at = "H", 12, 8
    count_size = struct.calcsize(count_format)
    raw = read(offset, count_size)
    if len(raw) < count_size:
        raise ValueError("TIFF directory outside the file")
    (count,) = struct.unpack(order + count_format, raw)
    count = min(count, MAX_TIFF_ENTRIES)
    table = read(offset + count_size, count * entry_size)
    found: dict[int, int] = {}
    for start in range(0, len(table) - entry_size + 1, entry_size):
        tag, kind = struct.unpack(order + "HH", table[start : start + 4])
        if tag not in (TIFF_WIDTH, TIFF_HEIGHT):
            continue
        code = TIFF_INTS.get(kind)
        if code is None or value_at + struct.calcsize(code) > entry_size:
            raise ValueError(f"TIFF size tag {tag} has type {kind}, not an integer")
        value = table[start + value_at : start + value_at + struct.calcsize(code)]
        (found[tag],) = struct.unpack(order + code, value)
    return found.get(TIFF_WIDTH, 0), found.get(TIFF_HEIGHT, 0)


def _jpeg_size(data: bytes) -> tuple[int, int]:
    index = 2
    while index + 9 < len(data):
        if data[index] != 0xFF:
            raise ValueError("corrupt JPEG marker")
        marker = data[index + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            index += 2
            continue
        (length,) = struct.unpack(">H", data[index + 2 : index + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[index + 5 : index + 9])
            return width, height
        index += 2 + length
    raise ValueError("JPEG without a frame header")


def _webp_size(data: bytes) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    raise ValueError("truncated WebP header")
