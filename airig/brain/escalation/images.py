"""The images of an escalated task, as the external tier takes them (issue 39 §3).

Two steps, so the store never holds the images and no transaction waits on reading them:

- ``references`` when the handoff is built (in the transaction that marks the call
  ``sent``): each path of the task's ``images`` (its rendered payload: a frames output
  fills it), checked on the data volume by its header alone: inside the volume once its
  links are resolved, a regular file, a PNG/JPEG/GIF/WebP whose bytes say so whatever its
  name, within the pixel budget (``AIRIG_MAX_IMAGE_PIXELS``) and both providers' limits
  (``external_images.KIT``). What it stores is a reference: path, media type, size and
  mtime. Anything wrong refuses the escalation with one line naming the image.
- ``expand`` just before the HTTP call (no transaction open): each reference read whole,
  checked again (the same size and mtime, the same header), as base64. A file that changed
  or went away in between refuses the call rather than sending something else under the
  same request id.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from airig.brain.settings import BrainSettings
from airig.brain.store import payloads
from airig.common import external_images as ext
from airig.common.external_images import ImageRefused
from airig.common.task_types import names_where
from airig.common.volume_open import OutsideVolume, open_inside

IMAGE_TYPES = frozenset(names_where(prompt_payload=True))  # llm: a model's prompt
HEADER_BYTES = 64 * 1024  # image_header reads a JPEG's segments up to its frame header
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n?\s*```\s*$", re.DOTALL)


def wants_images(task: sqlite3.Row) -> bool:
    if task["type"] not in IMAGE_TYPES:
        return False
    return bool(json.loads(task["payload_json"]).get("images"))


def from_outputs(task: sqlite3.Row) -> bool:
    """True when a run's output chose the images (a template fills the field): data of
    unknown origin, marked so in the handoff as its text would be."""
    value = json.loads(task["payload_json"]).get("images")
    return isinstance(value, str) and "{{" in value


def listed(value: Any) -> list[str]:
    """The paths an ``images`` field names, in the shapes the llm executor reads
    (``executors/media.image_paths``): a list, or JSON text of a list of paths or of
    objects with a ``path`` (a frames / pages output, or its ``frames`` / ``pages``)."""
    data = _json_text(value)
    if isinstance(data, dict):
        data = next((data[k] for k in ("frames", "pages", "images")
                     if isinstance(data.get(k), list)), data)  # fmt: skip
    if isinstance(data, str):
        data = [data]
    if not isinstance(data, list) or not data:
        raise ImageRefused("images must be a list of paths on the data volume")
    paths = []
    for item in data:
        path = item.get("path") if isinstance(item, dict) else item
        if not isinstance(path, str) or not path:
            raise ImageRefused(f"images: {item!r:.80} is neither a path nor an object with 'path'")
        paths.append(path)
    return paths


def _json_text(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    fenced = _FENCE.match(text)
    text = fenced.group(1).strip() if fenced else text
    if text[:1] in ("[", "{", '"'):
        try:
            return json.loads(text)
        except ValueError:
            return value
    return value


def references(
    conn: sqlite3.Connection, task: sqlite3.Row, settings: BrainSettings
) -> list[dict[str, Any]]:
    """The task's images checked on the data volume, as references for the request."""
    if not wants_images(task):
        return []
    try:
        rendered = payloads.rendered_payload(conn, task, settings)
    except KeyError as exc:
        raise ImageRefused(f"the images cannot be filled in: no field {exc} upstream") from None
    except (OSError, ValueError) as exc:
        raise ImageRefused(f"the images cannot be filled in: {exc}"[:500]) from None
    paths = listed(rendered.get("images"))
    ext.check_count(len(paths), ext.KIT)
    found, total = [], 0
    for path in paths:
        ref = _reference(settings, path, len(paths))
        total += ext.base64_size(ref["size"])
        if total > ext.KIT.max_total_base64:
            raise ImageRefused(
                f"the images add up to over {ext.KIT.max_total_base64} bytes of base64 "
                f"(at {path!r:.200}); send fewer or smaller images"
            )
        found.append(ref)
    return found


def _reference(settings: BrainSettings, path: str, count: int) -> dict[str, Any]:
    what = f"image {path!r:.200}"
    fd, info = _open(settings.data_dir, path, what)
    try:
        media_type, width, height = ext.sniff(os.pread(fd, HEADER_BYTES, 0), what)
    finally:
        os.close(fd)
    _check_pixels(settings, what, width, height)
    ext.check_size(what, width, height, ext.KIT, count)
    if ext.base64_size(info.st_size) > ext.KIT.max_base64_bytes:
        raise ImageRefused(
            f"{what} is {info.st_size} bytes ({ext.base64_size(info.st_size)} as base64); the "
            f"external tier takes at most {ext.KIT.max_base64_bytes} bytes of base64 an image"
        )
    return {
        "path": path, "media_type": media_type, "width": width, "height": height,
        "size": info.st_size, "mtime_ns": info.st_mtime_ns,
    }  # fmt: skip


def _check_pixels(settings: BrainSettings, what: str, width: int, height: int) -> None:
    budget = settings.max_image_pixels
    if width * height > budget:
        raise ImageRefused(
            f"{what} declares {width} x {height} pixels; the pixel budget is {budget} "
            "(AIRIG_MAX_IMAGE_PIXELS)"
        )


def _open(data_dir: Path, path: str, what: str) -> tuple[int, os.stat_result]:
    try:
        return open_inside(data_dir, path, what)
    except OutsideVolume as exc:
        raise ImageRefused(str(exc)) from None


def expand(request: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    """The request with each message's image references replaced by what the gateway
    takes: ``{"media_type", "data"}``, the data base64. ImageRefused when one changed."""
    messages = []
    for message in request["messages"]:
        refs = message.get("images")
        if refs:
            message = {**message, "images": [_read(data_dir, ref) for ref in refs]}
        messages.append(message)
    return {**request, "messages": messages}


def _read(data_dir: Path, ref: dict[str, Any]) -> dict[str, str]:
    what = f"image {ref['path']!r:.200}"
    fd, info = _open(data_dir, ref["path"], what)
    try:
        if (info.st_size, info.st_mtime_ns) != (ref["size"], ref["mtime_ns"]):
            raise ImageRefused(f"{what} changed after the handoff was built; submit it again")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(ref["size"] + 1)
    finally:
        os.close(fd)
    if len(data) != ref["size"] or ext.sniff(data, what)[0] != ref["media_type"]:
        raise ImageRefused(f"{what} changed after the handoff was built; submit it again")
    return {"media_type": ref["media_type"], "data": base64.b64encode(data).decode("ascii")}


def image_tokens(request: dict[str, Any]) -> int:
    """Input tokens the request's images may cost, for the budget's estimate."""
    return sum(
        ext.estimated_tokens(ref["width"], ref["height"])
        for message in request["messages"]
        for ref in message.get("images") or []
    )
