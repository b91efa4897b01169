"""The stand-in's check of the images in a request, as each upstream API documents it;
stdlib only, and none of the kit's code (it checks the gateway, not itself).

Anthropic (https://docs.anthropic.com/en/docs/build-with-claude/vision, "Basics and
Limits", and the Messages API reference's image block): ``{"type": "image", "source":
{"type": "base64", "media_type", "data"}}``, media_type one of image/jpeg, image/png,
image/gif, image/webp; 5 MB an image through the API; "If you submit an image larger than
8000x8000 px, it will be rejected. If you submit more than 20 images in one API request,
this limit is 2000x2000 px"; up to 100 images an API request. Refusals are 400
invalid_request_error (https://docs.anthropic.com/claude/reference/errors-and-rate-limits)
whose message names the field by its path, as the API's validation messages do
("messages.0.content.0.image.source.base64.media_type: Input should be ...").

OpenAI (https://developers.openai.com/api/docs/guides/images-vision, "Image input
requirements", and the Chat Completions reference's content part): ``{"type":
"image_url", "image_url": {"url": "data:image/jpeg;base64,..."}}``; PNG, JPEG, WEBP,
non-animated GIF; 20 MB an image; up to 500 images a request. Refusals are 400
invalid_request_error with ``param`` naming the part (the error body of
https://platform.openai.com/docs/guides/error-codes).

Each refusal's wording below is the stand-in's own where upstream documents only the rule,
so tests match on the status, the error type and the rule's words, never a whole message.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from typing import Any

ANTHROPIC_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
ANTHROPIC_MAX_BYTES = 5 * 1024 * 1024  # on the base64 text the request carries
ANTHROPIC_MAX_SIDE, ANTHROPIC_CROWDED_SIDE, ANTHROPIC_CROWDED_AFTER = 8000, 2000, 20
ANTHROPIC_MAX_IMAGES = 100
OPENAI_FORMATS = ("png", "jpeg", "gif", "webp")
OPENAI_MAX_BYTES = 20 * 1024 * 1024  # decoded
OPENAI_MAX_IMAGES = 500
DATA_URL = re.compile(r"^data:(image/[a-z0-9.+-]+);base64,([A-Za-z0-9+/]*={0,2})$")


class Refused(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


# ---------------------------------------------------------------- what the bytes are
def sniff(data: bytes) -> tuple[str, int, int] | None:
    """(format, width, height) by magic number and header, None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24 and data[12:16] == b"IHDR":
        return ("png", *struct.unpack(">II", data[16:24]))
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return ("gif", *struct.unpack("<HH", data[6:10]))
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8X":
            return ("webp", int.from_bytes(data[24:27], "little") + 1,
                    int.from_bytes(data[27:30], "little") + 1)  # fmt: skip
        if chunk == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return ("webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
        if chunk == b"VP8 ":
            width, height = struct.unpack("<HH", data[26:30])
            return ("webp", width & 0x3FFF, height & 0x3FFF)
    if data[:2] == b"\xff\xd8":
        return _jpeg(data)
    return None


def _jpeg(data: bytes) -> tuple[str, int, int] | None:
    at = 2
    while at + 9 < len(data):
        if data[at] != 0xFF:
            return None
        kind = data[at + 1]
        if 0xC0 <= kind <= 0xCF and kind not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return "jpeg", width, height
        at += 2 + struct.unpack(">H", data[at + 2 : at + 4])[0]
    return None


def _b64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


# ---------------------------------------------------------------- Anthropic
def anthropic_check(messages: Any) -> None:
    """Refused (400 invalid_request_error) for the first image block upstream refuses."""
    blocks = [
        (f"messages.{m}.content.{b}", block)
        for m, message in enumerate(messages if isinstance(messages, list) else [])
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for b, block in enumerate(message["content"])
        if isinstance(block, dict) and block.get("type") == "image"
    ]
    if len(blocks) > ANTHROPIC_MAX_IMAGES:
        raise Refused(f"messages: too many images: {len(blocks)} > {ANTHROPIC_MAX_IMAGES}")
    side = ANTHROPIC_CROWDED_SIDE if len(blocks) > ANTHROPIC_CROWDED_AFTER else ANTHROPIC_MAX_SIDE
    for where, block in blocks:
        source = block.get("source")
        if not isinstance(source, dict) or source.get("type") != "base64":
            raise Refused(f"{where}.image.source: Input tag does not match 'base64'")
        at = f"{where}.image.source.base64"
        media_type = source.get("media_type")
        if media_type not in ANTHROPIC_TYPES:
            allowed = ", ".join(f"'{t}'" for t in ANTHROPIC_TYPES[:-1])
            raise Refused(f"{at}.media_type: Input should be {allowed} or '{ANTHROPIC_TYPES[-1]}'")
        text = source.get("data")
        if not isinstance(text, str):
            raise Refused(f"{at}.data: Input should be a valid string")
        if len(text) > ANTHROPIC_MAX_BYTES:
            raise Refused(f"{at}: image exceeds 5 MB maximum: {len(text)} bytes > "
                          f"{ANTHROPIC_MAX_BYTES} bytes")  # fmt: skip
        data = _b64(text)
        if data is None:
            raise Refused(f"{at}.data: invalid base64 data")
        found = sniff(data)
        if found is None or f"image/{found[0]}" != media_type:
            raise Refused(f"{at}.data: Image does not match the provided media type {media_type}")
        if max(found[1], found[2]) > side:
            raise Refused(f"{at}.data: At least one of the image dimensions exceed max "
                          f"allowed size: {side} pixels")  # fmt: skip


# ---------------------------------------------------------------- OpenAI
def openai_check(messages: Any) -> None:
    """Refused (400 invalid_request_error, ``param`` the part) for the first image_url
    part upstream refuses."""
    parts = [
        (f"messages[{m}].content[{p}]", part)
        for m, message in enumerate(messages if isinstance(messages, list) else [])
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for p, part in enumerate(message["content"])
        if isinstance(part, dict) and part.get("type") == "image_url"
    ]
    if len(parts) > OPENAI_MAX_IMAGES:
        raise Refused(f"Too many images in request. Max is {OPENAI_MAX_IMAGES}.", "messages")
    for where, part in parts:
        param = f"{where}.image_url.url"
        url = (
            (part.get("image_url") or {}).get("url")
            if isinstance(part.get("image_url"), dict)
            else None
        )
        matched = DATA_URL.match(url) if isinstance(url, str) else None
        data = _b64(matched.group(2)) if matched else None
        if not matched or data is None:
            raise Refused(
                f"Invalid '{param}'. Expected a base64-encoded data URL with an image MIME "
                "type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got an "
                "invalid value.", param, "invalid_value",
            )  # fmt: skip
        if len(data) > OPENAI_MAX_BYTES:
            raise Refused(f"Image too large: {len(data)} bytes; the limit is "
                          f"{OPENAI_MAX_BYTES}.", param, "image_too_large")  # fmt: skip
        found = sniff(data)
        if found is None or found[0] not in OPENAI_FORMATS:
            raise Refused(
                "You uploaded an unsupported image. Please make sure your image has of one "
                f"the following formats: {list(OPENAI_FORMATS)}.", param, "invalid_image_format",
            )  # fmt: skip
