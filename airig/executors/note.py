"""The note executor: a document a person reads, written onto the data volume from the
outputs of upstream tasks.

Templates insert upstream outputs as JSON text, so every input field takes a string
holding JSON (an LLM's may sit in a ```json fence), plain text, or the list / mapping
itself. Kinds:

- ``video``: Markdown with the title and source, one section per topic (its time range,
  summary, the keyframes inside it as images with their descriptions; every keyframe is
  shown: one before the first topic in a leading "Start" section, one between topics
  under the nearest), then the whole transcript with timestamps; ``documents`` one per
  topic for the search index.
- ``pages``: plain text, ``--- page N ---`` before each page; ``documents`` one per page.
- ``csv``: one row per item of a fan-out group's output (or of a list of mappings), the
  ``columns`` given as field paths, each its own header, or as ``{header: path}`` (the
  photos recipe's ``{file: item.name}``); failed items carry their error in an ``error``
  column.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

from airig.common.task_schemas import NotePayload
from airig.executors.context import (
    ExecContext,
    ExecResult,
    elapsed_ms,
    output_file_path,
    resolve_data_path,
)
from airig.executors.frames import parse_seconds
from airig.executors.media import bad_input, loads_lenient

DOCUMENT_CHARS = 2_000


def execute_note(payload: NotePayload, ctx: ExecContext) -> ExecResult:
    start = time.monotonic()
    # inside outputs/ (never index/); the file's own name is not followed: a link there
    # is replaced by the note, never written through
    target = output_file_path(ctx.data_dir, payload.path, "note path")
    if target.is_dir() and not target.is_symlink():
        raise bad_input(f"path {payload.path!r} is a folder", hint="name the file to write")
    source = payload.source or ""
    documents: list[dict] | None = None
    if payload.kind == "video":
        text, documents = video_note(payload, ctx, target.parent, source)
        data = text.encode("utf-8")
    elif payload.kind == "pages":
        text, documents = pages_note(payload, source)
        data = text.encode("utf-8")
    else:
        # UTF-8 with a byte-order mark: what makes spreadsheet programs read it as UTF-8.
        data = csv_note(payload).encode("utf-8-sig")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_whole(target.parent, target.name, data)
    output: dict[str, Any] = {
        "path": target.relative_to(ctx.data_dir.resolve()).as_posix(),
        "bytes": len(data),
    }
    if documents is not None:
        output["documents"] = documents
    return ExecResult(output=output, metrics={"wall_ms": elapsed_ms(start)})


def write_whole(folder: Path, name: str, data: bytes) -> None:
    """``data`` as ``folder/name``, replaced whole: written to a new file of a random name
    in the same folder, created there (O_EXCL: never one that already stands there, a
    link included; O_NOFOLLOW), then renamed over ``name``, which replaces whatever stands
    there, a link too, without following it. The folder is opened once without following
    a link, and both steps are made in it (dir_fd)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW
    folder_fd = os.open(folder, flags)
    try:
        partial = f".{secrets.token_hex(8)}.partial"
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(partial, create, 0o666, dir_fd=folder_fd)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(partial, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(partial, dir_fd=folder_fd)
            raise
    finally:
        os.close(folder_fd)


# ------------------------------------------------------------------ shared
def hms(seconds: float) -> str:
    whole = max(0, int(seconds))
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _list_of(value: Any, *keys: str) -> list:
    """The list a field holds: itself, or the first of ``keys`` in a mapping."""
    data = loads_lenient(value)
    if isinstance(data, dict):
        for key in keys:
            if isinstance(data.get(key), list):
                return data[key]
        return []
    return data if isinstance(data, list) else []


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    return json.dumps(value, ensure_ascii=False)


def _cut(text: str, limit: int = DOCUMENT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# ------------------------------------------------------------------ video
def _segments(value: Any) -> tuple[list[dict], str]:
    """Transcript segments ``{start, end, text}`` (verbose_json) and the plain text."""
    data = loads_lenient(value)
    if isinstance(data, dict):
        found = data.get("segments")
        segments: list = found if isinstance(found, list) else []
        text = _text(data.get("text"))
    elif isinstance(data, list):
        segments, text = data, ""
    else:
        segments, text = [], _text(data)
    clean: list[dict[str, Any]] = []
    for item in segments:
        if isinstance(item, dict) and _text(item.get("text")):
            begin = parse_seconds(item.get("start")) or 0.0
            end = parse_seconds(item.get("end"))
            clean.append(
                {
                    "start": begin,
                    "end": begin if end is None else end,
                    "text": _text(item.get("text")),
                }
            )
    if not text:
        text = " ".join(segment["text"] for segment in clean)
    return clean, text


def _topics(value: Any) -> list[dict]:
    topics: list[dict[str, Any]] = []
    for item in _list_of(value, "topics", "sections", "chapters"):
        if not isinstance(item, dict):
            continue
        begin = parse_seconds(item.get("start"))
        topics.append(
            {
                "title": _text(item.get("title")) or f"Part {len(topics) + 1}",
                "start": 0.0 if begin is None else begin,
                "end": parse_seconds(item.get("end")),
                "summary": _text(item.get("summary")),
            }
        )
    topics.sort(key=lambda topic: topic["start"])
    for index, topic in enumerate(topics):
        if topic["end"] is None or topic["end"] < topic["start"]:
            following = topics[index + 1]["start"] if index + 1 < len(topics) else math.inf
            topic["end"] = following
    return topics


def _frames(value: Any, descriptions: Any) -> list[dict]:
    described = {}
    for item in _list_of(descriptions, "images", "pages", "frames"):
        if isinstance(item, dict) and isinstance(item.get("path"), str):
            described[item["path"]] = _text(item.get("text") or item.get("description"))
    frames = []
    for item in _list_of(value, "frames"):
        if isinstance(item, dict) and isinstance(item.get("path"), str):
            t = parse_seconds(item.get("t"))
            frames.append(
                {"path": item["path"], "t": t or 0.0, "text": described.get(item["path"], "")}
            )
    frames.sort(key=lambda frame: frame["t"])
    return frames


def video_note(
    payload: NotePayload, ctx: ExecContext, folder: Path, source: str
) -> tuple[str, list[dict]]:
    segments, transcript = _segments(payload.transcript)
    topics = _topics(payload.topics)
    frames = _frames(payload.frames, payload.descriptions)
    title = payload.title or (Path(source).stem if source else "Video notes")
    # Each indexed text starts with the video's name in words ("volcanoes-of-iceland"
    # reads "volcanoes of iceland"): a search for the talk by its subject finds it even
    # where the transcript never says it.
    heading = spoken_title(title)
    lines = [f"# {title}", ""]
    if source:
        lines += [f"Source: {source}", ""]
    sections = topics or [{"title": "Keyframes", "start": 0.0, "end": math.inf, "summary": ""}]
    lead, placed = _placed(frames, sections)
    if lead:  # keyframes before the first topic (the title slide at 00:00) open the note
        sections = [{"title": "Start", "start": 0.0, "end": sections[0]["start"],
                     "summary": "", "lead": True}, *sections]  # fmt: skip
        placed = [lead, *placed]
    documents = []
    for topic, inside in zip(sections, placed, strict=True):
        if not topics and not inside:
            continue
        end = "" if math.isinf(topic["end"]) else f" – {hms(topic['end'])}"
        lines += [f"## {topic['title']} ({hms(topic['start'])}{end})", ""]
        if topic["summary"]:
            lines += [topic["summary"], ""]
        for frame in inside:
            image = resolve_data_path(ctx.data_dir, frame["path"])
            relative = Path(os.path.relpath(image, folder.resolve())).as_posix()
            lines += [f"![frame at {hms(frame['t'])}]({_md_link(relative)})", ""]
            caption = f"*{hms(frame['t'])}*"
            lines += [f"{caption} — {frame['text']}" if frame["text"] else caption, ""]
        if topics and not topic.get("lead"):
            spoken = " ".join(
                s["text"]
                for s in segments
                if s["end"] > topic["start"] and s["start"] < topic["end"]
            )
            parts = (heading, topic["title"], topic["summary"], spoken)
            body = "\n\n".join(part for part in parts if part)
            documents.append(
                {
                    "text": _cut(body),
                    "source": source or payload.path,
                    "locator": hms(topic["start"]),
                }
            )
    if segments or transcript:
        lines += ["## Transcript", ""]
        if segments:
            lines += [f"[{hms(s['start'])}] {s['text']}" for s in segments]
        else:
            lines.append(transcript)
        lines.append("")
    if not topics:
        documents = _transcript_documents(segments, transcript, source or payload.path)
        for document in documents:
            document["text"] = _cut(f"{heading}\n\n{document['text']}")
    return "\n".join(lines), documents


def _placed(frames: list[dict], topics: list[dict]) -> tuple[list[dict], list[list[dict]]]:
    """Every keyframe in the note: (those before the first topic, each topic's). A frame
    goes under each topic whose range holds it; one in a gap between topics (or past the
    last one's end) under the nearest topic, the earlier on a tie. One before the first
    topic goes to a leading "Start" section rather than into the first topic: the title
    frame at 00:00 under a heading reading "(00:01:30 – …)" would contradict it."""
    lead: list[dict] = []
    placed: list[list[dict]] = [[] for _ in topics]
    for frame in frames:
        t = frame["t"]
        if t < topics[0]["start"]:
            lead.append(frame)
            continue
        holding = [i for i, topic in enumerate(topics) if topic["start"] <= t < topic["end"]]
        gaps = [max(topic["start"] - t, t - topic["end"], 0.0) for topic in topics]
        for i in holding or [gaps.index(min(gaps))]:
            placed[i].append(frame)
    return lead, placed


def spoken_title(title: str) -> str:
    return " ".join(title.replace("_", " ").replace("-", " ").split())


def _md_link(path: str) -> str:
    """A path as a Markdown link target: spaces and parentheses would end it early."""
    return path.replace(" ", "%20").replace("(", "%28").replace(")", "%29")


def _transcript_documents(segments: list[dict], text: str, source: str) -> list[dict]:
    """Without topics: the transcript in pieces of about DOCUMENT_CHARS."""
    if not segments:
        return [{"text": _cut(text), "source": source, "locator": hms(0)}] if text else []
    documents: list[dict] = []
    piece: list[str] = []
    begin = 0.0
    for segment in segments:
        if not piece:
            begin = segment["start"]
        piece.append(segment["text"])
        if sum(len(p) + 1 for p in piece) >= DOCUMENT_CHARS:
            documents.append(
                {"text": _cut(" ".join(piece)), "source": source, "locator": hms(begin)}
            )
            piece = []
    if piece:
        documents.append({"text": _cut(" ".join(piece)), "source": source, "locator": hms(begin)})
    return documents


# ------------------------------------------------------------------ pages
def pages_note(payload: NotePayload, source: str) -> tuple[str, list[dict]]:
    data = loads_lenient(payload.pages)
    items = _list_of(data, "pages", "images")
    if not items and isinstance(data, str) and data.strip():
        items = [{"text": data}]
    if not items:
        raise bad_input("pages holds no pages", hint="pass a pages or ocr task's output")
    lines = []
    if payload.title:
        lines += [payload.title, ""]
    if source:
        lines += [f"Source: {source}", ""]
    documents = []
    for index, item in enumerate(items, start=1):
        if isinstance(item, dict):
            number = item.get("page") if isinstance(item.get("page"), int) else index
            text = _text(item.get("text"))
        else:
            number, text = index, _text(item)
        lines += [f"--- page {number} ---", text, ""]
        if text:
            body = f"{spoken_title(payload.title)}\n\n{text}" if payload.title else text
            documents.append(
                {"text": _cut(body), "source": source or payload.path, "locator": f"page {number}"}
            )
    return "\n".join(lines), documents


# ------------------------------------------------------------------ csv
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_note(payload: NotePayload) -> str:
    items = _list_of(payload.rows, "items", "rows")
    if not items:
        raise bad_input("rows holds no items", hint="pass a fan-out group's output or a list")
    columns = [_column(column) for column in payload.columns or []]
    headers = [header for header, _ in columns]
    failed = [_item_error(item) for item in items]
    with_error = any(failed) and "error" not in headers
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    # headers are the plan's text: kept from running as a formula as the cells are
    writer.writerow([_cell(h) for h in [*headers, *(["error"] if with_error else [])]])
    for item, error in zip(items, failed, strict=True):
        row = [_cell(_field(item, path)) for _, path in columns]
        if with_error:
            row.append(_cell(error))
        writer.writerow(row)
    return buffer.getvalue()


def _column(column: str | dict[str, str]) -> tuple[str, str]:
    """(header, field path): a path is its own header; ``{header: path}`` names it."""
    if isinstance(column, str):
        return column, column
    [(header, path)] = column.items()  # the schema allows one pair
    return header, path


def _item_error(item: Any) -> str:
    if not isinstance(item, dict):
        return ""
    error = item.get("error")
    if isinstance(error, dict):
        return _text(error.get("message") or error.get("error_type") or error)
    if error:
        return _text(error)
    state = item.get("state")
    if isinstance(state, str) and state.upper() not in ("SUCCEEDED", "SUCCESS", "DONE", "OK"):
        return state
    return ""


def _field(item: Any, path: str) -> Any:
    """A column's value: ``path`` from the row, else from the row's ``output`` (a fan-out
    item's), looking inside a ``text`` that holds JSON (an llm's answer with
    ``format: json``) where a mapping lacks the key, so ``caption`` finds an answer's
    ``{"caption": ...}``."""
    found = _walk(item, path.split("."))
    if found is _MISSING and isinstance(item, dict) and "output" in item:
        found = _walk(item["output"], path.split("."))
    return None if found is _MISSING else found


_MISSING = object()


def _walk(value: Any, parts: list[str]) -> Any:
    for part in parts:
        value = loads_lenient(value)
        if isinstance(value, dict) and part not in value:
            inner = loads_lenient(value.get("text"))
            value = inner if isinstance(inner, dict) else value
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _cell(value: Any) -> str:
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, (int, float)):
        text = str(value)
    elif isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        text = "; ".join(str(v) for v in value)
    else:
        text = json.dumps(value, ensure_ascii=False)
    # A cell a spreadsheet would run as a formula (=, +, -, @) starts with a quote instead,
    # unless it is a plain number: upstream text may come from untrusted pages.
    if text.startswith(_FORMULA_START) and not _is_number(text):
        text = "'" + text
    return text


# A plain decimal number, as a spreadsheet reads one: Python's float() also takes "-inf",
# "-nan", "-1_000" and spaces, which a spreadsheet would run as a formula.
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def _is_number(text: str) -> bool:
    return _NUMBER.fullmatch(text) is not None
