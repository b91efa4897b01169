"""Images in generate and chat requests (the stand-in cannot see: it describes what it can
derive from the bytes, their format, width × height and size).

Upstream (ollama v0.20.6):
  - api/types.go GenerateRequest.Images and Message.Images are `[]ImageData` (`[]byte`):
    JSON base64 text, which encoding/json decodes while binding the body; a string that is
    not base64 fails ShouldBindJSON, answered 400 `{"error": err.Error()}` (server/routes.go
    GenerateHandler / ChatHandler): "illegal base64 data at input byte N" (encoding/base64
    CorruptInputError).
  - A model without vision does not refuse images: runner/ollamarunner/runner.go and
    runner/llamarunner/runner.go `inputs` split the prompt at its [img-N] tags only for a
    multimodal model; otherwise the prompt is tokenised whole and the images are unused.
    The stand-in answers such a request as if it held no image.
  - A vision model's runner decodes each image (Go's image.Decode via the model's
    EncodeMultimodal); bytes of no known format fail the request: 500 "image: unknown
    format" (image/format.go ErrFormat).
"""

from __future__ import annotations

import base64
import binascii
import string
import struct

_B64 = set(string.ascii_letters + string.digits + "+/=")


class ImageError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def decode_all(values: object) -> list[bytes]:
    """A request's `images` as bytes; refused as encoding/json's base64 decoding does."""
    if values is None:
        return []
    if not isinstance(values, list):
        raise ImageError(400, "json: cannot unmarshal into Go value of type []api.ImageData")
    images = []
    for value in values:
        text = str(value)
        bad = next((i for i, ch in enumerate(text) if ch not in _B64), None)
        try:
            if bad is not None:
                raise binascii.Error
            images.append(base64.b64decode(text, validate=True))
        except binascii.Error:
            raise ImageError(400, f"illegal base64 data at input byte {bad or 0}") from None
    return images


def size_of(data: bytes) -> tuple[str, int, int]:
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return "png", width, height
    if data.startswith(b"\xff\xd8"):
        index = 2
        while index + 9 < len(data) and data[index] == 0xFF:
            marker = data[index + 1]
            (length,) = struct.unpack(">H", data[index + 2 : index + 4])
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                height, width = struct.unpack(">HH", data[index + 5 : index + 9])
                return "jpeg", width, height
            index += 2 + length
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp", 0, 0
    raise ImageError(500, "image: unknown format")


def describe(images: list[bytes]) -> list[str]:
    """The deterministic description of a vision model's images, as words."""
    words: list[str] = []
    for number, data in enumerate(images, start=1):
        fmt, width, height = size_of(data)
        words += [f"image{number}:", f"{width}x{height}", fmt, f"{len(data)}", "bytes;"]
    return words
