"""What the external tier's two APIs take as an image, and the one check the brain (before
a task is sent) and the gateway (before the provider is called) both make of an image.

Upstream, as each API documents it:

- Anthropic Messages API, "Vision" guide (https://docs.anthropic.com/en/docs/build-with-claude/vision,
  "Basics and Limits"): an image is a content block ``{"type": "image", "source": {"type":
  "base64", "media_type": ..., "data": ...}}``, media types ``image/jpeg``, ``image/png``,
  ``image/gif``, ``image/webp``; "up to ... 100 for API requests"; "If you submit an image
  larger than 8000x8000 px, it will be rejected. If you submit more than 20 images in one
  API request, this limit is 2000x2000 px."; "a 32MB request size limit for standard
  endpoints"; and 5 MB per image through the API (its refusal: "image exceeds 5 MB
  maximum"), counted on the base64 text the request carries.
- OpenAI Chat Completions, "Images and vision" guide
  (https://developers.openai.com/api/docs/guides/images-vision, "Image input
  requirements"): an image is a content part ``{"type": "image_url", "image_url": {"url":
  "data:image/jpeg;base64,..."}}`` of a user message; PNG, JPEG, WEBP and non-animated GIF;
  up to 50 MB of payload and 500 images a request; 20 MB an image.

The brain does not know which provider the gateway calls, so what it sends fits both at
once (``KIT``): 5 MiB of base64 an image, 8000 px a side, the kit's 16 images a task
(``MAX_IMAGES``: under the 20 past which Anthropic lowers the side to 2000 px), 20 MiB of
base64 a request (under Anthropic's 32 MB with the text). The gateway checks again with
its own provider's limits (``PROVIDERS``): it is the last door before the outside.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from airig.common.image_header import bytes_reader, image_size
from airig.common.task_schemas import MAX_IMAGES

# The formats both APIs take, by the name image_header gives them; BMP and TIFF neither.
MEDIA_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}
FORMATS = "a PNG, JPEG, GIF or WebP file"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """One API's limits on the images of one request (the sources: the module's text)."""

    max_base64_bytes: int  # one image, as the base64 text the request carries
    max_side: int  # px, either side
    max_count: int  # images in one request
    max_total_base64: int  # all of a request's images together
    # Anthropic: past this many images in a request, a side may be at most crowded_side px
    crowded_after: int | None = None
    crowded_side: int | None = None

    def side_for(self, count: int) -> int:
        crowded = self.crowded_after is not None and count > self.crowded_after
        if crowded and self.crowded_side is not None:
            return self.crowded_side
        return self.max_side


PROVIDERS = {
    "anthropic": Limits(5 * MIB, 8000, 100, 32 * MIB, crowded_after=20, crowded_side=2000),
    # 20 MB an image, as raw bytes (its base64 text is 4/3 of that); the guide names no
    # largest side (the model scales an image down), so only the pixel budget bounds it
    "openai": Limits(4 * ((20 * MIB + 2) // 3), 2**31, 500, 50 * MIB),
}
KIT = Limits(5 * MIB, 8000, MAX_IMAGES, 20 * MIB)


class ImageRefused(ValueError):
    """One line: which image, what is wrong, the limit."""


def base64_size(raw_bytes: int) -> int:
    """Length of the base64 text of ``raw_bytes`` bytes (padded)."""
    return 4 * ((raw_bytes + 2) // 3)


def sniff(data: bytes, what: str) -> tuple[str, int, int]:
    """Media type, width and height the bytes declare (the header alone, no decoding): a
    file named .png that holds text, a zip or a BMP is refused here, whatever its name or
    the media type a request claims."""
    try:
        fmt, width, height = image_size(bytes_reader(data))
    except ValueError as exc:
        raise ImageRefused(f"{what} is not {FORMATS} ({exc})") from None
    if fmt not in MEDIA_TYPES:
        raise ImageRefused(f"{what} is a {fmt.upper()} file; the external tier takes {FORMATS}")
    return MEDIA_TYPES[fmt], width, height


def check_size(what: str, width: int, height: int, limits: Limits, count: int) -> None:
    side = limits.side_for(count)
    if width > side or height > side:
        raise ImageRefused(
            f"{what} is {width} x {height} px; the external tier takes at most {side} px a side"
        )


def check_count(count: int, limits: Limits) -> None:
    if count > limits.max_count:
        raise ImageRefused(f"{count} images; the external tier takes at most {limits.max_count}")


def decode(data: str, what: str) -> bytes:
    """Strict base64 (the alphabet and padding only): a data URL's header or a stray
    character is refused, never skipped over."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRefused(f"{what} is not valid base64") from None


def check_encoded(
    media_type: str, data: str, what: str, limits: Limits, count: int
) -> tuple[int, int]:
    """An image as a request carries it (base64 text and its claimed media type): its size
    within ``limits``, the bytes what the media type says. Width and height back."""
    if len(data) > limits.max_base64_bytes:
        raise ImageRefused(
            f"{what} is {len(data)} bytes of base64; the limit is {limits.max_base64_bytes}"
        )
    actual, width, height = sniff(decode(data, what), what)
    if actual != media_type:
        raise ImageRefused(f"{what} says {media_type} but its bytes are {actual}")
    check_size(what, width, height, limits, count)
    return width, height


def estimated_tokens(width: int, height: int) -> int:
    """What one image costs in input tokens, at most: Anthropic's (width x height) / 750 of
    an image scaled to fit 1568 px a side (about 1,600 tokens at most, the vision guide's
    "Evaluate image size"); OpenAI's high-detail tiles stay under that (85 + 170 a 512 px
    tile of a 2048 x 768 image: 1,105)."""
    scale = min(1.0, 1568 / max(width, height, 1))
    return max(1, min(1600, int(width * scale * height * scale / 750) + 1))
