"""State-change events and the training-sample log.

Inside a transaction the state machine records events into the ``events`` table and an
``Outbox``; only after the commit does ``EventLog.publish`` write them as JSON lines
(stdout and the events file), so a rolled-back change never appears in a log.
Event lines follow the seed's schema (timestamp, event_type, task_id, worker_id, gpu_id,
duration_ms, tokens_generated, error) plus plan, attempt, reason, from/to states.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import threading
from dataclasses import dataclass, field
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
    line = json.dumps(body, default=str)
    conn.execute(
        "INSERT INTO events (ts, event_type, plan_id, task_id, body_json) VALUES (?,?,?,?,?)",
        (now, event_type, task["plan_id"], task["id"], line),
    )
    outbox.events.append(line)


class EventLog:
    """Writes committed events and training samples as JSON lines."""

    def __init__(
        self, events_file: Path, training_file: Path, known_secrets: tuple[str, ...] = ()
    ) -> None:
        self.events_file = events_file
        self.training_file = training_file
        self.known_secrets = known_secrets
        self._lock = threading.Lock()
        events_file.parent.mkdir(parents=True, exist_ok=True)
        training_file.parent.mkdir(parents=True, exist_ok=True)

    def publish(self, outbox: Outbox) -> None:
        with self._lock:
            if outbox.events:
                lines = "".join(line + "\n" for line in outbox.events)
                sys.stdout.write(lines)
                sys.stdout.flush()
                with self.events_file.open("a", encoding="utf-8") as handle:
                    handle.write(lines)
            if outbox.samples:
                with self.training_file.open("a", encoding="utf-8") as handle:
                    for sample in outbox.samples:
                        handle.write(json.dumps(self.scrub(sample), default=str) + "\n")

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
