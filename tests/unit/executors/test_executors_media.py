"""frames, pages, ocr (tesseract) and note with the real tools on media made at test time
(tests/support_media.py), and llm's image handling against a fake Ollama client."""

from __future__ import annotations

import csv
import io
import json
import subprocess

import ollama
import pytest
from support_media import SCENE_S, make_pdf, make_text_png, make_video, need

from airig.common.task_types import PAYLOAD_SCHEMAS
from airig.executors import ollama_common
from airig.executors.base import EXECUTORS, run_task, validate_payload
from airig.executors.context import TaskError
from airig.executors.frames import parse_times
from airig.executors.media import loads_lenient, sniff_image

NEW_TYPES = ("frames", "pages", "ocr", "note")


@pytest.fixture
def ctx(make_ctx):
    return make_ctx()


@pytest.fixture(scope="module")
def video_bytes(tmp_path_factory) -> bytes:
    return make_video(tmp_path_factory.mktemp("media") / "clip.mp4").read_bytes()


@pytest.fixture
def video(ctx, video_bytes) -> str:
    (ctx.data_dir / "in").mkdir(exist_ok=True)
    (ctx.data_dir / "in" / "clip.mp4").write_bytes(video_bytes)
    return "in/clip.mp4"


@pytest.fixture
def pdf(ctx) -> str:
    make_pdf(
        ctx.data_dir / "doc.pdf", [["Hello Airig", "First page"], ["Second page", "Brown fox"]]
    )
    return "doc.pdf"


def fails(task_type: str, payload: dict, ctx) -> TaskError:
    with pytest.raises(TaskError) as caught:
        run_task(task_type, payload, ctx)
    error = caught.value
    assert not error.retryable, error.to_dict()
    return error


def image_size(path) -> tuple[int, int]:
    _, width, height = sniff_image(path.read_bytes())
    return width, height


def test_every_new_type_is_registered_with_a_class():
    from airig.common.task_types import DEFAULT_CLASS_FOR_TYPE

    for name in NEW_TYPES:
        assert name in PAYLOAD_SCHEMAS and name in EXECUTORS
    assert [DEFAULT_CLASS_FOR_TYPE[name] for name in NEW_TYPES] == ["cpu", "cpu", "llm", "cpu"]


# ------------------------------------------------------------------ frames
def test_scene_changes_give_the_first_frame_and_each_cut_at_its_real_time(ctx, video):
    output = run_task("frames", {"video": video, "width": 160}, ctx).output
    assert output["mode"] == "scene" and output["duration_s"] == pytest.approx(6.0, abs=0.1)
    assert [frame["t"] for frame in output["frames"]] == pytest.approx([0, SCENE_S, 2 * SCENE_S])
    assert output["count"] == 3 and output["video"] == video
    for frame in output["frames"]:
        assert frame["path"].startswith("outputs/frames/clip/")
        assert image_size(ctx.data_dir / frame["path"]) == (160, 120)


def test_every_n_seconds_and_the_max_frames_cap(ctx, video):
    payload = {"video": video, "every_s": 1.5, "max_frames": 3, "out_dir": "outputs/every"}
    output = run_task("frames", payload, ctx).output
    assert [frame["t"] for frame in output["frames"]] == pytest.approx([0, 1.5, 3.0])
    assert sorted(p.name for p in (ctx.data_dir / "outputs/every").iterdir()) == [
        "frame_0001.png",
        "frame_0002.png",
        "frame_0003.png",
    ]
    # A second run into the same folder lists (and leaves) only its own frames.
    again = run_task("frames", {**payload, "max_frames": 2}, ctx).output
    assert again["count"] == 2 and len(list((ctx.data_dir / "outputs/every").iterdir())) == 2


def test_at_takes_a_templates_json_text_of_topics(ctx, video):
    topics = '{"topics": [{"title": "a", "start": 1}, {"title": "b", "start": "00:00:03.5"}]}'
    topics = f"```json\n{topics}\n```"
    output = run_task("frames", {"video": video, "at": topics}, ctx).output
    assert [frame["t"] for frame in output["frames"]] == pytest.approx([1.0, 3.5])
    past = run_task("frames", {"video": video, "at": [0.5, 60]}, ctx).output
    assert past["count"] == 1 and past["skipped_t"] == [60.0]


def test_parse_times_reads_numbers_objects_and_clock_times():
    assert parse_times("[0, 2.5]") == [0.0, 2.5]
    assert parse_times([{"start": "01:02"}, {"start": 3}]) == [62.0, 3.0]
    with pytest.raises(TaskError):
        parse_times("not times")


def test_a_truncated_video_is_one_clear_error(ctx, video):
    whole = (ctx.data_dir / video).read_bytes()
    (ctx.data_dir / "cut.mp4").write_bytes(whole[: len(whole) // 3])
    error = fails("frames", {"video": "cut.mp4"}, ctx)
    assert error.error_type == "bad_input" and "'cut.mp4' does not decode" in error.message
    assert "moov atom not found" in error.message or "Invalid data" in error.message
    (ctx.data_dir / "tone.wav").write_bytes(b"")
    subprocess.run(
        [
            "ffmpeg",
            "-v",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "sine=duration=1",
            str(ctx.data_dir / "tone.wav"),
        ],
        check=True,
    )
    assert "holds no video stream" in fails("frames", {"video": "tone.wav"}, ctx).message
    missing = fails("frames", {"video": "nope.mp4"}, ctx)
    assert "not on the data volume" in missing.message


def test_frames_takes_one_mode_at_most():
    with pytest.raises(TaskError, match="at most one of"):
        validate_payload("frames", {"video": "v.mp4", "scene": 0.4, "every_s": 2})
    with pytest.raises(TaskError, match="max_frames"):
        validate_payload("frames", {"video": "v.mp4", "max_frames": 501})


# ------------------------------------------------------------------ pages
def test_pages_render_each_page_with_its_text_layer(ctx, pdf):
    output = run_task("pages", {"pdf": pdf, "dpi": 72}, ctx).output
    assert output["count"] == 2 and output["has_text"] is True and output["pdf"] == pdf
    assert [page["page"] for page in output["pages"]] == [1, 2]
    assert "Hello Airig" in output["pages"][0]["text"]
    assert "Brown fox" in output["pages"][1]["text"]
    # 595 x 420 points at 72 dpi.
    assert image_size(ctx.data_dir / output["pages"][0]["path"]) == (595, 420)
    first = run_task("pages", {"pdf": pdf, "dpi": 72, "max_pages": 1}, ctx).output
    assert first["count"] == 1 and first["total_pages"] == 2


def test_a_pdf_without_pages_or_a_corrupt_one_is_one_clear_error(ctx):
    make_pdf(ctx.data_dir / "empty.pdf", [])
    assert "has no pages" in fails("pages", {"pdf": "empty.pdf"}, ctx).message
    (ctx.data_dir / "junk.pdf").write_bytes(b"%PDF-1.4\nthis is not a pdf\n")
    error = fails("pages", {"pdf": "junk.pdf"}, ctx)
    assert error.error_type == "bad_input" and "'junk.pdf' does not open" in error.message


# ------------------------------------------------------------------ ocr
def test_tesseract_reads_the_printed_words(ctx):
    need("tesseract")
    make_text_png(ctx.data_dir / "scan.png", ["INVOICE 4217", "PAID IN FULL"])
    output = run_task("ocr", {"images": ["scan.png"], "engine": "tesseract"}, ctx).output
    assert output["engine"] == "tesseract"
    assert "INVOICE 4217" in output["text"] and "PAID IN FULL" in output["text"]
    assert output["pages"] == [{"path": "scan.png", "text": output["text"]}]
    # auto without a model on a CPU worker: tesseract, and it says why.
    auto = run_task("ocr", {"image": "scan.png"}, ctx).output
    assert auto["engine"] == "tesseract" and auto["engine_reason"].startswith("no model given")


def test_ocr_refuses_a_file_that_is_no_image_and_one_over_the_limit(make_ctx):
    ctx = make_ctx(max_image_bytes=1000)
    (ctx.data_dir / "fake.png").write_bytes(b"this is text, not a picture")
    error = fails("ocr", {"image": "fake.png"}, ctx)
    assert "'fake.png' does not decode" in error.message
    make_text_png(ctx.data_dir / "big.png", ["BIG"])
    error = fails("ocr", {"image": "big.png"}, ctx)
    assert "the limit is 1000 (AIRIG_MAX_IMAGE_BYTES)" in error.message


def test_an_unknown_tesseract_language_names_the_package(ctx):
    make_text_png(ctx.data_dir / "scan.png", ["WORDS"])
    error = fails("ocr", {"image": "scan.png", "language": "xx"}, ctx)
    assert "tesseract-ocr-xx" in error.hint


# ------------------------------------------------------------------ llm with images (fake)
class FakeVisionClient:
    """Answers show with ``capabilities`` and records chat / generate calls."""

    def __init__(self, capabilities):
        self.capabilities, self.calls = capabilities, []

    def show(self, model):
        return ollama.ShowResponse(capabilities=self.capabilities, model_info={})

    def _stream(self, name, kwargs, final):
        self.calls.append((name, kwargs))
        yield final

    def generate(self, **kwargs):
        final = ollama.GenerateResponse(model="m", response="seen", done=True)
        return self._stream("generate", kwargs, final)

    def chat(self, **kwargs):
        message = ollama.Message(role="assistant", content="seen")
        return self._stream(
            "chat", kwargs, ollama.ChatResponse(model="m", message=message, done=True)
        )

    def close(self):
        pass


@pytest.fixture
def scan(ctx):
    need("pdftoppm")
    return make_text_png(ctx.data_dir / "scan.png", ["A"]).name


def use(monkeypatch, client):
    monkeypatch.setattr(ollama_common, "make_client", lambda ctx: client)
    return client


def test_chat_images_go_base64_on_the_last_user_message(ctx, scan, monkeypatch):
    client = use(monkeypatch, FakeVisionClient(["completion", "vision"]))
    messages = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "..."},
    ]
    run_task("llm", {"model": "v", "messages": messages, "images": [scan]}, ctx)
    sent = client.calls[0][1]["messages"]
    assert [("images" in m) for m in sent] == [False, False, True, False]
    wire = ollama.Message.model_validate(sent[2]).model_dump(exclude_none=True)
    assert wire["images"] == [ollama.Image(value=(ctx.data_dir / scan).read_bytes()).model_dump()]


def test_a_model_without_vision_is_refused_before_it_is_sent_anything(ctx, scan, monkeypatch):
    client = use(monkeypatch, FakeVisionClient(["completion", "tools"]))
    error = fails("llm", {"model": "qwen2.5:7b", "prompt": "x", "images": [scan]}, ctx)
    assert error.error_type == "model_not_vision" and "'qwen2.5:7b'" in error.message
    assert client.calls == []


def test_images_are_checked_before_the_model_is_asked(ctx, monkeypatch):
    client = use(monkeypatch, FakeVisionClient(["completion", "vision"]))
    (ctx.data_dir / "a.jpg").write_bytes(b"\xff\xd8\xff")  # a JPEG start, then nothing
    error = fails("llm", {"model": "v", "prompt": "x", "images": ["a.jpg"]}, ctx)
    assert "'a.jpg' does not decode" in error.message and client.calls == []
    with pytest.raises(TaskError, match="data volume"):
        run_task("llm", {"model": "v", "prompt": "x", "images": '["../etc/passwd"]'}, ctx)


def test_llm_image_fields_are_checked():
    with pytest.raises(TaskError, match="'per_image' needs 'images'"):
        validate_payload("llm", {"model": "m", "prompt": "p", "per_image": True})
    with pytest.raises(TaskError, match="at most 16"):
        validate_payload("llm", {"model": "m", "prompt": "p", "images": ["a.png"] * 17})


# ------------------------------------------------------------------ note
def read(ctx, relative: str) -> str:
    return (ctx.data_dir / relative).read_text(encoding="utf-8")


def test_a_video_note_puts_keyframes_and_descriptions_under_their_topic(ctx):
    transcript = {
        "text": "hi all. now bars.",
        "segments": [
            {"start": 0.0, "end": 2.0, "text": "hi all."},
            {"start": 2.5, "end": 5.0, "text": "now bars."},
        ],
    }
    topics = (
        '```json\n{"topics": [{"title": "Intro", "start": 0, "end": 2, "summary": "Greeting."},'
        ' {"title": "Bars", "start": 2, "end": 6, "summary": "Colour bars."}]}\n```'
    )
    frames = {
        "frames": [
            {"path": "outputs/frames/clip/frame_0001.png", "t": 0.0},
            {"path": "outputs/frames/clip/frame_0002.png", "t": 2.0},
        ]
    }
    described = {"images": [{"path": "outputs/frames/clip/frame_0002.png", "text": "SMPTE bars"}]}
    payload = {
        "path": "outputs/notes/clip.md",
        "kind": "video",
        "title": "Clip",
        "source": "in/clip.mp4",
        "transcript": json.dumps(transcript),
        "topics": topics,
        "frames": json.dumps(frames),
        "descriptions": json.dumps(described),
    }
    output = run_task("note", payload, ctx).output
    text = read(ctx, "outputs/notes/clip.md")
    assert output["path"] == "outputs/notes/clip.md" and output["bytes"] == len(text.encode())
    assert text.startswith("# Clip\n\nSource: in/clip.mp4\n")
    intro, bars = text.index("## Intro (00:00:00 – 00:00:02)"), text.index("## Bars (00:00:02")
    first = text.index("![frame at 00:00:00](../frames/clip/frame_0001.png)")
    second = text.index("![frame at 00:00:02](../frames/clip/frame_0002.png)")
    assert intro < first < bars < second
    assert "*00:00:02* — SMPTE bars" in text
    assert "[00:00:02] now bars." in text and text.index("## Transcript") > second
    assert [d["locator"] for d in output["documents"]] == ["00:00:00", "00:00:02"]
    # each indexed text opens with the video's name in words, then the topic
    assert output["documents"][1]["text"] == "Clip\n\nBars\n\nColour bars.\n\nnow bars."
    assert output["documents"][1]["source"] == "in/clip.mp4"


def test_a_video_note_from_plain_text_alone(ctx):
    payload = {
        "path": "outputs/n.md",
        "kind": "video",
        "transcript": "just words",
        "source": "x.mp4",
    }
    output = run_task("note", payload, ctx).output
    assert "just words" in read(ctx, "outputs/n.md")
    assert output["documents"] == [
        {"text": "x\n\njust words", "source": "x.mp4", "locator": "00:00:00"}
    ]


def test_a_pages_note_separates_pages(ctx):
    ocr = {
        "text": "a\n\nb",
        "pages": [{"path": "p1.png", "text": "alpha"}, {"path": "p2.png", "text": "beta"}],
    }
    payload = {
        "path": "outputs/doc.txt",
        "kind": "pages",
        "source": "doc.pdf",
        "pages": json.dumps(ocr),
    }
    output = run_task("note", payload, ctx).output
    assert (
        read(ctx, "outputs/doc.txt")
        == "Source: doc.pdf\n\n--- page 1 ---\nalpha\n\n--- page 2 ---\nbeta\n"
    )
    assert [d["locator"] for d in output["documents"]] == ["page 1", "page 2"]


def test_a_csv_note_from_a_fan_out_group(ctx):
    group = {
        "items": [
            {
                "index": 0,
                "item": {"path": "a, b.png"},
                "state": "SUCCEEDED",
                "output": {"caption": 'say "hi"', "tags": ["cat", "dog"]},
                "error": None,
            },
            {
                "index": 1,
                "item": {"path": "c.png"},
                "state": "FAILED",
                "output": None,
                "error": {"error_type": "bad_input", "message": "does not decode"},
            },
            {
                "index": 2,
                "item": {"path": "ü.png"},
                "state": "SUCCEEDED",
                "output": {"caption": "=HYPERLINK(1)", "tags": []},
                "error": None,
            },
        ]
    }
    payload = {
        "path": "outputs/table.csv",
        "kind": "csv",
        "rows": json.dumps(group),
        "columns": ["item.path", "output.caption", "output.tags"],
    }
    output = run_task("note", payload, ctx).output
    raw = (ctx.data_dir / "outputs/table.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and output["bytes"] == len(raw)
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8-sig"))))
    assert rows == [
        ["item.path", "output.caption", "output.tags", "error"],
        ["a, b.png", 'say "hi"', "cat; dog", ""],
        ["c.png", "", "", "does not decode"],
        ["ü.png", "'=HYPERLINK(1)", "", ""],
    ]
    # An llm answer with format json: its text holds the fields a column names.
    answer = {"text": '```json\n{"caption": "a cat", "tags": ["cat"]}\n```', "model": "v"}
    items = {
        "items": [
            {
                "index": 0,
                "item": {"name": "a.jpg"},
                "state": "SUCCEEDED",
                "output": answer,
                "error": None,
            }
        ]
    }
    payload = {
        "path": "outputs/c.csv",
        "kind": "csv",
        "rows": items,
        "columns": ["item.name", "caption", "tags"],
    }
    run_task("note", payload, ctx)
    assert read(ctx, "outputs/c.csv").lstrip("\ufeff").splitlines() == [
        "item.name,caption,tags",
        "a.jpg,a cat,cat",
    ]
    plain = {
        "path": "outputs/p.csv",
        "kind": "csv",
        "rows": [{"n": -3, "x": "y"}],
        "columns": ["n", "x"],
    }
    run_task("note", plain, ctx)
    assert read(ctx, "outputs/p.csv").lstrip("\ufeff").splitlines() == ["n,x", "-3,y"]


def test_a_note_never_writes_outside_the_data_volume(ctx, tmp_path):
    (ctx.data_dir / "outputs").mkdir()
    (ctx.data_dir / "outputs" / "escape").symlink_to(tmp_path)
    payload = {"path": "outputs/escape/x.md", "kind": "video", "transcript": "t"}
    assert "leaves the data volume" in fails("note", payload, ctx).message
    assert not (tmp_path / "x.md").exists()
    with pytest.raises(TaskError, match="'\\.\\.'"):
        validate_payload("note", {**payload, "path": "../x.md"})
    with pytest.raises(TaskError, match="needs 'rows', 'columns'"):
        validate_payload("note", {"path": "t.csv", "kind": "csv"})


def test_loads_lenient_keeps_text_and_unwraps_fences():
    assert loads_lenient("```json\n[1, 2]\n```") == [1, 2]
    assert loads_lenient("plain words") == "plain words"
    assert loads_lenient("{broken") == "{broken"
    assert loads_lenient({"a": 1}) == {"a": 1}


def test_media_tools_are_on_this_machine():
    """CI installs them (.ci/run); a missing one is a failure with the fix, not a skip."""
    need("ffmpeg", "ffprobe", "pdftoppm", "pdftotext", "pdfinfo", "tesseract")


def test_a_video_note_shows_every_keyframe_even_outside_the_topics(ctx):
    # the topics start at 00:01:30 and leave a gap 04:00-04:30; keyframes at 00:00 (the
    # title slide), 00:10, in the gap at 04:05 (nearer the first topic) and 04:25 (nearer
    # the second), and past the last topic's end
    topics = {"topics": [
        {"title": "Cache", "start": 90, "end": 240, "summary": "How it is kept."},
        {"title": "Invalidation", "start": 270, "end": 400, "summary": "When it goes."},
    ]}  # fmt: skip
    times = [0, 10, 100, 245, 265, 300, 420]
    frames = {"frames": [{"path": f"outputs/f/frame_{t:04d}.png", "t": t} for t in times]}
    described = {"images": [{"path": "outputs/f/frame_0000.png", "text": "Title: caches"}]}
    payload = {"path": "outputs/talk.md", "kind": "video", "title": "talk", "source": "in/talk.mp4",
               "transcript": "words", "topics": json.dumps(topics),
               "frames": json.dumps(frames), "descriptions": json.dumps(described)}  # fmt: skip
    output = run_task("note", payload, ctx).output
    text = read(ctx, "outputs/talk.md")
    for t in times:
        assert text.count(f"](f/frame_{t:04d}.png)") == 1, t
    start = text.index("## Start (00:00:00 – 00:01:30)")
    cache, invalidation = text.index("## Cache ("), text.index("## Invalidation (")
    where = {t: text.index(f"](f/frame_{t:04d}.png)") for t in times}
    assert start < where[0] < where[10] < cache < where[100] < where[245] < invalidation
    assert invalidation < where[265] < where[300] < where[420] < text.index("## Transcript")
    assert "*00:00:00* — Title: caches" in text
    # the search index keeps one document per topic
    assert [d["locator"] for d in output["documents"]] == ["00:01:30", "00:04:30"]
