"""Media that lies about itself (issue 36 §2): an HLS playlist named ``talk.mp4`` made
ffmpeg read a file outside the data volume. A video or audio file is read only when its
first bytes are a plain container, with that container's demuxer, the file protocol
alone and a file: URL; playlists, concat lists and images are refused before any tool
runs or anything is sent to the Whisper server. Real media made by ffmpeg
(tests/support_media.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support_media import make_image, make_video, need, run

from airig.executors import frames, media
from airig.executors.base import run_task
from airig.executors.containers import demuxer_of, plain_container
from airig.executors.context import TaskError


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory) -> Path:
    """A real video, and the same in other plain containers, once for the module."""
    folder = tmp_path_factory.mktemp("media")
    video = make_video(folder / "clip.mp4", "160x120")
    for name, args in {
        "clip.mkv": ["-c", "copy"],
        "clip.mov": ["-c", "copy"],
        "clip.ts": ["-c", "copy"],
        "clip.avi": ["-c:v", "mpeg4", "-c:a", "mp3"],
        "clip.webm": ["-c:v", "libvpx", "-c:a", "libvorbis", "-t", "1"],
        "clip.mpg": ["-c:v", "mpeg2video", "-c:a", "mp2"],
        "tone.wav": ["-vn"],
        "tone.flac": ["-vn"],
        "tone.ogg": ["-vn", "-c:a", "libvorbis"],
        "tone.mp3": ["-vn"],
        "tone.m4a": ["-vn", "-c:a", "aac"],
        "tone.aac": ["-vn", "-c:a", "aac", "-f", "adts"],
        "plain.mp3": ["-vn", "-write_xing", "0", "-id3v2_version", "0"],
    }.items():
        run(["ffmpeg", "-v", "error", "-nostdin", "-y", "-i", str(video), *args,
             str(folder / name)])  # fmt: skip
    return folder


@pytest.fixture
def ctx(make_ctx):
    return make_ctx()


@pytest.fixture
def outside(tmp_path) -> Path:
    """A real video outside the data volume (``make_ctx``'s is tmp_path/data)."""
    need("ffmpeg")
    folder = tmp_path / "outside"
    folder.mkdir()
    secret = folder / "secret.ts"
    run(["ffmpeg", "-v", "error", "-nostdin", "-y", "-f", "lavfi", "-i",
         "testsrc=size=160x120:rate=10:duration=2", "-c:v", "libx264", "-f", "mpegts",
         str(secret)])  # fmt: skip
    return secret


@pytest.fixture
def tools(monkeypatch) -> list[list[str]]:
    """Every tool the executors run, recorded (and run)."""
    ran: list[list[str]] = []
    real = media.run_tool

    def record(ctx, argv, cwd=None):
        ran.append(list(argv))
        return real(ctx, argv, cwd)

    monkeypatch.setattr(frames, "run_tool", record)
    return ran


def playlist(segment: str) -> str:
    return (
        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:0\n"
        f"#EXTINF:2.0,\n{segment}\n#EXT-X-ENDLIST\n"
    )


def refused(task_type: str, payload: dict, ctx) -> TaskError:
    with pytest.raises(TaskError) as caught:
        run_task(task_type, payload, ctx)
    error = caught.value
    assert error.error_type == "bad_input" and not error.retryable, error.to_dict()
    assert "\n" not in error.message
    return error


# ------------------------------------------------------------------ lists of other files
def test_an_hls_playlist_named_mp4_reads_nothing_outside_the_data_volume(ctx, tools, outside):
    talk = ctx.data_dir / "talk.mp4"
    talk.write_text(playlist(str(outside)))
    # the attack is real: ffmpeg left to probe reads the outside video through it
    control = ctx.data_dir.parent / "control.png"
    subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", "-i", str(talk),
                    "-frames:v", "1", str(control)], check=True, capture_output=True,
                   timeout=60)  # fmt: skip
    assert control.stat().st_size > 0
    error = refused("frames", {"video": "talk.mp4"}, ctx)
    assert (
        error.message == "video 'talk.mp4' is an HLS/M3U playlist, not a plain audio or video file"
    )
    assert "playlists and lists of other files are not read" in error.hint
    assert tools == []  # neither ffprobe nor ffmpeg ran
    assert not (ctx.data_dir / "frames").exists()
    # and the Whisper server is never sent it (nothing listens at the context's URL:
    # refused as bad_input, not service_unreachable)
    error = refused("transcribe", {"audio": "talk.mp4", "model": "w"}, ctx)
    assert error.message.startswith("audio file 'talk.mp4' is an HLS/M3U playlist")


@pytest.mark.parametrize(
    ("body", "looks"),
    [
        (playlist("file:///etc/passwd"), "an HLS/M3U playlist"),
        ("\ufeff  " + playlist("http://169.254.169.254/latest/meta-data/"), "an HLS/M3U playlist"),
        ("ffconcat version 1.0\nfile '/etc/passwd'\n", "an ffconcat list"),
        ('<?xml version="1.0"?><MPD><BaseURL>file:///etc/</BaseURL></MPD>', "an XML file"),
        ("[playlist]\nFile1=/etc/passwd\n", "a PLS playlist"),
        ("file '/etc/passwd'\n", "text"),
        ("", "empty"),
    ],
    ids=["hls-file-url", "hls-bom-http", "ffconcat", "dash", "pls", "concat-lines", "empty"],
)
def test_lists_of_other_files_are_refused_before_any_tool_runs(ctx, tools, body, looks):
    (ctx.data_dir / "talk.mp4").write_text(body)
    error = refused("frames", {"video": "talk.mp4"}, ctx)
    assert error.message.startswith(f"video 'talk.mp4' is {looks}")
    assert tools == []


def test_an_image_named_mp4_is_no_video_for_ffmpeg(ctx, tools):
    make_image(ctx.data_dir / "still.png")
    (ctx.data_dir / "still.png").rename(ctx.data_dir / "still.mp4")
    error = refused("frames", {"video": "still.mp4"}, ctx)
    assert error.message.startswith("video 'still.mp4' is a PNG image, not a plain")
    assert tools == []


# ------------------------------------------------------------------ plain containers
@pytest.mark.parametrize(
    ("name", "demuxer", "format_name"),
    [
        ("clip.mp4", "mov", "mov,mp4,m4a,3gp,3g2,mj2"),
        ("clip.mov", "mov", "mov,mp4,m4a,3gp,3g2,mj2"),
        ("tone.m4a", "mov", "mov,mp4,m4a,3gp,3g2,mj2"),
        ("clip.mkv", "matroska", "matroska,webm"),
        ("clip.webm", "matroska", "matroska,webm"),
        ("clip.avi", "avi", "avi"),
        ("clip.ts", "mpegts", "mpegts"),
        ("clip.mpg", "mpeg", "mpeg"),
        ("tone.wav", "wav", "wav"),
        ("tone.flac", "flac", "flac"),
        ("tone.ogg", "ogg", "ogg"),
        ("tone.mp3", "mp3", "mp3"),
        ("plain.mp3", "mp3", "mp3"),
        ("tone.aac", "aac", "aac"),
    ],
)
def test_plain_containers_are_told_by_their_bytes_and_read_with_that_demuxer(
    media_dir, name, demuxer, format_name
):
    path = media_dir / name
    assert plain_container(path, name, "video") == demuxer
    # the real ffprobe, given that demuxer, reads the file as what its probing finds
    probed = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "format=format_name", "-of", "json",
         "-protocol_whitelist", "file", "-f", demuxer, f"file:{path}"],
        capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    assert json.loads(probed.stdout)["format"]["format_name"] == format_name


@pytest.mark.parametrize("name", ["clip.mp4", "clip.mkv", "clip.ts", "clip.avi"])
def test_frames_read_a_plain_video_with_its_demuxer_and_the_file_protocol_alone(
    ctx, tools, media_dir, name
):
    (ctx.data_dir / "in").mkdir()
    # the name lies the other way too: the bytes choose the demuxer, not ".webm"
    (ctx.data_dir / "in" / "talk.webm").write_bytes((media_dir / name).read_bytes())
    output = run_task("frames", {"video": "in/talk.webm", "every_s": 2}, ctx).output
    assert output["count"] >= 2
    demuxer = demuxer_of((media_dir / name).read_bytes()[:512])
    assert {argv[0] for argv in tools} == {"ffprobe", "ffmpeg"}
    for argv in tools:
        assert argv[argv.index("-protocol_whitelist") + 1] == "file"
        assert argv[argv.index("-f") + 1] == demuxer
        assert argv[argv.index("-i") + 1] == f"file:{ctx.data_dir / 'in' / 'talk.webm'}"


def test_frames_at_times_use_the_same_input(ctx, tools, media_dir):
    (ctx.data_dir / "clip.mp4").write_bytes((media_dir / "clip.mp4").read_bytes())
    run_task("frames", {"video": "clip.mp4", "at": [1, 3]}, ctx)
    grabs = [argv for argv in tools if argv[0] == "ffmpeg"]
    assert len(grabs) == 2
    for argv in grabs:
        assert argv[argv.index("-f") + 1] == "mov"
        assert argv[argv.index("-enable_drefs") + 1] == "0"


def test_a_video_picture_over_the_pixel_budget_is_refused_before_ffmpeg_decodes(
    make_ctx, tools, media_dir
):
    ctx = make_ctx(max_image_pixels=160 * 120 - 1)
    (ctx.data_dir / "clip.mp4").write_bytes((media_dir / "clip.mp4").read_bytes())
    error = refused("frames", {"video": "clip.mp4"}, ctx)
    assert error.message.startswith("video 'clip.mp4' is 160 x 120 pixels (")
    assert "AIRIG_MAX_IMAGE_PIXELS" in error.message
    assert [argv[0] for argv in tools] == ["ffprobe"]


@pytest.mark.parametrize(
    "head",
    [
        b"ID3\x04\x00\x00\x00\x00\x00\x05" + b"\x00" * 5 + b"fLaC",
        b"ID3\x04\x00\x10\x00\x00\x00\x00",
    ],
    ids=["id3-then-flac", "id3-footer-then-nothing"],
)
def test_an_id3_tag_is_skipped_to_the_audio_it_heads(tmp_path, head):
    path = tmp_path / "a.mp3"
    path.write_bytes(head)
    expected = "flac" if head.endswith(b"fLaC") else "mp3"
    assert plain_container(path, "a.mp3", "audio file") == expected
