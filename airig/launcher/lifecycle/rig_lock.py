"""One `up` or `down` of a rig at a time on a Docker engine.

Two runs on the same compose projects race, and the one that loses rolls everything back
(issue 35 §5: "No such container: a4d312…"). `compose up --wait` lists its project's
containers once, then inspects each by id until it is healthy; a second `up` of the same
projects whose configuration differs (another checkout: its own .env secrets and images;
the e2e kit uses the default prefix too) recreates those containers meanwhile, and the
first one's next inspect finds the old id gone; a `down` removes them. Nothing of the
launcher's own makes that happen, so the runs are kept apart instead: each holds an
advisory lock (flock) on a file named after the engine and AIRIG_PROJECT_PREFIX, in the
machine's temporary folder, where every checkout and user of this engine finds it. A
second run waits for the first and says whose it is; the kernel releases the lock however
the holder ends (Ctrl-C, a kill), so none is ever left stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rich.markup import escape

from airig.launcher.settings import Settings

LOCK_DIR = Path(tempfile.gettempdir())
DEFAULT_ENGINE = "unix:///var/run/docker.sock"
# The locks this thread holds: `up` runs itself again once after a failed model load.
_held = threading.local()


def lock_path(prefix: str, engine: str | None = None) -> Path:
    """The lock of rig ``prefix`` on ``engine`` (DOCKER_HOST, else the local socket)."""
    engine = engine or os.environ.get("DOCKER_HOST") or DEFAULT_ENGINE
    digest = hashlib.sha256(engine.encode()).hexdigest()[:12]
    return LOCK_DIR / f"airig-{prefix}-{digest}.lock"


@contextlib.contextmanager
def rig_lock(
    settings: Settings, action: str, say: Callable[[str], object] | None, enabled: bool = True
) -> Iterator[None]:
    """Hold the rig's lock while inside; wait (saying for whom, on ``say`` or the
    launcher's console) while another run has it."""
    path = lock_path(settings.project_prefix)
    held: set[Path] = _held.__dict__.setdefault("paths", set())
    if not enabled or path in held:
        yield
        return
    fd = _open(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say is None:
                from airig.launcher.console import console

                say = console.print
            say(f"[yellow]Waiting[/] for {escape(holder(fd))} to finish (Ctrl-C stops) …")
            fcntl.flock(fd, fcntl.LOCK_EX)
        _note(fd, action, settings)
        held.add(path)
        try:
            yield
        finally:
            held.discard(path)
    finally:
        os.close(fd)  # releases the lock


def holder(fd: int) -> str:
    """Whose run holds the lock, as its file says (``another run`` when it does not)."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        note = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
        since = time.strftime("%H:%M:%S", time.localtime(float(note["since"])))
        return (
            f"`{note['action']}` of rig {note['prefix']} on this Docker engine "
            f"(pid {int(note['pid'])}, from {note['checkout']}, since {since})"
        )
    return "another `up` or `down` of this rig on this Docker engine"


def _open(path: Path) -> int:
    """The lock file, made if missing. Another user's copy opens read-only (flock needs no
    write access; /tmp's sticky bit refuses creating over another user's file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def _note(fd: int, action: str, settings: Settings) -> None:
    """Who holds it now, for a run that waits: best effort (a read-only copy keeps the
    last holder's note)."""
    note = {
        "action": action,
        "prefix": settings.project_prefix,
        "pid": os.getpid(),
        "checkout": str(settings.root),
        "since": time.time(),
    }
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(note).encode(), 0)
