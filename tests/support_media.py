"""Small media made at test time with the real tools: a video with scene changes and a
tone (ffmpeg), a PDF with a text layer (written here: Helvetica text, no dependency), a
PNG of printed text (that PDF's page rendered by pdftoppm), and one picture in any format
ffmpeg writes (TIFF, GIF ...).

The tools are Debian's ffmpeg, poppler-utils and tesseract-ocr; CI installs them
(.ci/run). A missing one fails the test with how to install it: never a skip.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGES = {
    "ffmpeg": "ffmpeg",
    "ffprobe": "ffmpeg",
    "pdftoppm": "poppler-utils",
    "pdftotext": "poppler-utils",
    "pdfinfo": "poppler-utils",
    "tesseract": "tesseract-ocr",
}

# Each scene of the test video: an ffmpeg lavfi source, 2 s each at 10 fps.
SCENES = ("testsrc", "smptebars", "color=c=red")
SCENE_S = 2.0


def need(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        packages = " ".join(sorted({PACKAGES.get(tool, tool) for tool in missing}))
        pytest.fail(
            f"{', '.join(missing)} missing: sudo apt-get install -y {packages} (.ci/run does)",
            pytrace=False,
        )


def run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=120)


def make_video(path: Path, size: str = "320x240") -> Path:
    """Three 2-second scenes (test pattern, colour bars, red) and a 440 Hz tone: 6 s of
    H.264 + AAC in mp4, scene changes at 2 s and 4 s."""
    need("ffmpeg")
    argv = ["ffmpeg", "-v", "error", "-nostdin", "-y"]
    for source in SCENES:
        joiner = ":" if "=" in source else "="
        spec = f"{source}{joiner}size={size}:rate=10:duration={SCENE_S:g}"
        argv += ["-f", "lavfi", "-i", spec]
    argv += ["-f", "lavfi", "-i", f"sine=frequency=440:duration={SCENE_S * len(SCENES):g}"]
    inputs = "".join(f"[{i}:v]" for i in range(len(SCENES)))
    argv += [
        "-filter_complex", f"{inputs}concat=n={len(SCENES)}:v=1:a=0[v]",
        "-map", "[v]", "-map", f"{len(SCENES)}:a",
        "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(path),
    ]  # fmt: skip
    run(argv)
    return path


def make_pdf(
    path: Path,
    pages: list[list[str]],
    font_size: int = 28,
    boxes: dict[int, str] | None = None,
) -> Path:
    """A valid PDF, one page per entry (A5 landscape), each line in Helvetica: a text
    layer pdftotext reads and large print tesseract reads once rendered. ``boxes``: page
    number (from 1) -> what stands in that page's dictionary instead of its A5 MediaBox
    (``"/MediaBox [0 0 14400 14400]"``, a CropBox beside it ...)."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled below, once the page tree's number is known
    tree = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    kids = []
    for number, lines in enumerate(pages, start=1):
        text = [
            b"BT",
            f"/F1 {font_size} Tf".encode(),
            b"40 330 Td",
            f"{font_size + 10} TL".encode(),
        ]
        for line in lines:
            escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            text += [f"({escaped}) Tj".encode(), b"T*"]
        text.append(b"ET")
        stream = b"\n".join(text)
        content = add(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        box = (boxes or {}).get(number, "/MediaBox [0 0 595 420]").encode()
        page = add(
            b"<< /Type /Page /Parent %d 0 R %s "
            b"/Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>"
            % (tree, box, font, content)
        )
        kids.append(page)
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    refs = b" ".join(b"%d 0 R" % kid for kid in kids)
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (refs, len(kids))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        catalog,
        xref,
    )
    path.write_bytes(bytes(out))
    return path


def make_text_png(path: Path, lines: list[str]) -> Path:
    """A PNG of printed text: a one-page PDF rendered at 150 dpi by pdftoppm."""
    need("pdftoppm")
    pdf = make_pdf(path.with_suffix(".pdf"), [lines])
    run(["pdftoppm", "-png", "-r", "150", "-singlefile", str(pdf), str(path.with_suffix(""))])
    return path.with_suffix(".png")


def make_image(path: Path, source: str = "testsrc", size: str = "320x240", *args: str) -> Path:
    """One frame of an ffmpeg lavfi ``source`` (testsrc, color=c=red ...) written in the
    format ``path``'s suffix names (ffmpeg's image2 muxer: .tiff, .gif, .png ...)."""
    need("ffmpeg")
    joiner = ":" if "=" in source else "="
    spec = f"{source}{joiner}size={size}:rate=1"
    run(["ffmpeg", "-v", "error", "-nostdin", "-y", "-f", "lavfi", "-i", spec,
         "-frames:v", "1", *args, str(path)])  # fmt: skip
    return path
