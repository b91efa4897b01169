"""TIFF and GIF reach a vision model as the PNG every Ollama of the kit decodes (ffmpeg
converts them, executors/media.py ``model_image``); a file is read by what it holds, not
by its name; a header that declares more pixels than the limit is refused before anything
decodes it. Real images made by ffmpeg (tests/support_media.py), a fake Ollama client."""

from __future__ import annotations

import struct
import subprocess

import ollama
import pytest
from support_media import make_image, make_text_png, need

from airig.executors import media, ollama_common
from airig.executors.base import run_task
from airig.executors.context import DEFAULT_MAX_IMAGE_PIXELS, TaskError
from airig.executors.media import MAX_SIDE, read_image, sniff_image

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class FakeVision:
    """Ollama with a vision model: ``show`` says so, ``generate`` records what it got."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def show(self, model):
        self.calls.append(("show", {"model": model}))
        return ollama.ShowResponse(capabilities=["completion", "vision"], model_info={})

    def generate(self, **kwargs):
        self.calls.append(("generate", kwargs))
        yield ollama.GenerateResponse(model="m", response='{"caption": "a test card"}', done=True)

    def close(self) -> None:
        pass

    def sent_images(self) -> list[bytes]:
        """The bytes of each image of the one generate call, as the client sends them."""
        (kwargs,) = [kwargs for name, kwargs in self.calls if name == "generate"]
        return [image.value for image in kwargs["images"]]


@pytest.fixture
def ctx(make_ctx):
    return make_ctx()


@pytest.fixture
def model(monkeypatch) -> FakeVision:
    client = FakeVision()
    monkeypatch.setattr(ollama_common, "make_client", lambda ctx: client)
    return client


def caption(ctx, path: str):
    payload = {"model": "v", "prompt": "Caption this photo.", "images": [path]}
    return run_task("llm", payload, ctx)


def refused(ctx, path: str) -> TaskError:
    with pytest.raises(TaskError) as caught:
        caption(ctx, path)
    error = caught.value
    assert error.error_type == "bad_input" and not error.retryable
    assert "\n" not in error.message and "Traceback" not in error.message
    return error


def first_pixel(png: bytes) -> bytes:
    """The first pixel of a PNG as RGB, decoded by ffmpeg."""
    out = subprocess.run(
        ["ffmpeg", "-v", "error", "-f", "png_pipe", "-i", "pipe:0", "-frames:v", "1",
         "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"],
        input=png, capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return out[:3]


# ------------------------------------------------------------------ converted and captioned
@pytest.mark.parametrize("name", ["scan.tiff", "IMG_7.TIF", "wave.gif"])
def test_a_tiff_or_gif_is_captioned_and_the_model_gets_a_png(ctx, model, name):
    make_image(ctx.data_dir / name.lower(), "color=c=red")
    (ctx.data_dir / name.lower()).rename(ctx.data_dir / name)
    result = caption(ctx, name)
    assert result.output["text"] == '{"caption": "a test card"}'
    (sent,) = model.sent_images()
    assert sent.startswith(PNG_MAGIC)
    assert sniff_image(sent) == ("png", 320, 240)
    red, green, blue = first_pixel(sent)
    assert red >= 0xF0 and green <= 0x10 and blue <= 0x10  # the picture, not a blank
    assert result.metrics["images_converted"] == 1
    assert result.metrics["image_bytes"] == len(sent)
    assert not list(ctx.data_dir.glob("*.png"))  # nothing written beside the user's file


def test_a_large_tiff_is_fitted_into_the_side_limit_never_enlarged(ctx, model):
    make_image(ctx.data_dir / "wide.tiff", "testsrc", f"{MAX_SIDE * 2}x{MAX_SIDE // 4}")
    make_image(ctx.data_dir / "deep.tiff", "testsrc", "320x240", "-pix_fmt", "rgb48le")
    caption(ctx, "wide.tiff")
    (sent,) = model.sent_images()
    assert sniff_image(sent) == ("png", MAX_SIDE, MAX_SIDE // 8)
    model.calls.clear()
    caption(ctx, "deep.tiff")  # 16 bits a channel: 8 bits a channel for the model
    (sent,) = model.sent_images()
    assert sniff_image(sent) == ("png", 320, 240)
    assert sent[24:26] == b"\x08\x02"  # IHDR: bit depth 8, colour type RGB


def test_png_jpeg_webp_and_bmp_go_as_they_are(ctx, model, monkeypatch):
    make_image(ctx.data_dir / "a.png")
    make_image(ctx.data_dir / "b.bmp")
    monkeypatch.setattr(media, "run_tool", _no_tool)
    for name in ("a.png", "b.bmp"):
        model.calls.clear()
        caption(ctx, name)
        assert model.sent_images() == [(ctx.data_dir / name).read_bytes()]


def test_tesseract_reads_a_tiff_itself(ctx):
    need("tesseract")
    png = make_text_png(ctx.data_dir / "page.png", ["INVOICE 4217", "PAID IN FULL"])
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(png), str(ctx.data_dir / "page.tiff")],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    assert read_image(ctx, "page.tiff").format == "tiff"
    output = run_task("ocr", {"images": ["page.tiff"], "engine": "tesseract"}, ctx).output
    assert "INVOICE 4217" in output["text"] and "PAID IN FULL" in output["text"]


# ------------------------------------------------------------------ read by what it holds
def test_png_bytes_named_tiff_are_read_as_the_png_they_are(ctx, model, monkeypatch):
    make_image(ctx.data_dir / "real.png")
    (ctx.data_dir / "real.png").rename(ctx.data_dir / "liar.tiff")
    monkeypatch.setattr(media, "run_tool", _no_tool)  # no conversion for a PNG
    caption(ctx, "liar.tiff")
    assert model.sent_images() == [(ctx.data_dir / "liar.tiff").read_bytes()]


def test_tiff_bytes_named_png_are_converted_with_the_tiff_reader(ctx, model, monkeypatch):
    make_image(ctx.data_dir / "real.tiff")
    (ctx.data_dir / "real.tiff").rename(ctx.data_dir / "liar.png")
    argvs = _recorded(monkeypatch)
    caption(ctx, "liar.png")
    (argv,) = argvs
    assert argv[argv.index("-f") + 1] == "tiff_pipe"  # the content's demuxer, not the name's
    assert argv[argv.index("-max_pixels") + 1] == str(DEFAULT_MAX_IMAGE_PIXELS)
    assert model.sent_images()[0].startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    "body",
    [b"not an image at all, whatever the name says", b"II*\x00", b"MM\x00*\x00\x00"],
    ids=["text", "tiff-magic-only", "truncated-header"],
)
def test_a_file_named_tiff_that_is_none_is_one_clear_error(ctx, model, body):
    (ctx.data_dir / "x.tiff").write_bytes(body)
    error = refused(ctx, "x.tiff")
    assert error.message.startswith("image 'x.tiff' does not decode")
    assert "TIFF" in error.hint and model.calls == []


def test_a_tiff_whose_pixels_are_garbage_fails_in_ffmpeg_with_one_line(ctx, model):
    # a sound header (64 x 64, 8-bit RGB, one strip) over strips that are not there
    (ctx.data_dir / "junk.tiff").write_bytes(_tiff(64, 64, strip_at=1 << 30) + b"\x00" * 16)
    error = refused(ctx, "junk.tiff")
    assert error.message.startswith("image 'junk.tiff' (TIFF) does not decode: ")
    assert "@ 0x" not in error.message  # ffmpeg's reason, not its component's address
    assert model.calls == []  # the model is not asked before the image is good


# ------------------------------------------------------------------ bombs
@pytest.mark.parametrize(
    ("name", "header"),
    [
        ("bomb.tiff", lambda: _tiff(100_000, 100_000)),
        ("bomb-be.tif", lambda: _tiff(100_000, 100_000, order=">")),
        ("bomb-big.tiff", lambda: _bigtiff(1 << 40, 1 << 40)),
        ("bomb.gif", lambda: b"GIF89a" + struct.pack("<HH", 65535, 65535) + b"\x00" * 3),
    ],
    ids=["tiff", "tiff-big-endian", "bigtiff", "gif"],
)
def test_a_header_declaring_too_many_pixels_is_refused_before_decoding(
    ctx, model, monkeypatch, name, header
):
    (ctx.data_dir / name).write_bytes(header())
    monkeypatch.setattr(media, "run_tool", _no_tool)
    error = refused(ctx, name)
    assert error.message.startswith(f"image {name!r} declares ")
    assert "the limit is 64 megapixels (AIRIG_MAX_IMAGE_PIXELS)" in error.message
    assert model.calls == []


def test_a_tiff_file_over_the_byte_limit_is_refused_before_decoding(ctx, model, monkeypatch):
    make_image(ctx.data_dir / "big.tiff")
    monkeypatch.setattr(media, "DECODE_BYTES_PER_PIXEL", 1000 / ctx.max_image_pixels)
    monkeypatch.setattr(media, "run_tool", _no_tool)
    error = refused(ctx, "big.tiff")
    assert "'big.tiff' is " in error.message and "up to 1000 bytes" in error.message


@pytest.mark.parametrize(
    "body",
    [
        b"II*\x00" + struct.pack("<I", 0xFFFFFFF0),  # directory past the end
        b"II+\x00\x08\x00\x00\x00" + struct.pack("<Q", (1 << 64) - 1),  # BigTIFF: seek overflow
        b"II*\x00\x08\x00\x00\x00" + struct.pack("<H", 65535) + b"\x00" * 24,  # entries cut
        b"II*\x00\x08\x00\x00\x00\x01\x00" + struct.pack("<HHII", 256, 2, 1, 7),  # ASCII width
        b"II*\x00\x08\x00\x00\x00\x01\x00" + struct.pack("<HHII", 256, 16, 1, 7),  # LONG8 in 4
    ],
    ids=["offset-past-end", "seek-overflow", "entries-cut", "ascii-width", "long8-classic"],
)
def test_hostile_tiff_headers_are_bad_input_never_a_crash(ctx, body):
    (ctx.data_dir / "h.tiff").write_bytes(body)
    with pytest.raises(TaskError) as caught:
        read_image(ctx, "h.tiff")
    assert caught.value.error_type == "bad_input"
    assert "does not decode" in caught.value.message
    with pytest.raises(ValueError):  # the same from bytes
        sniff_image(body)


def test_sniff_reads_both_byte_orders_and_bigtiff():
    assert sniff_image(_tiff(640, 480)) == ("tiff", 640, 480)
    assert sniff_image(_tiff(640, 480, order=">")) == ("tiff", 640, 480)
    assert sniff_image(_tiff(70000, 3, short=False)) == ("tiff", 70000, 3)
    assert sniff_image(_bigtiff(5, 7)) == ("tiff", 5, 7)


# ------------------------------------------------------------------ helpers
def _no_tool(ctx, argv, cwd=None):
    raise AssertionError(f"nothing is decoded here, yet {argv[0]} ran")


def _recorded(monkeypatch) -> list[list[str]]:
    argvs: list[list[str]] = []
    real = media.run_tool

    def record(ctx, argv, cwd=None):
        argvs.append(list(argv))
        return real(ctx, argv, cwd)

    monkeypatch.setattr(media, "run_tool", record)
    return argvs


def _tiff(
    width: int, height: int, order: str = "<", short: bool = True, strip_at: int = 0
) -> bytes:
    """A classic TIFF header and first directory (no pixels unless ``strip_at`` points at
    some): width, height, 8-bit RGB, one uncompressed strip."""
    magic = b"II*\x00" if order == "<" else b"MM\x00*"
    size_type, size_format = (3, "H") if short and max(width, height) < 65536 else (4, "I")
    entries = [
        (256, size_type, 1, width, size_format),
        (257, size_type, 1, height, size_format),
        (258, 3, 1, 8, "H"),  # bits per sample (one value: as ffmpeg reads it)
        (259, 3, 1, 1, "H"),  # no compression
        (262, 3, 1, 2, "H"),  # RGB
        (273, 4, 1, strip_at, "I"),  # strip offset
        (277, 3, 1, 3, "H"),  # samples per pixel
        (278, 4, 1, height, "I"),  # rows per strip
        (279, 4, 1, width * height * 3 & 0xFFFFFFFF, "I"),  # strip bytes
    ]
    table = struct.pack(order + "H", len(entries))
    for tag, kind, count, value, fmt in entries:
        field = struct.pack(order + fmt, value).ljust(4, b"\x00")
        table += struct.pack(order + "HHI", tag, kind, count) + field
    return magic + struct.pack(order + "I", 8) + table + struct.pack(order + "I", 0)


def _bigtiff(width: int, height: int) -> bytes:
    """A BigTIFF header and a directory of width and height as LONG8."""
    head = b"II+\x00" + struct.pack("<HHQ", 8, 0, 16)
    table = struct.pack("<Q", 2)
    for tag, value in ((256, width), (257, height)):
        table += struct.pack("<HHQQ", tag, 16, 1, value)
    return head + table + struct.pack("<Q", 0)
