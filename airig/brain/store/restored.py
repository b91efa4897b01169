"""A store `restore` put back (airig/launcher/lifecycle/restore.py): its live leases released.

A backup's snapshot holds the tasks that were leased or running when it was taken, leased
to the old kit's workers. In the restored kit those attempts are dead, but the workers'
names are stable (``cpu-1``...): left alone, the new ``cpu-2``'s registration (or the
reaper) would end each as ``worker_restarted``, a failed attempt that costs the task an
infra retry and counts towards ``worker_failures`` against a worker that did nothing wrong.

So `restore` leaves a marker beside BRAIN_DB (``restored.json``, in the state volume's
files), and the brain, at its start and before any worker can reach it, moves every
leased or running task back to READY in one write: ``task_released`` events, the attempt
counters as ``leases.release`` leaves them (no retry spent), and one ``store_restored``
event naming the marker's fingerprint. That event is what keeps a marker from being
applied twice: on a read-only state volume the marker cannot be removed, and a later
start must not release the leases of the workers running by then; nor must a start after
a crash between the commit and the marker's removal. The marker's presence is the signal:
one whose content cannot be read (garbage, too large, a link, a folder) releases all the
same, with one log line; only a restore writes there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path

from airig.brain.store import dialect, states
from airig.brain.store.events import Outbox, store_line
from airig.common.jsonlog import utc_iso
from airig.common.protocol import TaskState as S

# The launcher writes the same name (restore.RESTORED_MARKER; a test checks they match).
MARKER = "restored.json"
EVENT = "store_restored"
# A marker the launcher writes is ~200 bytes; more is read as garbage, never held whole.
MAX_MARKER_BYTES = 64 << 10
ARCHIVE_CHARS = 200


@dataclass(frozen=True)
class Marker:
    path: Path
    fingerprint: str  # recorded in the store: the same marker is never applied twice
    archive: str  # the archive it names, for the tasks' reason ("a backup" if unreadable)
    problem: str | None = None  # why its content could not be read (released all the same)


def find(state_dir: Path) -> Marker | None:
    """The restore's marker in ``state_dir``, or None; never raises for what lies there."""
    path = state_dir / MARKER
    try:
        info = os.lstat(path)
    except OSError:  # absent (or the folder unreadable: the store could not open either)
        return None
    if not stat.S_ISREG(info.st_mode):
        kind = "not a regular file"
        if stat.S_ISLNK(info.st_mode):
            kind = "a link"
        elif stat.S_ISDIR(info.st_mode):
            kind = "a folder"
        return Marker(path, _digest(_seen(kind, info)), "a backup", f"it is {kind}")
    try:
        data = _read(path)
    except OSError as exc:
        return Marker(path, _digest(_seen("unreadable", info)), "a backup",
                      f"it cannot be read ({exc.strerror or exc})")  # fmt: skip
    if len(data) > MAX_MARKER_BYTES:
        return Marker(path, _digest(data), "a backup", f"it is over {MAX_MARKER_BYTES} bytes")
    try:
        body = json.loads(data.decode("utf-8"))
        archive = body["archive"]
        if not isinstance(archive, str) or not archive:
            raise TypeError
    except (ValueError, TypeError, KeyError):
        return Marker(path, _digest(data), "a backup", "it is not the JSON a restore writes")
    shown = "".join(c for c in archive if c.isprintable())[:ARCHIVE_CHARS] or "a backup"
    return Marker(path, _digest(data), shown)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _seen(kind: str, info: os.stat_result) -> bytes:
    """What fingerprints a marker whose content cannot be read: the same entry at each start."""
    return f"{kind}:{info.st_ino}:{info.st_mtime_ns}:{info.st_size}".encode()


def _read(path: Path) -> bytes:
    """At most one byte over the cap, never through a link, never blocking on a FIFO
    swapped in after ``lstat``."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError("not a regular file")
        return handle.read(MAX_MARKER_BYTES + 1)


def release(conn: sqlite3.Connection, outbox: Outbox, now: float, marker: Marker) -> int | None:
    """Every leased or running task back to READY (in the caller's transaction), recorded
    under the marker's fingerprint; how many, or None when this marker was applied before."""
    applied = conn.execute(
        f"SELECT 1 FROM events WHERE event_type = ? AND "
        f"{dialect.json_text(conn, 'body_json', 'marker')} = ? LIMIT 1",
        (EVENT, marker.fingerprint),
    ).fetchone()
    if applied is not None:
        return None
    # Locked on PostgreSQL: a report another brain is writing for one of them is waited
    # for, and the row read as it left it.
    rows = conn.execute(
        "SELECT * FROM tasks WHERE state IN ('LEASED', 'RUNNING') ORDER BY id"
        + dialect.for_update(conn),
    ).fetchall()
    for task in rows:
        reason = f"restored from {marker.archive}, backed up during attempt {task['attempt']}"
        states.transition(
            conn, outbox, task, S.READY, now, "task_released", ready_at=now, reason=reason
        )
    body = {
        "timestamp": utc_iso(now), "event_type": EVENT, "worker_id": None, "error": None,
        "reason": f"restored from {marker.archive}: {len(rows)} leased or running task(s) "
        "released", "marker": marker.fingerprint, "released": len(rows),
    }  # fmt: skip
    store_line(conn, outbox, now, EVENT, None, None, json.dumps(body))
    return len(rows)


def remove(marker: Marker) -> str | None:
    """The marker gone (after the commit); None, or why it could not be removed."""
    try:
        if marker.path.is_dir() and not marker.path.is_symlink():
            shutil.rmtree(marker.path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(marker.path)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
