"""The training export's reader (issue 40 §4): the training-sample log read a page at a
time, oldest line first, each line either a chat sample a person can fine-tune with or
the reason it was left out.

The log (``BRAIN_TRAINING_LOG``, next to the store by default) is what
``reactions.TrainingSample`` puts in the outbox and ``events.EventLog`` writes after the
commit: one JSON line per finished or failed llm attempt, with ``timestamp`` (the task's
``finished_at``), ``plan``, ``task_id`` (the task's key), ``model``, ``prompt`` (the
rendered prompt, or a ``messages`` payload as its JSON text), ``response`` (the output's
``text``), ``error``, ``outcome`` (``succeeded`` / ``failed``), ``metrics`` and, for a
``sensitive`` task, ``redacted: "sensitive"`` with no texts. Rotated files are
``<log>.1`` (newest) … ``<log>.N``; the reader goes oldest first and the cursor names a
file by its inode, which a rotation's rename keeps.

The line says nothing of trust, so the task's row does: ``trusted`` is 0 for a task the
plan declared untrusted or whose templates read a tainted output at its claim
(``leases.claim``), ``tainted_output`` is 1 when an untrusted rig answered it
(``leases.complete``). A sample whose task the store no longer holds (retention deleted
its plan) has no known provenance and is left out too.

Quality (``--min-quality``) goes by what the store records of the task, since the line
holds no verdict: ``any`` takes every sample left; ``first-try`` only a task that
succeeded with no failed model attempt before it (``task_errors`` 0: no retry after a
wrong or refused answer, no review of a first failure by the brain's model, no
escalation on failure, which all start from a failed attempt). Infrastructure retries (a
compute service that did not answer) do not count against it: the model never answered.
No reviewer verdict of a success is recorded anywhere (``escalation/review.py`` judges
first failures only), so there is no level above ``first-try``.

Every text is redacted again with the brain's own ``events.redact`` and its known
secrets: a line an older brain wrote, before a pattern existed, leaks nothing.
Duplicates are the caller's to drop (the CLI: one line per distinct ``messages``), since
they span pages.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import stat
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from airig.brain.settings import BrainSettings
from airig.brain.store import dialect, states
from airig.brain.store.events import redact, rotated_files
from airig.brain.store.payloads import rendered_payload
from airig.common.task_types import TASK_TYPES

# Why a line is left out, in the order they are checked (the first that holds counts).
UNREADABLE = "unreadable"  # not JSON, NUL, torn, bad UTF-8, past MAX_LINE_BYTES, no fields
FAILED = "failed"  # the attempt failed
BEFORE_SINCE = "before_since"  # older than --since
SENSITIVE = "sensitive"  # a sensitive task: its texts were never logged
TASK_GONE = "task_gone"  # the store no longer holds its task: trust unknown
OTHER_TYPE = "other_type"  # a task of another type than --type
UNTRUSTED_INPUT = "untrusted_input"  # untrusted plan input, or it read an untrusted output
UNTRUSTED_RIG = "untrusted_rig"  # an untrusted rig's worker answered it
INCOMPLETE = "incomplete"  # the log lacks what the model saw (images, untrusted_input)
BELOW_QUALITY = "below_quality"  # under --min-quality
REASONS = (
    UNREADABLE, FAILED, BEFORE_SINCE, SENSITIVE, TASK_GONE, OTHER_TYPE, UNTRUSTED_INPUT,
    UNTRUSTED_RIG, INCOMPLETE, BELOW_QUALITY,
)  # fmt: skip

QUALITIES = ("any", "first-try")  # lowest first
# The types whose attempts the brain logs (``brain_hooks``: ``training_sample``).
TYPES = tuple(name for name, spec in TASK_TYPES.items() if "training_sample" in spec.brain_hooks)

# The kit never writes a longer line: a prompt is at most 200,000 characters
# (task_schemas.MAX_PROMPT_CHARS), 1.2 MB as JSON with every character escaped; a longer
# one is someone else's file or damage, skipped without being held whole.
MAX_LINE_BYTES = 4 * 1024 * 1024
SKIP_CHUNK = 64 * 1024
# What one page reads at most: lines and bytes (the answer's size follows from them).
MAX_PAGE_LINES = 1000
PAGE_BYTES = 4 * 1024 * 1024
HEAD_BYTES = 64  # of a file, hashed into the cursor (_head)
# inode:offset:head:crc, head 0..HEAD_BYTES: the route's pattern, so a cursor it lets
# through names a file or none (then the oldest left), never a refusal of its own;
# an offset below 2**63, which a seek takes
CURSOR = re.compile(r"^(\d{1,20}):(\d{1,18}):([0-9]|[1-5][0-9]|6[0-4]):(\d{1,10})$")
READ_TRIES = 3
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Query:
    since: float | None = None
    task_type: str = "llm"
    min_quality: str = "any"
    cursor: str | None = None
    limit: int = MAX_PAGE_LINES


@dataclass
class Page:
    samples: list[dict[str, Any]] = field(default_factory=list)
    excluded: Counter[str] = field(default_factory=Counter)
    next: str | None = None  # None: the newest file's end was reached


class BadCursor(ValueError):
    pass


class LogBusy(OSError):
    pass


def files_of(log: Path) -> list[tuple[Path, int]]:
    """The log's plain files with their inodes, oldest first (``<log>.N`` … ``.1``, the log)."""
    found = []
    for path in [*reversed(rotated_files(log)), log]:
        try:
            info = path.stat()
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            found.append((path, info.st_ino))
    return found


def parse_cursor(cursor: str | None) -> tuple[int, int, int, int] | None:
    """(inode, offset, head bytes, their CRC-32) of a cursor ``read_page`` gave."""
    if cursor is None:
        return None
    match = CURSOR.match(cursor)
    if match is None:
        raise BadCursor(f"{cursor!r} is not a cursor this brain gave")
    inode, offset, head, crc = (int(part) for part in match.groups())
    return inode, offset, head, crc


def _head(handle: BinaryIO, size: int) -> tuple[int, int]:
    """The file's first bytes (up to ``HEAD_BYTES``) and their CRC-32: with the inode,
    which file a cursor names. An inode alone could be a new file's that reused it after
    the cursor's file expired; its first bytes differ (another line, another time)."""
    head = min(size, HEAD_BYTES)
    handle.seek(0)
    return head, zlib.crc32(handle.read(head))


def _cursor(handle: BinaryIO, inode: int, offset: int) -> str:
    head, crc = _head(handle, os.fstat(handle.fileno()).st_size)
    return f"{inode}:{offset}:{head}:{crc}"


def _start(files: list[tuple[Path, int]], cursor: str | None) -> tuple[int, int]:
    """(index of the file, offset) a page starts at: the cursor's file when it is still
    there, else the oldest file left (the cursor's expired, and every older one with it)."""
    position = parse_cursor(cursor)
    if position is None:
        return 0, 0
    inode, offset, head, crc = position
    for index, (path, found) in enumerate(files):
        if found != inode:
            continue
        try:
            with path.open("rb") as handle:
                if os.fstat(handle.fileno()).st_ino == inode and _head(handle, head) == (head, crc):
                    return index, offset
        except OSError:
            pass
    return 0, 0


def read_page(
    conn: sqlite3.Connection, settings: BrainSettings, query: Query,
    known_secrets: tuple[str, ...] = (),
) -> Page:  # fmt: skip
    """One page of the export from ``query.cursor`` (None: the oldest line). Reads at most
    ``query.limit`` lines and about ``PAGE_BYTES``. A rotation under the read (a file
    renamed between the listing and its opening) reads the page again from a new
    listing; ``LogBusy`` if it keeps happening."""
    for _ in range(READ_TRIES):
        read = _read_lines(settings.training_file, query)
        if read is not None:
            lines, following = read
            page = Page(next=following)
            _classify(conn, settings, query, known_secrets, lines, page)
            return page
    raise LogBusy("the training-sample log rotated under every read; ask again")


def _read_lines(log: Path, query: Query) -> tuple[list[bytearray | None], str | None] | None:
    """The page's lines and the next cursor (None: the newest file's end); None when a
    file was renamed under the read."""
    files = files_of(log)
    start, offset = _start(files, query.cursor)
    lines: list[bytearray | None] = []
    read = 0
    for index in range(start, len(files)):
        path, inode = files[index]
        try:
            handle = path.open("rb")
        except OSError:
            return None  # rotated or expired since the listing
        with handle:
            if os.fstat(handle.fileno()).st_ino != inode:
                return None
            # past the end (a file cut since, or a made-up offset): at its end
            at = min(offset, os.fstat(handle.fileno()).st_size) if index == start else 0
            handle.seek(at)
            for raw, size in _lines(handle):
                lines.append(raw)
                at += size
                read += size
                if len(lines) >= query.limit or read >= PAGE_BYTES:
                    more = at < os.fstat(handle.fileno()).st_size or index + 1 < len(files)
                    return lines, (_cursor(handle, inode, at) if more else None)
    return lines, None


def _lines(handle: BinaryIO) -> Iterator[tuple[bytearray | None, int]]:
    """(line, bytes it took) for each line; None for one past ``MAX_LINE_BYTES``, whose
    rest is skipped a chunk at a time. A line grows in one buffer a chunk at a time (no
    joined copy beside its pieces), so a line past the bound costs about the bound."""
    while True:
        line = bytearray()
        while len(line) <= MAX_LINE_BYTES:
            chunk = handle.readline(SKIP_CHUNK)
            line += chunk
            if not chunk or chunk.endswith(b"\n"):
                break
        if not line:
            return
        if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
            yield line, len(line)
            continue
        size = len(line)
        del line
        while True:
            chunk = handle.readline(SKIP_CHUNK)
            size += len(chunk)
            if not chunk or chunk.endswith(b"\n"):
                break
        yield None, size


def _parsed(raw: bytearray | None) -> dict[str, Any] | None:
    """A sample line's object, or None: too long, not UTF-8, not JSON (a NUL too), not an
    object, or without the fields every line has."""
    if raw is None:
        return None
    try:  # a raw NUL is a control character JSON refuses, as it does bad UTF-8
        value = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(value, dict):
        return None
    if not all(isinstance(value.get(key), str) for key in ("plan", "task_id", "outcome")):
        return None
    return value


def _classify(
    conn: sqlite3.Connection, settings: BrainSettings, query: Query,
    known_secrets: tuple[str, ...], raws: list[bytearray | None], page: Page,
) -> None:  # fmt: skip
    kept: list[dict[str, Any]] = []
    for raw in raws:
        sample = _parsed(raw)
        reason = _line_reason(sample, query)
        if reason is not None:
            page.excluded[reason] += 1
        else:
            assert sample is not None
            kept.append(sample)
    rows = task_rows(conn, {(s["plan"], s["task_id"]) for s in kept})
    for sample in kept:
        row = rows.get((sample["plan"], sample["task_id"]))
        reason = _task_reason(row, query)
        exported = None
        if reason is None:
            assert row is not None
            exported = _chat(conn, settings, sample, row, known_secrets)
            reason = INCOMPLETE if exported is None else None
        if reason is not None:
            page.excluded[reason] += 1
        else:
            assert exported is not None
            page.samples.append(exported)


def _line_reason(sample: dict[str, Any] | None, query: Query) -> str | None:
    """What the line alone says against it."""
    if sample is None:
        return UNREADABLE
    if sample["outcome"] != "succeeded":
        return FAILED
    stamp = sample.get("timestamp")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
        return UNREADABLE  # a success always has its finished_at
    if query.since is not None and stamp < query.since:
        return BEFORE_SINCE
    if sample.get("redacted") == "sensitive" or sample.get("sensitive") is True:
        return SENSITIVE
    if not all(_encodable(sample.get(key)) for key in ("prompt", "response")):
        return UNREADABLE  # a lone surrogate: no UTF-8 answer could carry it
    return None


def _encodable(text: Any) -> bool:
    if not isinstance(text, str):
        return True  # judged as incomplete later
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _task_reason(row: sqlite3.Row | None, query: Query) -> str | None:
    """What the task's row says against it."""
    if row is None:
        return TASK_GONE
    if row["sensitive"]:
        return SENSITIVE
    if row["type"] != query.task_type:
        return OTHER_TYPE
    if not row["trusted"]:
        return UNTRUSTED_INPUT
    if row["tainted_output"]:
        return UNTRUSTED_RIG
    if query.min_quality == "first-try" and row["task_errors"]:
        return BELOW_QUALITY
    return None


_COLUMNS = """SELECT t.id, t.plan_id, t.key, t.type, t.model, t.payload_json, t.trusted,
                  t.sensitive, t.tainted_output, t.task_errors"""
_TASK_ROWS = f"""{_COLUMNS}
           FROM json_each(?) j JOIN tasks t
             ON t.plan_id = json_extract(j.value, '$[0]')
            AND t.key = json_extract(j.value, '$[1]')"""
# PostgreSQL: the pairs from jsonb (its json_each reads objects, not arrays)
_TASK_ROWS_PG = f"""{_COLUMNS}
           FROM jsonb_array_elements((?)::jsonb) AS j(value) JOIN tasks t
             ON t.plan_id = j.value ->> 0 AND t.key = j.value ->> 1"""


def task_rows(
    conn: sqlite3.Connection, keys: set[tuple[str, str]]
) -> dict[tuple[str, str], sqlite3.Row]:
    """The rows of these (plan, key) pairs, one query (the (plan_id, key) unique index);
    the columns the export reads, not the outputs."""
    # A name no task can have (a NUL, a lone surrogate: a log line's JSON may escape
    # either) is not asked for: it has no row, and PostgreSQL's jsonb refuses the whole
    # parameter for it
    held = sorted(pair for pair in keys if all(dialect.text_holdable(name) for name in pair))
    if not held:
        return {}
    rows = conn.execute(
        _TASK_ROWS_PG if dialect.is_pg(conn) else _TASK_ROWS, (json.dumps(held),)
    ).fetchall()
    return {(row["plan_id"], row["key"]): row for row in rows}


def _chat(
    conn: sqlite3.Connection, settings: BrainSettings, sample: dict[str, Any],
    row: sqlite3.Row, known_secrets: tuple[str, ...],
) -> dict[str, Any] | None:  # fmt: skip
    """The sample as one chat of the OpenAI fine-tuning format (``messages``: an optional
    system turn, the user's, the assistant's answer), the conversational format TRL's
    SFTTrainer takes as it is; None when the log lacks what the model saw."""
    prompt, response = sample.get("prompt"), sample.get("response")
    if not isinstance(prompt, str) or not isinstance(response, str) or not response.strip():
        return None
    payload = json.loads(row["payload_json"])
    if not isinstance(payload, dict) or payload.get("images") or payload.get("untrusted_input"):
        return None  # the images or the wrapped data are not in the log
    system = payload.get("system")
    if isinstance(system, str) and "{{" in system:  # filled at the claim: fill it again
        task = states.get_task(conn, row["id"])
        try:
            system = rendered_payload(conn, task, settings).get("system") if task else None
        except (KeyError, OSError, ValueError):
            return None
    turns: list[dict[str, str]] = []
    if isinstance(system, str) and system.strip():
        turns.append({"role": "system", "content": system})
    if "messages" in payload:  # the log holds the messages as their JSON text
        try:
            given = json.loads(prompt)
        except (ValueError, RecursionError):
            return None
        if not isinstance(given, list):
            return None
        for message in given:
            if not isinstance(message, dict) or message.get("role") not in ROLES:
                return None  # a tool turn: not a plain chat
            if not isinstance(message.get("content"), str):
                return None
            turns.append({"role": message["role"], "content": message["content"]})
    elif prompt.strip():
        turns.append({"role": "user", "content": prompt})
    if not any(turn["role"] == "user" for turn in turns):
        return None
    turns.append({"role": "assistant", "content": response})
    if not all(_encodable(turn["content"]) for turn in turns):
        return None  # a lone surrogate escaped inside the messages' JSON text
    for turn in turns:
        turn["content"] = redact(turn["content"], known_secrets)
    model = sample.get("model") or row["model"]
    return {
        "messages": turns,
        "plan": sample["plan"],
        "task": sample["task_id"],
        "model": model if isinstance(model, str) and _encodable(model) else None,
        "timestamp": sample["timestamp"],
    }
