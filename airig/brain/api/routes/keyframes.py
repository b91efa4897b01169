"""The keyframe of a video search hit, for the dashboard's Search page (issue 39 §4):
``GET /v1/search/keyframe?plan=&task=&at=`` (admin), the image bytes.

A hit names the embed task that indexed it (plan, task) and where in the video it is
(``at``: its locator, a timestamp such as ``00:01:30``). The frame is found in the
outputs of the tasks that embed task stands on (a ``frames`` task's ``frames``: path and
time, within a few steps upstream): the first frame at or after ``at``, else the last one
before it. Its path comes from a run's output, so it is untrusted: the file is served
only from the data volume (``volume_open``: no ``..``, no absolute path, no link out, a
regular file), only when its bytes are a PNG, JPEG, GIF or WebP (the content type is
what the bytes say, never the name), at most ``MAX_BYTES`` and within the pixel budget
(a bomb would be decoded by the operator's browser); anything else is a 404 with
the reason, never the file."""

from __future__ import annotations

import os
import re
import sqlite3
from collections import deque
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import Response

from airig.brain.api.deps import AdminDep, BrainDep
from airig.brain.store import escalations, fanout, plans
from airig.common.external_images import ImageRefused, sniff
from airig.common.volume_open import OutsideVolume, open_inside

router = APIRouter(prefix="/v1/search", tags=["search"])
MAX_BYTES = 16 * 1024 * 1024  # a keyframe ffmpeg writes is a few hundred KB
MAX_STEPS = 4  # embed <- note <- keyframes is two; fan-out items add none
MAX_TASKS = 64  # upstream tasks looked at, at most
FRAMES_TYPE = "frames"
TIMESTAMP = re.compile(r"^(?:(\d{1,3}):)?(\d{1,2}):(\d{1,2}(?:\.\d+)?)$")
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
}


def seconds(at: str) -> float | None:
    """``hh:mm:ss[.f]``, ``mm:ss`` or plain seconds; None for anything else (a page)."""
    text = at.strip()
    match = TIMESTAMP.match(text)
    if match:
        hours, minutes, secs = match.groups()
        return int(hours or 0) * 3600 + int(minutes) * 60 + float(secs)
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value < 1e9 else None


def frames_upstream(conn: sqlite3.Connection, results_dir: Any, task: sqlite3.Row) -> list[dict]:
    """The frames (path, t) of the nearest succeeded ``frames`` task upstream of ``task``."""
    queue, seen = deque([(task, 0)]), {task["id"]}
    while queue and len(seen) <= MAX_TASKS:
        row, depth = queue.popleft()
        if row["type"] == FRAMES_TYPE and row["state"] == "SUCCEEDED":
            try:
                output = fanout.load_output(conn, results_dir, row)
            except (OSError, ValueError):
                continue
            found = output.get("frames") if isinstance(output, dict) else None
            if isinstance(found, list):
                return [
                    f for f in found
                    if isinstance(f, dict) and isinstance(f.get("path"), str)
                    and isinstance(f.get("t"), int | float)
                ]  # fmt: skip
        if depth < MAX_STEPS:
            for up in escalations.upstream_tasks(conn, row["id"]):
                if up["id"] not in seen:
                    seen.add(up["id"])
                    queue.append((up, depth + 1))
    return []


def pick(frames: list[dict], at: float) -> dict | None:
    """The first frame at or after ``at``, else the last before it."""
    ordered = sorted(frames, key=lambda f: f["t"])
    after = [f for f in ordered if f["t"] >= at]
    return after[0] if after else (ordered[-1] if ordered else None)


@router.get("/keyframe", include_in_schema=False)
def keyframe(
    brain: BrainDep,
    _: AdminDep,
    plan: Annotated[str, Query(min_length=1, max_length=64)],
    task: Annotated[str, Query(min_length=1, max_length=512)],
    at: Annotated[str, Query(min_length=1, max_length=32)],
) -> Response:
    when = seconds(at)
    if when is None:
        raise HTTPException(404, f"{at!r:.40} is no timestamp: only a video hit has a keyframe")
    with brain.db.read() as conn:
        row = plans.task(conn, plan, task)
        if row is None:
            raise HTTPException(404, f"no task {task!r:.80} in plan {plan!r:.80}")
        frames = frames_upstream(conn, brain.settings.results_dir, row)
    chosen = pick(frames, when)
    if chosen is None:
        raise HTTPException(404, "no keyframes upstream of that task")
    return _serve(brain.settings.data_dir, chosen["path"], brain.settings.max_image_pixels)


def _serve(data_dir: Any, path: str, max_pixels: int) -> Response:
    what = f"keyframe {path!r:.200}"
    try:
        fd, info = open_inside(data_dir, path, what)
    except OutsideVolume as exc:
        raise HTTPException(404, str(exc)) from None
    try:
        if info.st_size > MAX_BYTES:
            raise HTTPException(404, f"{what} is {info.st_size} bytes; at most {MAX_BYTES}")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise HTTPException(404, f"{what} grew past {MAX_BYTES} bytes")
    try:
        media_type, width, height = sniff(data, what)
    except ImageRefused as exc:
        raise HTTPException(404, str(exc)) from None
    if width * height > max_pixels:  # a bomb the operator's browser would decode
        raise HTTPException(
            404, f"{what} declares {width} x {height} pixels (AIRIG_MAX_IMAGE_PIXELS)"
        )
    return Response(data, media_type=media_type, headers=HEADERS)
