"""What the media executors share: the Debian tools they run, images read off the data
volume, and upstream outputs that arrive as JSON text.

ffmpeg / ffprobe (package ffmpeg), pdftoppm / pdftotext (poppler-utils) and tesseract
(tesseract-ocr) are run as subprocesses; the worker image installs them
(03-agents/Dockerfile). Nothing here decodes media by hand: images are only sniffed (their
header: format and size) so that a file that is not an image fails before a model loads.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    data: bytes
    format: str
    width: int
    height: int


def read_image(ctx: ExecContext, relative: str) -> ImageFile:
    """An image off the data volume, refused when it is too large or not an image."""
    path = input_file(ctx, relative, "image")
    limit = ctx.max_image_bytes
    size = path.stat().st_size
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
            f"image {relative!r} does not decode: {exc}",
            hint="give a PNG, JPEG, WebP, GIF or BMP file",
        ) from None
    return ImageFile(relative, data, fmt, width, height)


def sniff_image(data: bytes) -> tuple[str, int, int]:
    """Format, width and height from an image's header; ValueError when it is none."""
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
    raise ValueError("not a PNG, JPEG, WebP, GIF or BMP image")


def _sized(fmt: str, width: int, height: int) -> tuple[str, int, int]:
    if width <= 0 or height <= 0:
        raise ValueError(f"{fmt} header gives no size")
    return fmt, width, height


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
