"""State-change events and the training-sample log.

Inside a transaction the state machine records events into the ``events`` table and an
``Outbox``; only after the commit does ``EventLog.publish`` write them as JSON lines
(stdout and the events file), so a rolled-back change never appears in a log.

The table is the record; the events file is its copy, always a prefix of the table in id
order with no holes. The file's writer knows the id of the last line it wrote (and keeps
it beside the file, ``events.jsonl.mark``, with the file's size after it). A line it
could not write (a full disk, ``BRAIN_EVENTS_LOG=/dev/full``) is owed, not lost: the next
write, the reaper's pass or a restart appends the table's rows after that id. After a
crash between the COMMIT and the file write, the restart cuts what the file holds past
its mark (a torn last line too) and writes the table's rows from there.
Event lines follow the seed's schema (timestamp, event_type, task_id, worker_id, gpu_id,
duration_ms, tokens_generated, error) plus plan, attempt, reason, from/to states.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from airig.brain.store import dialect
from airig.common.jsonlog import utc_iso

log = logging.getLogger("airig.brain.store.events")

# Token-like strings: key=value secrets, bearer headers, well-known key prefixes, and
# long opaque runs of hex / base64 that are far likelier to be keys than words.
_SECRET_PATTERNS = [
    re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(
        r"(?i)\b(api[_-]?key|token|secret|password|passwd|pwd)(\s*[:=]\s*)['\"]?[^\s'\",;]{4,}"
    ),
    re.compile(r"\b(sk|pk|ghp|gho|ghs|xox[abp]|hf|AKIA)[-_]?[A-Za-z0-9]{16,}\b"),
    re.compile(r"\b[A-Fa-f0-9]{32,}\b"),
    re.compile(r"\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{32,}\b"),
]
REDACTED = "[REDACTED]"


def redact(text: str, known_secrets: tuple[str, ...] = ()) -> str:
    """Text with secrets replaced by [REDACTED]; known secrets are removed verbatim first."""
    for secret in known_secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    text = _SECRET_PATTERNS[0].sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _SECRET_PATTERNS[1].sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    for pattern in _SECRET_PATTERNS[2:]:
        text = pattern.sub(REDACTED, text)
    return text


@dataclass
class Outbox:
    """What a transaction wants published once it has committed."""

    # each event as its JSON line: encoded once, stored in SQLite and published as is
    events: list[str] = field(default_factory=list)
    # each event's id in the events table, beside its line: the file goes by them
    event_ids: list[int] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    # (metric name, value, labels) applied to Prometheus after the commit.
    metrics: list[tuple[str, float, dict[str, str]]] = field(default_factory=list)
    work_ready: bool = False
    # Lookups that cannot change within the transaction (a worker's GPU, "retries
    # promoted"), so a batch of reports does not repeat them per event.
    memo: dict[Any, Any] = field(default_factory=dict)

    def metric(self, name: str, value: float = 1.0, **labels: str) -> None:
        self.metrics.append((name, value, labels))


def record(
    conn: sqlite3.Connection,
    outbox: Outbox,
    event_type: str,
    task: sqlite3.Row | dict,
    now: float,
    **extra: Any,
) -> None:
    """Store one task event in the current transaction and queue it for publishing."""
    line = _line(conn, outbox, event_type, task, now, extra)
    store_line(conn, outbox, now, event_type, task["plan_id"], task["id"], line)


def store_line(
    conn: sqlite3.Connection, outbox: Outbox, now: float, event_type: str,
    plan_id: str | None, task_id: int | None, line: str,
) -> None:  # fmt: skip
    """One event's JSON line into the table and the outbox, with its id."""
    event_id = conn.execute(
        "INSERT INTO events (ts, event_type, plan_id, task_id, body_json) VALUES (?,?,?,?,?)"
        " RETURNING id",
        (now, event_type, plan_id, task_id, line),
    ).fetchone()[0]
    outbox.events.append(line)
    outbox.event_ids.append(int(event_id))


# The body ``record`` gives a task_submitted event, built by SQLite for a whole plan.
_SUBMITTED = """
INSERT INTO events (ts, event_type, plan_id, task_id, body_json)
SELECT ?1, 'task_submitted', plan_id, id, json_object(
    'timestamp', ?2, 'event_type', 'task_submitted', 'plan', plan_id, 'task_id', key,
    'task_uid', id, 'attempt', attempt, 'class', task_class, 'model', model,
    'worker_id', NULL, 'gpu_id', NULL, 'duration_ms', NULL, 'tokens_generated', NULL,
    'error', NULL, 'reason', NULL, 'to', state)
FROM tasks WHERE plan_id = ?3 ORDER BY id
"""
# PostgreSQL: the same body (its keys in the same order: json, not jsonb), the lines and
# their ids given back by the INSERT itself.
_SUBMITTED_PG = """
INSERT INTO events (ts, event_type, plan_id, task_id, body_json)
SELECT ?1, 'task_submitted', plan_id, id, json_build_object(
    'timestamp', (?2)::text, 'event_type', 'task_submitted', 'plan', plan_id, 'task_id', key,
    'task_uid', id, 'attempt', attempt, 'class', task_class, 'model', model,
    'worker_id', NULL, 'gpu_id', NULL, 'duration_ms', NULL, 'tokens_generated', NULL,
    'error', NULL, 'reason', NULL, 'to', state)::text
FROM tasks WHERE plan_id = ?3 ORDER BY id
RETURNING id, body_json
"""


def record_submitted(conn: sqlite3.Connection, outbox: Outbox, plan_id: str, now: float) -> None:
    """``record(..., "task_submitted", to=state)`` for every task of a new plan, in two
    statements: the events built and stored by SQLite, their lines read back as one
    value. A plan of 500 tasks stored its events one INSERT at a time, inside the
    transaction every claim waits behind (benchmarks/fleet.py)."""
    if dialect.is_pg(conn):
        rows = conn.execute(_SUBMITTED_PG, (now, utc_iso(now), plan_id)).fetchall()
        rows.sort(key=lambda row: int(row[0]))
        outbox.events.extend(row[1] for row in rows)
        outbox.event_ids.extend(int(row[0]) for row in rows)
        return
    conn.execute(_SUBMITTED, (now, utc_iso(now), plan_id))
    joined, ids = conn.execute(
        "SELECT group_concat(body_json, char(10)), group_concat(id) FROM"
        " (SELECT id, body_json FROM events WHERE plan_id = ? ORDER BY id)",
        (plan_id,),
    ).fetchone()
    if joined:
        outbox.events.extend(joined.split("\n"))
        outbox.event_ids.extend(int(n) for n in ids.split(","))


def rows_after(conn: sqlite3.Connection, after: int, limit: int) -> list[tuple[int, str]]:
    """The events after id ``after``, oldest first: (id, JSON line)."""
    rows = conn.execute(
        "SELECT id, body_json FROM events WHERE id > ? ORDER BY id LIMIT ?", (after, limit)
    )
    return [(row[0], row[1]) for row in rows]


def last_id(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0])


def _line(
    conn: sqlite3.Connection,
    outbox: Outbox,
    event_type: str,
    task: sqlite3.Row | dict,
    now: float,
    extra: dict[str, Any],
) -> str:
    body: dict[str, Any] = {
        "timestamp": utc_iso(now),
        "event_type": event_type,
        "plan": task["plan_id"],
        "task_id": task["key"],
        "task_uid": task["id"],
        "attempt": task["attempt"],
        "class": task["task_class"],
        "model": task["model"],
        "worker_id": None,
        "gpu_id": None,
        "duration_ms": None,
        "tokens_generated": None,
        "error": None,
        "reason": None,
    }
    body.update(extra)
    if body["worker_id"] and body["gpu_id"] is None:
        key = ("gpu_of", body["worker_id"])
        if key not in outbox.memo:
            gpu = conn.execute("SELECT gpu_index FROM workers WHERE id = ?", (body["worker_id"],))
            found = gpu.fetchone()
            outbox.memo[key] = found["gpu_index"] if found else None
        body["gpu_id"] = outbox.memo[key]
    return json.dumps(body, default=str)


# Log rotation (AIRIG_LOG_MAX_MB, AIRIG_LOG_KEEP, and the retention's age). Not
# logging.handlers: RotatingFileHandler rotates by size only and TimedRotatingFileHandler
# by time only, both want a LogRecord per line on the commit path, and either may split
# one commit's batch of lines across two files. These few functions keep its file names
# (``events.jsonl.1`` is the newest rotated file), so tools that know those know these.
def rotated(path: Path, index: int) -> Path:
    return path.with_name(f"{path.name}.{index}")


def rotated_files(path: Path) -> list[Path]:
    """The rotated files of ``path`` that exist, newest first."""
    found = []
    for candidate in path.parent.glob(f"{path.name}.*"):
        suffix = candidate.name[len(path.name) + 1 :]
        if suffix.isdigit():
            found.append((int(suffix), candidate))
    return [file for _, file in sorted(found)]


def rotate(path: Path, keep: int, stamp: float) -> None:
    """``path`` becomes ``path.1``, ``path.1`` becomes ``path.2``...; what would pass
    ``path.<keep>`` is deleted (``keep`` 0: ``path`` itself). The rotated file's mtime is
    set to ``stamp``, the time of its newest line, which ``drop_older`` goes by."""
    for old in rotated_files(path):
        if int(old.name.rsplit(".", 1)[1]) >= keep:
            old.unlink(missing_ok=True)
    if keep <= 0:
        path.unlink(missing_ok=True)
        return
    for index in range(keep - 1, 0, -1):
        if rotated(path, index).exists():
            os.replace(rotated(path, index), rotated(path, index + 1))
    if path.exists():
        os.replace(path, rotated(path, 1))
        os.utime(rotated(path, 1), (stamp, stamp))


def drop_older(path: Path, cutoff: float) -> int:
    """Delete rotated files whose newest line is older than ``cutoff``; bytes freed."""
    freed = 0
    for old in rotated_files(path):
        info = old.stat()
        if info.st_mtime < cutoff:
            old.unlink(missing_ok=True)
            freed += info.st_size
    return freed


def _plain(path: Path) -> bool:
    """A regular file, or none yet (it will be one): not a device or a pipe."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _append_at(path: Path, text: str, offset: int) -> int:
    """Append ``text`` to ``path`` where the last whole write ended (``offset``): a torn
    line a failed write left is cut first, and a write that fails is cut back. The
    file's size after it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size > offset:
            os.ftruncate(fd, offset)
        start = min(size, offset)
        encoded = text.encode("utf-8")
        data = memoryview(encoded)
        try:
            while data:
                data = data[os.write(fd, data) :]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
        return start + len(encoded)
    finally:
        os.close(fd)


def first_stamp(path: Path) -> float | None:
    """The time of a log's first line (events: ISO ``timestamp``, samples: epoch)."""
    try:
        with path.open("r", encoding="utf-8") as handle:
            stamp = json.loads(handle.readline()).get("timestamp")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(stamp, int | float):
        return float(stamp)
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# The events file's catch-up from the table: rows per read, reads per call (a long
# outage is written back over several writes, never in one that holds the others up),
# and how long after a failed write the next try waits.
CATCH_UP_ROWS = 2000
CATCH_UP_READS = 10
RETRY_S = 5.0
MARK_BYTES = 64  # the mark is rewritten in place at this size: a write that never grows it
# PostgreSQL: how long the file waits for an event id a transaction still holds (its
# commit), before it counts as one a rolled-back write used (EventLog's gap_wait_s), and
# how often it reads the table again meanwhile (not at every commit: each read is up to
# CATCH_UP_ROWS rows, and commits come hundreds a second).
GAP_WAIT_S = 5.0
GAP_RETRY_S = 0.25

Reader = Callable[[], AbstractContextManager[sqlite3.Connection]]


class EventLog:
    """Writes committed events and training samples as JSON lines, each log rotated when
    a batch would take it past ``max_bytes`` (0: never), ``keep`` rotated files kept.

    With ``read`` (the store's read connections) the events file follows the events
    table: a prefix of it with no holes, caught up after a failed write or a crash (the
    module's docstring). Without it (tests of rotation) the outbox's lines are appended.
    A log that cannot be written never fails the write whose lines it carries."""

    def __init__(
        self, events_file: Path, training_file: Path, known_secrets: tuple[str, ...] = (),
        max_bytes: int = 0, keep: int = 5, clock: Callable[[], float] = time.time,
        read: Reader | None = None, retry_s: float = RETRY_S, gap_wait_s: float = 0.0,
    ) -> None:  # fmt: skip
        self.events_file = events_file
        self.training_file = training_file
        self.mark_file = events_file.with_name(events_file.name + ".mark")
        self.known_secrets = known_secrets
        self.max_bytes = max_bytes
        self.keep = keep
        self.clock = clock  # the benchmark's fake clock stamps rotated files
        self._lock = threading.Lock()
        self._read = read
        self._retry_s = retry_s
        # PostgreSQL, brains writing side by side: ids are handed out at the INSERT and
        # committed in any order, so the table may show 101 while 100's transaction is
        # still open. The file waits for such a hole up to this long (then it is an id a
        # rolled-back write used: passed over). 0: SQLite's one writer, no holes to wait on.
        self._gap_wait_s = gap_wait_s
        self._gap: tuple[int, float] | None = None  # (the missing id, first seen missing)
        self._cursor = 0  # the id of the last event the file holds
        self._offset: int | None = None  # the file's size after it; None: not a plain file
        self._owed = False  # committed events the file lacks, to write from the table
        self._retry_at = 0.0  # time.monotonic() of the next try after a failed write
        self._failing: set[Path] = set()  # logs whose last write failed (said once)
        self._mark_fd: int | None = None
        events_file.parent.mkdir(parents=True, exist_ok=True)
        training_file.parent.mkdir(parents=True, exist_ok=True)
        if read is not None:
            self.resume()

    # ---- the events file, from the table ------------------------------------------------
    def resume(self) -> None:
        """At start: cut what the file holds past its mark (lines a crash left unmarked,
        a torn one), then write the table's rows after the mark. No mark (a new store, an
        older brain's file) or a mark past the table's end (a store restored from an
        older backup): the file goes on from the table's newest event."""
        assert self._read is not None
        with self._lock:
            with self._read() as conn:
                newest = last_id(conn)
            self._cursor, self._offset = newest, None
            if _plain(self.events_file):
                size = _size(self.events_file)
                mark = self._load_mark()
                if mark is not None and mark[0] <= newest:
                    self._cursor, offset = mark
                    self._offset = min(size, offset)  # smaller: the file was cut since
                    if size > offset:
                        try:
                            os.truncate(self.events_file, offset)
                        except OSError as exc:
                            self._offset = size  # kept as it is: at worst lines twice
                            log.warning("cannot cut %s back to its mark: %s", self.events_file, exc)
                else:
                    self._offset = size
                self._save_mark()
            self._owed = self._cursor < newest
            if self._owed:
                self._catch_up()

    def catch_up(self) -> None:
        """Write what the file owes the table now, without waiting for the retry."""
        if self._read is None:
            return
        with self._lock:
            if self._owed:
                self._catch_up()

    @property
    def owed(self) -> bool:
        """The events file lacks committed events (a write failed; it catches up)."""
        return self._owed

    def _to_file(self, outbox: Outbox) -> None:
        ids, lines = outbox.event_ids, outbox.events
        if (
            not self._owed and lines and len(ids) == len(lines)
            and ids[0] == self._cursor + 1 and ids[-1] - ids[0] == len(ids) - 1
        ):  # fmt: skip
            # The common case: these rows follow the file's last line.
            self._write_events("".join(line + "\n" for line in lines), ids[-1])
            return
        if not self._owed and (not lines or (ids and ids[-1] <= self._cursor)):
            return  # nothing new for the file (a catch-up already wrote these)
        if self._owed and time.monotonic() < self._retry_at:
            return  # the table keeps them; the next try writes them
        # Out of order (two commits published the other way round), or owed: the table
        # says what follows the file's last line.
        self._catch_up()

    def _catch_up(self) -> None:
        assert self._read is not None
        for _ in range(CATCH_UP_READS):
            try:
                with self._read() as conn:
                    rows = rows_after(conn, self._cursor, CATCH_UP_ROWS)
            except sqlite3.Error as exc:
                self._fell_behind(exc)
                return
            if not rows:
                if self._owed:
                    log.info("the events log %s has caught up with the store", self.events_file)
                self._owed = False
                return
            whole = self._before_hole(rows)
            if whole:
                text = "".join(line + "\n" for _, line in whole)
                if not self._write_events(text, whole[-1][0]):
                    return
            if len(whole) < len(rows):  # a hole: the rest after its commit (or its wait)
                self._owed, self._retry_at = True, time.monotonic() + GAP_RETRY_S
                return
        self._owed, self._retry_at = True, 0.0  # more to come: the next write goes on

    def _before_hole(self, rows: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """The rows up to the first missing id (``gap_wait_s``), or all of them once that
        id has been missing for ``gap_wait_s``."""
        if not self._gap_wait_s:
            return rows
        expected = self._cursor + 1
        for index, (event_id, _) in enumerate(rows):
            if event_id != expected:
                now = time.monotonic()
                if self._gap is None or self._gap[0] != expected:
                    self._gap = (expected, now)
                if now - self._gap[1] < self._gap_wait_s:
                    return rows[:index]
                log.info("event ids %d-%d never committed: passed over", expected, event_id - 1)
                self._gap = None
                expected = event_id  # and the rows after it, up to the next hole
            expected += 1
        return rows

    def _write_events(self, text: str, last: int) -> bool:
        path = self.events_file
        try:
            if self._offset is None:
                with path.open("a", encoding="utf-8") as handle:  # a device or a pipe
                    handle.write(text)
            else:
                if self.max_bytes and self._offset and self._offset + len(text) > self.max_bytes:
                    rotate(path, self.keep, self.clock())
                    self._offset = 0
                    self._save_mark()
                self._offset = _append_at(path, text, self._offset)
        except OSError as exc:
            self._fell_behind(exc)
            return False
        self._cursor = last
        self._save_mark()
        self._failing.discard(path)
        return True

    def _fell_behind(self, exc: BaseException) -> None:
        if not self._owed:
            log.warning(
                "the events log %s cannot be written (%s): its lines stay in the store's "
                "events table and are written once it can be", self.events_file, exc,
            )  # fmt: skip
        self._owed = True
        self._retry_at = time.monotonic() + self._retry_s

    def _load_mark(self) -> tuple[int, int] | None:
        try:
            mark = json.loads(self.mark_file.read_text(encoding="utf-8"))
            event_id, offset = mark["id"], mark["offset"]
        except (OSError, ValueError, TypeError, KeyError):
            return None
        if not all(type(n) is int and n >= 0 for n in (event_id, offset)):
            return None
        return event_id, offset

    def _save_mark(self) -> None:
        """The last id the file holds and its size after it, rewritten in place (no new
        block: it is written on a full disk too). Lost, the file is cut back to an older
        mark at start and written again from the table: the same lines."""
        if self._offset is None:
            return
        record = json.dumps({"id": self._cursor, "offset": self._offset})
        try:
            if self._mark_fd is None:
                self._mark_fd = os.open(self.mark_file, os.O_WRONLY | os.O_CREAT, 0o644)
            os.pwrite(self._mark_fd, record.ljust(MARK_BYTES - 1).encode() + b"\n", 0)
        except OSError:
            if self._mark_fd is not None:
                os.close(self._mark_fd)
                self._mark_fd = None

    # ---- what every log shares ----------------------------------------------------------
    def _append(self, path: Path, text: str) -> None:
        """The outbox's lines as they are (training samples; events without a table);
        a write that fails is dropped with one warning until one succeeds again."""
        try:
            if self.max_bytes and _plain(path):
                size = _size(path)
                # Lines are json.dumps output, ASCII: characters are bytes.
                if size and size + len(text) > self.max_bytes:
                    rotate(path, self.keep, self.clock())
            with path.open("a", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            if path not in self._failing:
                log.warning("cannot write %s (%s): these lines are lost", path, exc)
            self._failing.add(path)
            return
        self._failing.discard(path)

    def publish(self, outbox: Outbox) -> None:
        """A committed transaction's lines out; never raises (the write holds)."""
        with self._lock:
            if outbox.events:
                lines = "".join(line + "\n" for line in outbox.events)
                try:
                    sys.stdout.write(lines)
                    sys.stdout.flush()
                except (OSError, ValueError):
                    pass  # the container's log: the events file and table keep them
                if self._read is None:
                    self._append(self.events_file, lines)
            if self._read is not None:
                self._to_file(outbox)
            if outbox.samples:
                self._append(self.training_file, "".join(
                    json.dumps(self.scrub(sample), default=str) + "\n"
                    for sample in outbox.samples
                ))  # fmt: skip

    def expire(self, cutoff: float, now: float) -> int:
        """Rotate a log whose first line is older than ``cutoff``, then delete rotated
        files older than it; the bytes deleted. A log that is no plain file (a device, a
        pipe) is left alone."""
        freed = 0
        with self._lock:
            for path in (self.events_file, self.training_file):
                if not _plain(path):
                    continue
                first = first_stamp(path)
                if first is not None and first < cutoff:
                    rotate(path, self.keep, now)
                    if path == self.events_file and self._offset is not None:
                        self._offset = 0
                        self._save_mark()
                freed += drop_older(path, cutoff)
        return freed

    def sizes(self) -> dict[str, int]:
        """Bytes of each log with its rotated files."""
        with self._lock:
            return {
                name: sum(f.stat().st_size for f in (path, *rotated_files(path)) if f.exists())
                for name, path in (("events", self.events_file), ("training", self.training_file))
            }

    def scrub(self, sample: dict[str, Any]) -> dict[str, Any]:
        """Redact secrets; drop the texts of a sensitive task entirely."""
        clean = dict(sample)
        if clean.pop("sensitive", False):
            clean["prompt"] = clean["response"] = None
            clean["redacted"] = "sensitive"
            return clean
        for key in ("prompt", "response", "error"):
            if isinstance(clean.get(key), str):
                clean[key] = redact(clean[key], self.known_secrets)
        return clean
