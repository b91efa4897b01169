"""An image's format and size from its header alone, over ``read(offset, count)``.

Nothing here decodes pixels: the size an image declares is what decides, before any tool
or model sees it, whether it fits the pixel budget (``media.read_image``). A few hundred
bytes that declare 60000 x 60000 are a decompression bomb for whatever decodes them
(tesseract, ffmpeg, Ollama), so each reader below takes the largest size the file
declares where a decoder could use more than one (a TIFF's pages, a WebP's frames). Every
offset a header gives is untrusted: reads past the end return less, loops are bounded.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

# ``read(offset, count)``: at most ``count`` bytes at ``offset``, fewer past the end.
Reader = Callable[[int, int], bytes]

IMAGE_TYPES = "a PNG, JPEG, WebP, BMP, GIF or TIFF file"

# TIFF (Adobe's TIFF 6.0, section 2; BigTIFF: 8-byte offsets): the byte order, 42 (43 for
# BigTIFF), the first directory's offset; each entry a tag, a type, a count and a value;
# after the entries the next directory's offset (the next page), 0 at the last.
TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
TIFF_WIDTH, TIFF_HEIGHT = 256, 257
TIFF_INTS = {3: "H", 4: "I", 16: "Q"}  # SHORT, LONG, LONG8 (BigTIFF)
MAX_TIFF_ENTRIES = 4096  # the size tags come first (entries are sorted by tag)
# tesseract reads every page of a TIFF: each page's size is checked, up to this many pages
# (a chain longer than that, or one that loops, is refused)
MAX_TIFF_PAGES = 1024
# JPEG segments before the frame header (APPn, DQT, DHT, comments ...): real files have a
# few dozen at most (an ICC profile split over 64 KB chunks); past this it is no JPEG
MAX_JPEG_SEGMENTS = 4096
# JPEG frame headers (ITU T.81 B.1.1.3: SOF0-SOF15 but DHT C4, JPG C8 and DAC CC; DHP DE
# has the same layout; SOF55 F7 is JPEG-LS): each holds the image's height and width
JPEG_FRAMES = {*range(0xC0, 0xD0), 0xDE, 0xF7} - {0xC4, 0xC8, 0xCC}
# WebP chunks in an extended file (VP8X) looked at for their size: the canvas, each
# frame of an animation (ANMF), the bitstream itself (VP8, VP8L)
MAX_WEBP_CHUNKS = 1024


def converted_format(head: bytes) -> str | None:
    """ "tiff" or "gif" by the first bytes: the formats ffmpeg turns into a PNG for a model."""
    if head[:4] in TIFF_MAGIC:
        return "tiff"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    return None


def image_size(read: Reader) -> tuple[str, int, int]:
    """Format, width and height the header declares (the largest of a TIFF's pages and a
    WebP's frames); ValueError when it is no image of these formats or says no size."""
    head = read(0, 32)
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(head) < 24 or head[12:16] != b"IHDR":
            raise ValueError("truncated PNG header")
        width, height = struct.unpack(">II", head[16:24])
        return _sized("png", width, height)
    if head.startswith(b"\xff\xd8"):
        return _sized("jpeg", *_jpeg_size(read))
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _sized("webp", *_webp_size(read))
    if head[:6] in (b"GIF87a", b"GIF89a"):
        # the logical screen: every frame is drawn inside it
        if len(head) < 10:
            raise ValueError("truncated GIF header")
        width, height = struct.unpack("<HH", head[6:10])
        return _sized("gif", width, height)
    if head[:2] == b"BM":
        return _sized("bmp", *_bmp_size(head))
    if head[:4] in TIFF_MAGIC:
        return _sized("tiff", *_tiff_size(read))
    raise ValueError(f"not {IMAGE_TYPES[2:]}")


def bytes_reader(data: bytes) -> Reader:
    return lambda offset, count: data[offset : offset + count]


def _sized(fmt: str, width: int, height: int) -> tuple[str, int, int]:
    if width <= 0 or height <= 0:
        raise ValueError(f"{fmt} header gives no size")
    return fmt, width, height


def _largest(sizes: list[tuple[int, int]]) -> tuple[int, int]:
    return max(sizes, key=lambda size: size[0] * size[1])


# ------------------------------------------------------------------ BMP
def _bmp_size(head: bytes) -> tuple[int, int]:
    """BITMAPCOREHEADER (12 bytes: 16-bit sizes) or a later one (signed 32-bit; a negative
    height is a top-down bitmap)."""
    if len(head) < 26:
        raise ValueError("truncated BMP header")
    (header_size,) = struct.unpack("<I", head[14:18])
    if header_size == 12:
        return struct.unpack("<HH", head[18:22])
    width, height = struct.unpack("<ii", head[18:26])
    return width, abs(height)


# ------------------------------------------------------------------ JPEG
def _jpeg_size(read: Reader) -> tuple[int, int]:
    """The frame header's size, reached segment by segment (only each marker and length
    is read): baseline, extended, progressive, lossless and arithmetic alike."""
    offset = 2
    for _ in range(MAX_JPEG_SEGMENTS):
        marker = read(offset, 2)
        if len(marker) < 2:
            break
        if marker[0] != 0xFF:
            raise ValueError("corrupt JPEG marker")
        kind = marker[1]
        if kind == 0xFF:  # a fill byte before a marker
            offset += 1
            continue
        if kind in (0xD8, 0x01) or 0xD0 <= kind <= 0xD7:  # markers without a length
            offset += 2
            continue
        if kind in (0xD9, 0xDA):  # the image ends or its scan starts: no frame header
            break
        if kind in JPEG_FRAMES:
            frame = read(offset + 5, 4)
            if len(frame) < 4:
                break
            height, width = struct.unpack(">HH", frame)
            return width, height
        length = read(offset + 2, 2)
        if len(length) < 2 or struct.unpack(">H", length)[0] < 2:
            break
        offset += 2 + struct.unpack(">H", length)[0]
    raise ValueError("JPEG without a frame header")


# ------------------------------------------------------------------ WebP
def _webp_size(read: Reader) -> tuple[int, int]:
    """A simple file's one bitstream, or an extended file's canvas and every frame and
    bitstream in it (a decoder that trusts a frame's own size must not get more)."""
    sizes: list[tuple[int, int]] = []
    offset = 12
    for _ in range(MAX_WEBP_CHUNKS):
        header = read(offset, 8)
        if len(header) < 8:
            break
        fourcc, length = header[:4], struct.unpack("<I", header[4:8])[0]
        size = _webp_chunk_size(fourcc, read(offset + 8, 16))
        if size is not None:
            sizes.append(size)
        if offset == 12 and fourcc != b"VP8X":
            break  # a simple file: its first chunk is its bitstream, and all of it
        if fourcc == b"ANMF":  # frames hold their bitstream inside: look there too
            inner = read(offset + 8 + 16, 8)
            if len(inner) == 8:
                found = _webp_chunk_size(inner[:4], read(offset + 8 + 16 + 8, 16))
                if found is not None:
                    sizes.append(found)
        offset += 8 + length + (length & 1)
    if not sizes:
        raise ValueError("truncated WebP header")
    return _largest(sizes)


def _webp_chunk_size(fourcc: bytes, body: bytes) -> tuple[int, int] | None:
    """The size a chunk's first bytes give (Google's WebP container specification)."""
    if fourcc == b"VP8X" and len(body) >= 10:  # flags, reserved, canvas - 1 (24 bits each)
        return int.from_bytes(body[4:7], "little") + 1, int.from_bytes(body[7:10], "little") + 1
    if fourcc == b"ANMF" and len(body) >= 12:  # x, y, then the frame's size - 1
        return int.from_bytes(body[6:9], "little") + 1, int.from_bytes(body[9:12], "little") + 1
    if fourcc == b"VP8 " and len(body) >= 10:  # frame tag, start code, 14-bit sizes
        width, height = struct.unpack("<HH", body[6:10])
        return width & 0x3FFF, height & 0x3FFF
    if fourcc == b"VP8L" and len(body) >= 5:  # signature, then 14-bit sizes - 1
        bits = int.from_bytes(body[1:5], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


# ------------------------------------------------------------------ TIFF
def _tiff_size(read: Reader) -> tuple[int, int]:
    """The largest page's width and height: every directory of the chain, wherever in the
    file (tesseract reads each page; ffmpeg the first)."""
    head = read(0, 16)
    order = "<" if head[:2] == b"II" else ">"
    big = head[2:4] in (b"+\x00", b"\x00+")
    if len(head) < (16 if big else 8):
        raise ValueError("truncated TIFF header")
    if big:
        (offset,) = struct.unpack(order + "Q", head[8:16])
    else:
        (offset,) = struct.unpack(order + "I", head[4:8])
    sizes: list[tuple[int, int]] = []
    seen: set[int] = set()
    while offset:
        if offset in seen or len(seen) >= MAX_TIFF_PAGES:
            raise ValueError(f"TIFF pages loop or pass {MAX_TIFF_PAGES}")
        seen.add(offset)
        width, height, offset = _tiff_directory(read, offset, order, big)
        if not sizes and (width <= 0 or height <= 0):
            return width, height  # a first page without a size: "gives no size"
        sizes.append((width, height))
    if not sizes:
        raise ValueError("TIFF without a directory")
    return _largest(sizes)


def _tiff_directory(read: Reader, offset: int, order: str, big: bool) -> tuple[int, int, int]:
    """One directory's width, height and the next directory's offset (0: the last)."""
    count_format, entry_size, value_at, next_format = (
        ("Q", 20, 12, "Q") if big else ("H", 12, 8, "I")
    )
    count_size = struct.calcsize(count_format)
    raw = read(offset, count_size)
    if len(raw) < count_size:
        raise ValueError("TIFF directory outside the file")
    (count,) = struct.unpack(order + count_format, raw)
    if count > MAX_TIFF_ENTRIES:  # real directories hold a few dozen
        raise ValueError(f"TIFF directory of {count} entries")
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
    following = read(offset + count_size + count * entry_size, struct.calcsize(next_format))
    next_offset = 0
    if len(following) == struct.calcsize(next_format):
        (next_offset,) = struct.unpack(order + next_format, following)
    return found.get(TIFF_WIDTH, 0), found.get(TIFF_HEIGHT, 0), next_offset
