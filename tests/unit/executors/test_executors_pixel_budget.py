"""Decompression bombs (issue 36 §2): an image is held to one pixel budget
(AIRIG_MAX_IMAGE_PIXELS) by its header alone, whatever its format, before a vision model,
tesseract or ffmpeg sees it; a PDF page is held to it at the asked dpi before pdftoppm
runs. Real images made by ffmpeg (tests/support_media.py) whose headers are then made to
declare more, handcrafted headers where no tool writes one, real PDFs with large pages."""

from __future__ import annotations

import re
import struct
import threading
import zlib
from pathlib import Path

import ollama
import pytest
from support_media import make_image, make_pdf, make_text_png, need

from airig.common.protocol import Assignment
from airig.executors import media, ocr, ocr_onnx, ollama_common, pages
from airig.executors.base import run_task
from airig.executors.context import DEFAULT_MAX_IMAGE_PIXELS, TaskError
from airig.executors.media import read_image, sniff_image
from airig.worker.runner import Worker
from airig.worker.settings import WorkerSettings

BOMB_SIDE = 60_000  # the issue's PNG: 60000 x 60000 in 540 KB


class FakeVision:
    """Ollama with a vision model; records every call (none may come for a bomb)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def show(self, model):
        self.calls.append("show")
        return ollama.ShowResponse(capabilities=["completion", "vision"], model_info={})

    def generate(self, **kwargs):
        self.calls.append("generate")
        yield ollama.GenerateResponse(model="m", response="words", done=True)

    def close(self) -> None:
        pass


@pytest.fixture
def ctx(make_ctx):
    return make_ctx(gpu_index=0)  # a GPU worker: ocr's auto would take the model


@pytest.fixture
def model(monkeypatch) -> FakeVision:
    client = FakeVision()
    monkeypatch.setattr(ollama_common, "make_client", lambda ctx: client)
    return client


@pytest.fixture
def tools(monkeypatch) -> list[list[str]]:
    """Every tool an executor runs, recorded; a decoder of images or pages never runs
    (should one, on a bomb, the test fails before it allocates anything)."""
    ran: list[list[str]] = []
    real = media.run_tool

    def record(ctx, argv, cwd=None):
        ran.append(list(argv))
        if argv[0] in ("tesseract", "pdftoppm") or (argv[0] == "ffmpeg" and "-max_pixels" in argv):
            raise AssertionError(f"{argv[0]} ran on a file over the pixel budget")
        return real(ctx, argv, cwd)

    for module in (media, ocr, pages):
        monkeypatch.setattr(module, "run_tool", record)

    def decode(ctx, image):
        raise AssertionError(f"the onnx engine decoded {image.path}, over the pixel budget")

    monkeypatch.setattr(ocr_onnx, "_decode", decode)
    return ran


def refused(task_type: str, payload: dict, ctx) -> TaskError:
    with pytest.raises(TaskError) as caught:
        run_task(task_type, payload, ctx)
    error = caught.value
    assert error.error_type == "bad_input" and not error.retryable, error.to_dict()
    assert "\n" not in error.message and "Traceback" not in error.message
    return error


# ------------------------------------------------------------------ images that lie
def png_bomb(width: int, height: int) -> bytes:
    """A PNG whose IHDR declares ``width`` x ``height`` (8-bit grey) over the first rows of
    zeros, compressed: what a decoder allocates is the header's size, not the file's."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    rows = zlib.compress(b"\x00" * (width + 1) * 8, 9)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def made(tmp: Path, name: str, *args: str) -> bytes:
    """A real 320 x 240 picture ffmpeg writes in the format ``name``'s suffix names."""
    return make_image(tmp / name, "testsrc", "320x240", *args).read_bytes()


def jpeg_frame_at(data: bytes) -> int:
    """Where a JPEG's frame header (SOF0) is, walking its segments."""
    offset = 2
    while data[offset + 1] != 0xC0:
        offset += 2 + struct.unpack(">H", data[offset + 2 : offset + 4])[0]
    return offset


def jpeg_declaring(data: bytes, width: int, height: int, marker: int = 0xC0) -> bytes:
    at = jpeg_frame_at(data)
    body = bytearray(data)
    body[at + 1] = marker
    body[at + 5 : at + 9] = struct.pack(">HH", height, width)
    return bytes(body)


def jpeg_with_segments_first(data: bytes, width: int, height: int) -> bytes:
    """A large APP1 (EXIF's marker, 60 KB) and fill bytes before the frame header: the
    header is reached segment by segment, past the first 64 KB."""
    app1 = b"\xff\xe1" + struct.pack(">H", 60_002) + b"E" * 60_000
    body = jpeg_declaring(data, width, height)
    return body[:2] + app1 + app1 + b"\xff\xff" + body[2:]


def patched(data: bytes, at: int, value: bytes) -> bytes:
    return data[:at] + value + data[at + len(value) :]


def webp_chunk_at(data: bytes, fourcc: bytes) -> int:
    offset = 12
    while data[offset : offset + 4] != fourcc:
        length = struct.unpack("<I", data[offset + 4 : offset + 8])[0]
        offset += 8 + length + (length & 1)
    return offset


def webp_vp8x_canvas(data: bytes, width: int, height: int) -> bytes:
    at = webp_chunk_at(data, b"VP8X") + 8 + 4
    size = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return patched(data, at, size)


def webp_frame(data: bytes, width: int, height: int) -> bytes:
    """An animation whose canvas is small and whose first frame (ANMF) declares more."""
    at = webp_chunk_at(data, b"ANMF") + 8 + 6
    size = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return patched(data, at, size)


def tiff_pages(*sizes: tuple[int, int]) -> bytes:
    """A classic little-endian TIFF of one directory per size, chained page to page."""
    out = b"II*\x00" + struct.pack("<I", 8)
    for index, (width, height) in enumerate(sizes):
        entries = [(256, 4, width), (257, 4, height), (258, 3, 8), (262, 3, 1), (277, 3, 1)]
        table = struct.pack("<H", len(entries))
        for tag, kind, value in entries:
            field = struct.pack("<H" if kind == 3 else "<I", value).ljust(4, b"\x00")
            table += struct.pack("<HHI", tag, kind, 1) + field
        following = len(out) + len(table) + 4 if index + 1 < len(sizes) else 0
        out += table + struct.pack("<I", following)
    return out


def bombs(tmp: Path) -> dict[str, tuple[bytes, int, int]]:
    """name -> (the file, the width and height it declares), one per format and variant."""
    need("ffmpeg")
    jpeg = made(tmp, "a.jpg")
    webp = made(tmp, "a.webp")
    lossless = made(tmp, "b.webp", "-lossless", "1")
    # two frames: libwebp_anim writes one frame as a simple file
    animated = made(tmp, "d.webp", "-frames:v", "2", "-c:v", "libwebp_anim", "-loop", "0")
    bmp = made(tmp, "a.bmp")
    gif = made(tmp, "a.gif")
    vp8 = webp_chunk_at(webp, b"VP8 ") + 8 + 6
    vp8l = webp_chunk_at(lossless, b"VP8L") + 8 + 1
    vp8l_bits = (16000 - 1) | ((16000 - 1) << 14)
    return {
        "bomb.png": (png_bomb(BOMB_SIDE, BOMB_SIDE), BOMB_SIDE, BOMB_SIDE),
        "baseline.jpg": (jpeg_declaring(jpeg, 65000, 65000), 65000, 65000),
        "progressive.jpg": (jpeg_declaring(jpeg, 65000, 65000, marker=0xC2), 65000, 65000),
        "arithmetic.jpg": (jpeg_declaring(jpeg, 40000, 30000, marker=0xC9), 40000, 30000),
        "exif-first.jpg": (jpeg_with_segments_first(jpeg, 65000, 65000), 65000, 65000),
        "lossy.webp": (patched(webp, vp8, struct.pack("<HH", 16000, 16000)), 16000, 16000),
        "lossless.webp": (patched(lossless, vp8l, struct.pack("<I", vp8l_bits)), 16000, 16000),
        "extended.webp": (webp_vp8x_canvas(animated, 100_000, 100_000), 100_000, 100_000),
        "animated.webp": (webp_frame(animated, 30000, 30000), 30000, 30000),
        "info.bmp": (patched(bmp, 18, struct.pack("<ii", 30000, 30000)), 30000, 30000),
        "top-down.bmp": (patched(bmp, 18, struct.pack("<ii", 30000, -30000)), 30000, 30000),
        "screen.gif": (patched(gif, 6, struct.pack("<HH", 65535, 65535)), 65535, 65535),
        "second-page.tiff": (tiff_pages((64, 64), (100_000, 100_000)), 100_000, 100_000),
    }


BOMB_NAMES = [
    "bomb.png", "baseline.jpg", "progressive.jpg", "arithmetic.jpg", "exif-first.jpg",
    "lossy.webp", "lossless.webp", "extended.webp", "animated.webp", "info.bmp",
    "top-down.bmp", "screen.gif", "second-page.tiff",
]  # fmt: skip
CONSUMERS = {
    "llm": lambda name: ("llm", {"model": "v", "prompt": "Caption it.", "images": [name]}),
    "ocr-tesseract": lambda name: ("ocr", {"image": name, "engine": "tesseract"}),
    "ocr-vision": lambda name: ("ocr", {"images": [name], "engine": "vision", "model": "v"}),
    "ocr-auto": lambda name: ("ocr", {"image": name, "model": "v"}),
    "ocr-onnx": lambda name: ("ocr", {"image": name, "engine": "onnx"}),
}


@pytest.fixture(scope="module")
def bomb_files(tmp_path_factory) -> dict[str, tuple[bytes, int, int]]:
    return bombs(tmp_path_factory.mktemp("bombs"))


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize("name", BOMB_NAMES)
def test_an_image_declaring_more_than_the_budget_reaches_no_tool_and_no_model(
    ctx, model, tools, bomb_files, name, consumer
):
    body, width, height = bomb_files[name]
    assert len(body) <= ctx.max_image_bytes  # under the byte limit: only pixels refuse it
    (ctx.data_dir / name).write_bytes(body)
    task_type, payload = CONSUMERS[consumer](name)
    error = refused(task_type, payload, ctx)
    assert error.message.startswith(f"image {name!r} declares {width} x {height} pixels (")
    assert "the limit is 64 megapixels (AIRIG_MAX_IMAGE_PIXELS)" in error.message
    assert "AIRIG_MAX_IMAGE_PIXELS" in error.hint
    assert error.details == {"pixels": width * height, "limit": DEFAULT_MAX_IMAGE_PIXELS}
    assert model.calls == [] and tools == []


@pytest.mark.parametrize(
    ("name", "args", "fmt"),
    [
        ("a.png", (), "png"),
        ("a.jpg", (), "jpeg"),
        ("lossy.webp", (), "webp"),
        ("lossless.webp", ("-lossless", "1"), "webp"),
        ("anim.webp", ("-frames:v", "2", "-c:v", "libwebp_anim"), "webp"),
        ("a.bmp", (), "bmp"),
        ("a.gif", (), "gif"),
        ("a.tiff", (), "tiff"),
    ],
)
def test_real_images_of_every_format_are_read_at_their_size(ctx, name, args, fmt):
    make_image(ctx.data_dir / name, "testsrc", "320x240", *args)
    image = read_image(ctx, name)
    assert (image.format, image.width, image.height) == (fmt, 320, 240)
    assert sniff_image((ctx.data_dir / name).read_bytes()) == (fmt, 320, 240)


def test_the_budget_is_a_setting_and_its_edge_is_inside(make_ctx):
    ctx = make_ctx(max_image_pixels=320 * 240)
    make_image(ctx.data_dir / "edge.png", "testsrc", "320x240")
    assert read_image(ctx, "edge.png").width == 320  # exactly the budget: read
    smaller = make_ctx(max_image_pixels=320 * 240 - 1)
    error = refused("ocr", {"image": "edge.png", "engine": "tesseract"}, smaller)
    assert "declares 320 x 240 pixels (0.077 megapixels)" in error.message
    assert "the limit is 0.077 megapixels" in error.message


def test_the_worker_gives_executors_its_AIRIG_MAX_IMAGE_PIXELS(tmp_path, monkeypatch):
    need("tesseract")
    data = tmp_path / "data"
    data.mkdir()
    make_text_png(data / "scan.png", ["WORDS"])
    monkeypatch.setenv("AIRIG_MAX_IMAGE_PIXELS", "1000")
    settings = WorkerSettings(WORKER_CLASSES="cpu", DATA_DIR=str(data),
                              WORKER_WORK_DIR=str(tmp_path / "work"))  # fmt: skip
    assert settings.max_image_pixels == 1000
    task = Assignment(
        task_id=1, plan_id="p", key="t", name="t", type="ocr", task_class="cpu",
        payload={"image": "scan.png", "engine": "tesseract"}, timeout_s=30, attempt=1,
        lease_id="l", lease_expires_at=0.0,
    )  # fmt: skip
    outcome, released = Worker(settings, link=object()).run_attempt(
        task, threading.Event(), tmp_path
    )
    assert isinstance(outcome, TaskError) and not released
    assert "the limit is 0.001 megapixels (AIRIG_MAX_IMAGE_PIXELS)" in outcome.message
    monkeypatch.delenv("AIRIG_MAX_IMAGE_PIXELS")
    assert WorkerSettings().max_image_pixels == DEFAULT_MAX_IMAGE_PIXELS


@pytest.mark.parametrize(
    "body",
    [
        tiff_pages((64, 64), (64, 64))[:-4] + struct.pack("<I", 8),  # page 2 is page 1 again
        b"\xff\xd8" + b"\xff\xe0\x00\x02" * 5000,  # segments and no frame header
        b"\xff\xd8\xff\xe0\x00\x00",  # a segment length below its own two bytes
        b"RIFF\x00\x00\x00\x00WEBPVP8X\x02\x00\x00\x00",  # a VP8X chunk cut short
        b"BM" + b"\x00" * 10,  # a BMP header cut short
    ],
    ids=["tiff-page-loop", "jpeg-no-frame", "jpeg-length-below-2", "webp-cut", "bmp-cut"],
)
def test_hostile_headers_are_does_not_decode_never_a_hang(ctx, tools, body):
    (ctx.data_dir / "h.img").write_bytes(body)
    error = refused("ocr", {"image": "h.img", "engine": "tesseract"}, ctx)
    assert error.message.startswith("image 'h.img' does not decode: ")
    assert tools == []


# ------------------------------------------------------------------ PDF pages
def pdftoppm_runs(tools: list[list[str]]) -> list[list[str]]:
    return [argv for argv in tools if argv[0] == "pdftoppm"]


def test_a_page_over_the_budget_at_the_asked_dpi_is_refused_with_the_dpi_that_fits(
    make_ctx, monkeypatch
):
    ctx = make_ctx(max_image_pixels=1_000_000)
    make_pdf(ctx.data_dir / "doc.pdf", [["Page one"], ["Page two"]])
    ran: list[list[str]] = []
    real = pages.run_tool
    monkeypatch.setattr(
        pages, "run_tool", lambda c, argv, cwd=None: ran.append(argv) or real(c, argv, cwd)
    )
    error = refused("pages", {"pdf": "doc.pdf", "dpi": 300}, ctx)
    assert error.message == (
        "PDF 'doc.pdf' page 1 is 595 x 420 pt: 2480 x 1750 pixels at 300 dpi "
        "(4.3 megapixels); the limit is 1 megapixels (AIRIG_MAX_IMAGE_PIXELS)"
    )
    assert pdftoppm_runs(ran) == []
    [fits] = re.findall(r"give dpi: (\d+) or less", error.hint)
    # the dpi the hint names renders within the budget with the real pdftoppm, one more not
    refused("pages", {"pdf": "doc.pdf", "dpi": int(fits) + 1}, ctx)
    output = run_task("pages", {"pdf": "doc.pdf", "dpi": int(fits)}, ctx).output
    assert output["count"] == 2
    for page in output["pages"]:
        _, width, height = sniff_image((ctx.data_dir / page["path"]).read_bytes())
        assert width * height <= 1_000_000


def test_the_issues_1_kb_pdf_at_600_dpi_never_reaches_pdftoppm(ctx, tools):
    big = "/MediaBox [0 0 14400 14400]"
    make_pdf(ctx.data_dir / "bomb.pdf", [["a"], ["b"], ["c"]], boxes={2: big})
    assert (ctx.data_dir / "bomb.pdf").stat().st_size < 2048
    error = refused("pages", {"pdf": "bomb.pdf", "dpi": 600}, ctx)
    assert error.message.startswith(
        "PDF 'bomb.pdf' page 2 is 14400 x 14400 pt: 120000 x 120000 pixels at 600 dpi "
        "(14,400 megapixels)"
    )
    assert error.hint.startswith("give dpi: 40 or less")  # 72 * sqrt(64e6 / 14400²) = 40
    assert pdftoppm_runs(tools) == []
    assert not (ctx.data_dir / "pages").exists()  # refused before its folder was made


def test_only_the_pages_asked_for_are_held_to_the_budget(ctx):
    big = "/MediaBox [0 0 14400 14400]"
    make_pdf(ctx.data_dir / "bomb.pdf", [["a"], ["b"]], boxes={2: big})
    one = run_task("pages", {"pdf": "bomb.pdf", "dpi": 100, "max_pages": 1}, ctx)
    assert one.output["count"] == 1 and one.output["total_pages"] == 2


def test_pdftoppm_renders_the_media_box_so_a_small_crop_box_does_not_hide_it(ctx, tools):
    box = "/MediaBox [0 0 900000 900000] /CropBox [0 0 100 100]"
    make_pdf(ctx.data_dir / "crop.pdf", [["a"]], boxes={1: box})
    error = refused("pages", {"pdf": "crop.pdf", "dpi": 30}, ctx)
    assert error.message.startswith("PDF 'crop.pdf' page 1 is 900000 x 900000 pt: ")
    assert "too large even at dpi 30" in error.hint
    assert pdftoppm_runs(tools) == []


@pytest.mark.parametrize(
    "box",
    ["/MediaBox [0 0 0 420]", "/MediaBox [0 0 " + "9" * 320 + " 420]"],  # pdfinfo: 0, inf
    ids=["zero-width", "infinite"],
)
def test_a_page_without_a_usable_size_is_refused(ctx, tools, box):
    make_pdf(ctx.data_dir / "odd.pdf", [["a"]], boxes={1: box})
    error = refused("pages", {"pdf": "odd.pdf", "dpi": 100}, ctx)
    assert error.message == "PDF 'odd.pdf' page 1 has no usable size (MediaBox)"
    assert pdftoppm_runs(tools) == []


def test_a_media_box_from_its_far_corner_is_measured_whole(ctx, tools):
    make_pdf(ctx.data_dir / "flip.pdf", [["a"]], boxes={1: "/MediaBox [-5000 0 5000 -300]"})
    error = refused("pages", {"pdf": "flip.pdf", "dpi": 600}, ctx)
    assert error.message.startswith("PDF 'flip.pdf' page 1 is 10000 x 300 pt: 83334 x 2500 ")
