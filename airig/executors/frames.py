"""The frames executor: keyframes of a video on the data volume, with ffmpeg.

Three ways to pick them: at scene changes (``scene``, a threshold of ffmpeg's scene score,
0..1; the default, 0.3, and the first frame always), every N seconds (``every_s``), or at
given times (``at``). Each frame's time is the one ffmpeg's ``showinfo`` filter prints for
it (``pts_time``), never a computed guess.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

from airig.common.task_schemas import MAX_FRAMES, FramesPayload
from airig.executors.containers import ffmpeg_input, plain_container
from airig.executors.context import ExecContext, ExecResult, elapsed_ms
from airig.executors.media import (
    bad_input,
    check_pixels,
    data_relative,
    input_file,
    last_line,
    loads_lenient,
    output_folder,
    run_tool,
    safe_stem,
)

DEFAULT_SCENE = 0.3
_PTS = re.compile(r"\bn:\s*\d+\s.*?\bpts_time:\s*(-?[0-9.]+(?:e[-+]?\d+)?)")
PREFIX = "frame_"


def execute_frames(payload: FramesPayload, ctx: ExecContext) -> ExecResult:
    start = time.monotonic()
    video = input_file(ctx, payload.video, "video")
    # a plain container, read with its own demuxer: never a playlist naming other files
    source = ffmpeg_input(video, plain_container(video, payload.video, "video"))
    duration, start_time = probe(ctx, source, payload.video)
    folder, folder_rel = output_folder(
        ctx, payload.out_dir, f"outputs/frames/{safe_stem(payload.video)}"
    )
    for stale in folder.glob(f"{PREFIX}*.png"):
        stale.unlink()  # a retry or a second run: only this run's frames are listed
    scale = f"scale={payload.width}:-2"
    if payload.at is not None:
        times = parse_times(payload.at)[: payload.max_frames]
        frames, skipped = _frames_at(ctx, source, folder, times, duration, scale)
        mode = "at"
    else:
        if payload.every_s is not None:
            select = f"isnan(prev_selected_t)+gte(t-prev_selected_t\\,{payload.every_s:g})"
            mode = "every_s"
        else:
            threshold = DEFAULT_SCENE if payload.scene is None else payload.scene
            select = f"eq(n\\,0)+gt(scene\\,{threshold:g})"
            mode = "scene"
        frames = _frames_selected(ctx, source, folder, select, scale, payload.max_frames)
        skipped = []
    if not frames:
        raise bad_input(
            f"video {payload.video!r} gave no frames",
            hint="check the times given, or lower the scene threshold",
        )
    listed = [
        {"path": data_relative(ctx, path), "t": round(max(0.0, pts - start_time), 3)}
        for path, pts in frames
    ]
    output: dict[str, Any] = {
        "frames": listed,
        "count": len(listed),
        "duration_s": round(duration, 3),
        "video": payload.video,
        "mode": mode,
        "out_dir": folder_rel,
    }
    if skipped:
        output["skipped_t"] = skipped
    return ExecResult(output=output, metrics={"wall_ms": elapsed_ms(start), "frames": len(listed)})


def probe(ctx: ExecContext, source: list[str], relative: str) -> tuple[float, float]:
    """The video's duration and start time; refused when ffprobe finds no video in it, or
    a video picture larger than the pixel budget (ffmpeg would decode each frame whole).
    ``source``: ffmpeg's input options (``containers.ffmpeg_input``)."""
    argv = [
        "ffprobe",
        "-v",
        "error",
        "-show_entries",
        "format=duration,start_time:stream=codec_type,width,height",
        "-of",
        "json",
        *source,
    ]
    result = run_tool(ctx, argv)
    try:
        info = json.loads(result.stdout or b"{}")
    except ValueError:
        info = {}
    streams = [s for s in info.get("streams") or [] if isinstance(s, dict)]
    videos = [s for s in streams if s.get("codec_type") == "video"]
    if result.returncode != 0 or not videos:
        why = last_line(result.stderr) if result.returncode else "it holds no video stream"
        raise bad_input(
            f"video {relative!r} does not decode: {why}",
            hint="give a complete video file (mp4, mkv, webm …)",
        )
    for stream in videos:
        width, height = int(_number(stream.get("width"))), int(_number(stream.get("height")))
        check_pixels(ctx, f"video {relative!r} is {width} x {height} pixels", width * height)
    fmt = info.get("format") or {}
    duration = _number(fmt.get("duration"))
    start_time = _number(fmt.get("start_time"))
    return duration, start_time


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def _frames_selected(
    ctx: ExecContext, source: list[str], folder: Path, select: str, scale: str, limit: int
) -> list[tuple[Path, float]]:
    pattern = folder / f"{PREFIX}%04d.png"
    argv = [
        "ffmpeg",
        "-hide_banner",
        "-nostdin",
        "-v",
        "info",
        *source,
        "-vf",
        f"select='{select}',{scale},showinfo",
        "-fps_mode",
        "vfr",
        "-frames:v",
        str(limit),
        "-y",
        str(pattern),
    ]
    result = run_tool(ctx, argv)
    if result.returncode != 0:
        raise bad_input(f"ffmpeg could not read the video: {last_line(result.stderr)}")
    times = [float(t) for t in _PTS.findall(result.stderr)]
    files = sorted(folder.glob(f"{PREFIX}*.png"))
    # showinfo prints each frame that reaches the encoder, in order: file n is time n.
    return list(zip(files, times, strict=False))


def _frames_at(
    ctx: ExecContext,
    source: list[str],
    folder: Path,
    times: list[float],
    duration: float,
    scale: str,
) -> tuple[list[tuple[Path, float]], list[float]]:
    frames, skipped = [], []
    for index, wanted in enumerate(times, start=1):
        ctx.check()
        if duration and wanted > duration:
            skipped.append(wanted)
            continue
        target = folder / f"{PREFIX}{index:04d}.png"
        # Input seeking with -copyts: showinfo prints the frame's own time in the video.
        argv = [
            "ffmpeg",
            "-hide_banner",
            "-nostdin",
            "-v",
            "info",
            "-ss",
            f"{wanted:.3f}",
            "-copyts",
            *source,
            "-frames:v",
            "1",
            "-vf",
            f"{scale},showinfo",
            "-y",
            str(target),
        ]
        result = run_tool(ctx, argv)
        if result.returncode != 0:
            raise bad_input(f"ffmpeg could not read the video: {last_line(result.stderr)}")
        found = _PTS.findall(result.stderr)
        if not target.is_file() or not found:
            skipped.append(wanted)  # past the last frame
            continue
        frames.append((target, float(found[0])))
    return frames, skipped


def parse_times(value: list[float] | str) -> list[float]:
    """``at`` as seconds: a list of numbers, or the JSON text a template inserted (a list of
    numbers, of objects with ``start`` such as topics, or ``{"topics": [...]}``)."""
    data = loads_lenient(value) if isinstance(value, str) else value
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        data = lists[0] if len(lists) == 1 else data
    if isinstance(data, (int, float)) and not isinstance(data, bool):
        data = [data]
    if not isinstance(data, list) or not data:
        raise bad_input(
            f"at: {str(value)[:120]!r} is not a list of times",
            hint='give seconds, e.g. [0, 12.5], or objects with "start"',
        )
    times = []
    for item in data:
        raw = item.get("start") if isinstance(item, dict) else item
        number = parse_seconds(raw)
        if number is None:
            raise bad_input(f"at: {item!r:.80} is not a time in seconds")
        times.append(number)
    if len(times) > MAX_FRAMES:
        times = times[:MAX_FRAMES]
    return times


def parse_seconds(raw: Any) -> float | None:
    """Seconds from a number, a numeric string or ``hh:mm:ss(.fff)``."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, (int, float)):
        number = float(raw)
    elif isinstance(raw, str):
        parts = raw.strip().split(":")
        try:
            number = sum(float(p) * 60**i for i, p in enumerate(reversed(parts)))
        except ValueError:
            return None
        if len(parts) > 3:
            return None
    else:
        return None
    return number if math.isfinite(number) and number >= 0 else None
