"""A store that cannot be written: a full disk (507) or a read-only one (503).

SQLite says so as SQLITE_FULL or SQLITE_READONLY; a file the brain writes beside the
database (a task's result) as ENOSPC or EROFS; a volume the kernel turned read-only
often as a plain I/O error (SQLITE_IOERR), which the volume itself then explains
(``statvfs``: read-only, or no space left). Such a write did not commit: it is answered
507 or 503 with the fix and ``retryable: true``, never a vague 500.

``StoreHealth`` remembers that the store could not be written, from the first failed
write until a write commits again (on a full disk, with room again: a checkpointed WAL
lets small commits through while the disk is still full). The ``store_unwritable`` alert
lives here while it holds, since the alerts table is in the store that cannot be
written; it is recorded there once the store can be (``ops/alerts.py``). Meanwhile no
heartbeat or lease renewal can be saved, so liveness is not judged: a worker whose
heartbeat failed to save is not down.

On PostgreSQL the server says it by SQLSTATE (``pg.py`` keeps it on the error): 53100
disk_full is a full store, 25006 read_only_sql_transaction a server that refuses writes (a
standby, ``default_transaction_read_only``). The store is then no volume of the brain's:
``where`` is the server's URL (password masked), whose free space the brain cannot read,
so a full store counts as writable again at its next commit.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("airig.brain.store.unwritable")

FULL, READ_ONLY = "full", "read_only"
STATUS = {FULL: 507, READ_ONLY: 503}
RETRY_AFTER_S = 30  # how long a client waits before it sends the write again
# A full store counts as writable again once this much is free: a commit that fits in a
# recycled WAL (or changes rows in place) is no sign that the next one will, and an
# outage that ended at each such commit would fire its alert again at the next failure.
RECOVERED_FREE_BYTES = 4 * 1024 * 1024
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
PG_DISK_FULL, PG_READ_ONLY = "53100", "25006"  # PostgreSQL's SQLSTATEs


def free_bytes(where: Path | str) -> int | None:
    """Bytes an unprivileged writer may still use on ``where``'s volume; None unknown (a
    PostgreSQL server's URL: not a volume of ours)."""
    if not isinstance(where, Path):
        return None
    try:
        found = os.statvfs(where)
    except OSError:
        return None
    return found.f_bavail * found.f_frsize


def _read_only_volume(where: Path | str) -> bool:
    if not isinstance(where, Path):
        return False
    try:
        return bool(os.statvfs(where).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def size_text(n: int | None) -> str:
    if n is None:
        return "unknown space"
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


class StoreUnwritable(Exception):
    """A write the store could not take; nothing of it was stored."""

    def __init__(self, kind: str, where: Path | str, free: int | None) -> None:
        self.kind, self.where, self.free = kind, where, free
        self.status = STATUS[kind]
        self.retry_after_s = RETRY_AFTER_S
        self.opened = False  # this refusal began the outage (StoreHealth.failed)
        super().__init__(self.detail)

    @property
    def message(self) -> str:
        """What holds, for the alert: no fix, the free space."""
        if self.kind == FULL:
            return f"the brain's store is full: {size_text(self.free)} free on {self.where}"
        return (
            f"the brain's store is read-only: {self.where} cannot be written "
            f"({size_text(self.free)} free)"
        )

    @property
    def detail(self) -> str:
        """The refusal's one line: what holds, that nothing was stored, the fix."""
        if isinstance(self.where, str):  # a PostgreSQL server's: its disk, its settings
            fix = (
                "free space on the database server's disk (the postgres service's volume: "
                "`docker system df` shows what Docker holds there; `plans --prune` once a "
                "little room is back) or give it a larger one"
                if self.kind == FULL
                else "make the PostgreSQL server accept writes again (a standby refuses them "
                "until promoted; default_transaction_read_only off; a volume it lost "
                "remounted read-write)"
            ) + "; the brain resumes by itself, then send this again"
        elif self.kind == FULL:
            fix = (
                "free space on that disk (`docker system df` shows what Docker holds there; "
                "`plans --prune` once a little room is back) or give it a larger one; the "
                "brain resumes by itself, then send this again"
            )
        else:
            fix = (
                "make the volume writable again (`dmesg` for disk errors, then remount it "
                "read-write); the brain resumes by itself, then send this again"
            )
        return f"{self.message}; nothing was stored: {fix}"


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from or during, through storage errors only: an
    HTTP refusal raised while handling one is a refusal, not a full disk."""
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(found) < 8 and current not in found:
        if not isinstance(current, sqlite3.Error | OSError | StoreUnwritable):
            break
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def kind_of(exc: BaseException, where: Path | str, sqlite_readonly: bool = True) -> str | None:
    """FULL, READ_ONLY or None (another failure). ``sqlite_readonly=False``: a plain
    SQLITE_READONLY counts only when the volume says read-only too (a read connection
    refuses writes with it by design: a bug, not a read-only disk); so does PostgreSQL's
    read_only_sql_transaction, a read connection's refusal too."""
    for error in _chain(exc):
        if isinstance(error, StoreUnwritable):
            return error.kind
        if isinstance(error, OSError):
            if error.errno in _NO_SPACE:
                return FULL
            if error.errno == errno.EROFS:
                return READ_ONLY
            continue
        state = getattr(error, "sqlstate", None)  # PostgreSQL's (pg.py)
        if state == PG_DISK_FULL:
            return FULL
        if state == PG_READ_ONLY and sqlite_readonly:
            return READ_ONLY
        name = getattr(error, "sqlite_errorname", "") or ""
        if name == "SQLITE_FULL":
            return FULL
        if name.startswith("SQLITE_READONLY") and (
            sqlite_readonly or name != "SQLITE_READONLY" or _read_only_volume(where)
        ):
            return READ_ONLY
        if name.startswith(("SQLITE_IOERR", "SQLITE_CANTOPEN")):
            if _read_only_volume(where):
                return READ_ONLY
            free = free_bytes(where)
            if free is not None and free < RECOVERED_FREE_BYTES:
                return FULL
    return None


@dataclass(frozen=True)
class Episode:
    """The store could not be written from ``since`` (wall clock) on; ``ended``: when a
    write committed again (0: it still holds)."""

    kind: str
    since: float
    message: str
    free: int | None
    ended: float = 0.0


class StoreHealth:
    """Whether the store can be written, from what its writes met (thread-safe)."""

    def __init__(self, where: Path | str, clock: Callable[[], float] = time.time) -> None:
        # the database's folder (the volume the store lives on), or a PostgreSQL server's
        # URL (masked): a str, no volume of ours
        self.where = where
        self.clock = clock
        self._lock = threading.Lock()
        self._episode: Episode | None = None
        self._unrecorded: list[Episode] = []  # ended, not yet in the alerts' events
        self.recovered_at = 0.0  # when the store last became writable again

    @property
    def episode(self) -> Episode | None:
        """The outage under way, or None."""
        return self._episode

    def failed(self, exc: BaseException, sqlite_readonly: bool = True) -> StoreUnwritable | None:
        """A write failed with ``exc``: the refusal to answer when the store could not
        take it (and the outage noted), else None."""
        kind = kind_of(exc, self.where, sqlite_readonly)
        if kind is None:
            return None
        refusal = StoreUnwritable(kind, self.where, free_bytes(self.where))
        with self._lock:
            now = self.clock()
            held = self._episode
            since = held.since if held else now
            self._episode = Episode(kind, since, refusal.message, refusal.free)
        refusal.opened = held is None
        if held is None:
            log.warning("%s: writes are refused until it can be written again", refusal.message)
        elif held.kind != kind:
            log.warning("%s (was %s)", refusal.message, held.kind.replace("_", "-"))
        return refusal

    def wrote(self) -> Episode | None:
        """A write committed: the outage that ended with it, once (None: none did)."""
        held = self._episode
        if held is None:  # the common case, without the lock
            return None
        if held.kind == FULL:
            free = free_bytes(self.where)
            if free is not None and free < RECOVERED_FREE_BYTES:
                return None  # a commit squeezed in; the disk is still full
        elif _read_only_volume(self.where):
            return None
        with self._lock:
            if self._episode is not held:
                return None  # another thread ended it, or it changed meanwhile
            self._episode = None
            now = self.clock()
            self.recovered_at = now
            ended = Episode(held.kind, held.since, held.message, held.free, ended=now)
            self._unrecorded.append(ended)
        free = free_bytes(self.where)
        log.warning("the brain's store can be written again (%s free)", size_text(free))
        return ended

    def unrecorded(self) -> list[Episode]:
        """Ended outages whose alert is not yet in the store."""
        with self._lock:
            return list(self._unrecorded)

    def recorded(self, episodes: list[Episode]) -> None:
        with self._lock:
            self._unrecorded = [e for e in self._unrecorded if e not in episodes]
