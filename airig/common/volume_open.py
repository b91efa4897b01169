"""Open a file a request or a stored output names, only inside one folder (the data
volume), for reading: the brain's readers of such files (an escalated task's images, a
search hit's keyframe) share this one check.

No absolute path, no ``..``, no NUL, no backslash; links resolved first and the result
still inside the folder; the last component opened without following a link (one
swapped in after the check) and without blocking (a FIFO opens at once and is then
refused as no regular file)."""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath


class OutsideVolume(ValueError):
    """One line: the path and what is wrong with it."""


def open_inside(root: Path, relative: str, what: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file ``relative`` under ``root`` and its
    stat. OutsideVolume (a ValueError) for anything else, the message naming ``what``."""
    pure = PurePosixPath(relative)
    if "\x00" in relative or pure.is_absolute() or ".." in pure.parts or "\\" in relative:
        raise OutsideVolume(f"{what} is not a path inside the data volume")
    base = root.resolve()
    try:
        resolved = (base / pure).resolve()
    except (OSError, RuntimeError):
        raise OutsideVolume(f"{what} cannot be looked up (a loop of links?)") from None
    if resolved != base and base not in resolved.parents:
        raise OutsideVolume(f"{what} leads outside the data volume (a link?)")
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise OutsideVolume(f"{what} is not on the data volume (any more)") from None
    except OSError as exc:
        raise OutsideVolume(f"{what} cannot be read: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise OutsideVolume(f"{what} is not a regular file")
    return fd, info
