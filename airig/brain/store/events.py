"""State-change events and the training-sample log.

Inside a transaction the state machine records events into the ``events`` table and an
``Outbox``; only after the commit does ``EventLog.publish`` write them as JSON lines
(stdout and the events file), so a rolled-back change never appears in a log.
Event lines follow the seed's schema (timestamp, event_type, task_id, worker_id, gpu_id,
duration_ms, tokens_generated, error) plus plan, attempt, reason, from/to states.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from airig.common.jsonlog import utc_iso

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
    conn.execute(
        "INSERT INTO events (ts, event_type, plan_id, task_id, body_json) VALUES (?,?,?,?,?)",
        (now, event_type, task["plan_id"], task["id"], line),
    )
    outbox.events.append(line)


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


def record_submitted(conn: sqlite3.Connection, outbox: Outbox, plan_id: str, now: float) -> None:
    """``record(..., "task_submitted", to=state)`` for every task of a new plan, in two
    statements: the events built and stored by SQLite, their lines read back as one
    value. A plan of 500 tasks stored its events one INSERT at a time, inside the
    transaction every claim waits behind (benchmarks/fleet.py)."""
    conn.execute(_SUBMITTED, (now, utc_iso(now), plan_id))
    joined = conn.execute(
        "SELECT group_concat(body_json, char(10)) FROM"
        " (SELECT body_json FROM events WHERE plan_id = ? ORDER BY id)",
        (plan_id,),
    ).fetchone()[0]
    outbox.events.extend(joined.split("\n") if joined else [])


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


class EventLog:
    """Writes committed events and training samples as JSON lines, each log rotated when
    a batch would take it past ``max_bytes`` (0: never), ``keep`` rotated files kept."""

    def __init__(
        self, events_file: Path, training_file: Path, known_secrets: tuple[str, ...] = (),
        max_bytes: int = 0, keep: int = 5, clock: Callable[[], float] = time.time,
    ) -> None:  # fmt: skip
        self.events_file = events_file
        self.training_file = training_file
        self.known_secrets = known_secrets
        self.max_bytes = max_bytes
        self.keep = keep
        self.clock = clock  # the benchmark's fake clock stamps rotated files
        self._lock = threading.Lock()
        events_file.parent.mkdir(parents=True, exist_ok=True)
        training_file.parent.mkdir(parents=True, exist_ok=True)

    def _append(self, path: Path, text: str) -> None:
        if self.max_bytes:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                size = 0
            # Lines are json.dumps output, ASCII: characters are bytes.
            if size and size + len(text) > self.max_bytes:
                rotate(path, self.keep, self.clock())
        with path.open("a", encoding="utf-8") as handle:
            handle.write(text)

    def publish(self, outbox: Outbox) -> None:
        with self._lock:
            if outbox.events:
                lines = "".join(line + "\n" for line in outbox.events)
                sys.stdout.write(lines)
                sys.stdout.flush()
                self._append(self.events_file, lines)
            if outbox.samples:
                self._append(self.training_file, "".join(
                    json.dumps(self.scrub(sample), default=str) + "\n"
                    for sample in outbox.samples
                ))  # fmt: skip

    def expire(self, cutoff: float, now: float) -> int:
        """Rotate a log whose first line is older than ``cutoff``, then delete rotated
        files older than it; the bytes deleted."""
        freed = 0
        with self._lock:
            for path in (self.events_file, self.training_file):
                first = first_stamp(path)
                if first is not None and first < cutoff:
                    rotate(path, self.keep, now)
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
