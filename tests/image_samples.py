"""Small image files made in the test, byte by byte (no tool needed): a real PNG and GIF
of any declared size, and the liars (text or a zip named .png, a BMP), for the checks of
what reaches the external tier (issue 39 §3)."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int = 4, height: int = 3, pad: int = 0) -> bytes:
    """A PNG declaring ``width`` x ``height`` (8-bit gray). Small sizes hold every pixel;
    a large one (a pixel bomb) holds only its first row, as such a bomb does, its header
    alone deciding. ``pad`` bytes of an ancillary chunk make the file larger."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = height if width * height <= 1_000_000 else 1
    raw = (b"\x00" + b"\x80" * width) * rows  # filter byte 0, then the row's pixels
    extra = _chunk(b"teXt", b"pad\x00" + b"x" * pad) if pad else b""
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + extra
            + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b""))  # fmt: skip


def gif() -> bytes:
    """The smallest GIF89a: one 1 x 1 frame, 2-colour table, its LZW data (2, then 0x44
    0x01: clear, pixel 0, end)."""
    palette = b"\x00\x00\x00\xff\xff\xff"
    screen = b"GIF89a" + struct.pack("<HHBBB", 1, 1, 0x80, 0, 0) + palette
    image = b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0)
    return screen + image + b"\x02\x02\x44\x01\x00" + b"\x3b"


def bmp(width: int = 2, height: int = 2) -> bytes:
    row = b"\x00" * ((width * 3 + 3) // 4 * 4)
    pixels = row * height
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(pixels), 0, 0, 0, 0)
    head = b"BM" + struct.pack("<IHHI", 14 + 40 + len(pixels), 0, 0, 54)
    return head + info + pixels


def zip_file() -> bytes:
    """The same bytes at every call: a test's parameter, whose id every xdist worker must
    collect alike (a member dated by the clock differed between two workers that collected
    across a second's boundary, and the run stopped)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(zipfile.ZipInfo("payload.txt", date_time=(2024, 1, 1, 0, 0, 0)),
                         "not an image")  # fmt: skip
    return buffer.getvalue()


TEXT = b"#!/bin/sh\necho this is a shell script named photo.png\n"
