"""The verification cache: what was hashed, and what it hashed to.

A second `up` must not re-hash gigabytes that did not change. An entry is trusted only
while the file still has the same identity: resolved path, size, mtime_ns, ctime_ns and
inode. A byte flipped in place changes mtime (and ctime even when mtime is restored
with `touch -r`), a replaced file changes the inode, so any edit forces a re-hash.

It also records which models were verified (``models``): the inventory the
`models-ready` gate serves. The cache lives on the model volume itself
(``AIRIG_VERIFY_CACHE``) so the init container and the one-off `models verify`
container share it. It is written atomically (temporary file in the same directory,
then ``os.replace``): a crash mid-write leaves the previous cache, never a torn one.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

CACHE_VERSION = 1


@dataclass(frozen=True)
class FileIdentity:
    """What must stay equal for a cached digest to still describe the file."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int

    @classmethod
    def of(cls, stat: os.stat_result) -> FileIdentity:
        return cls(stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)


class VerifyCache:
    """A JSON map resolved-path → identity + sha256, loaded once and saved atomically."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        data = self._load()
        entries, models = data.get("entries"), data.get("models")
        self._entries: dict[str, dict[str, int | str]] = (
            entries if isinstance(entries, dict) else {}
        )
        self._models: dict[str, dict[str, int | str]] = models if isinstance(models, dict) else {}
        self._dirty = False

    def _load(self) -> dict:
        if self.path is None or not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            # A damaged cache only costs a re-hash; it must never block verification.
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return {}
        return data

    def lookup(self, path: Path, identity: FileIdentity) -> str | None:
        """The cached sha256 of ``path`` if its identity is unchanged, else None."""
        entry = self._entries.get(str(path))
        if not isinstance(entry, dict):
            return None
        digest = entry.get("sha256")
        if not isinstance(digest, str):
            return None
        stored = {key: entry.get(key) for key in asdict(identity)}
        return digest if stored == asdict(identity) else None

    def remember(self, path: Path, identity: FileIdentity, sha256: str) -> None:
        self._entries[str(path)] = {**asdict(identity), "sha256": sha256}
        self._dirty = True

    def forget(self, path: Path) -> None:
        if self._entries.pop(str(path), None) is not None:
            self._dirty = True

    def mark_model(self, model: str, size: int, files: int) -> None:
        """Record a verified model (the `models-ready` gate serves this inventory)."""
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        self._models[model] = {"size": size, "files": files, "verified_at": stamp}
        self._dirty = True

    def unmark_model(self, model: str) -> None:
        if self._models.pop(model, None) is not None:
            self._dirty = True

    @property
    def models(self) -> dict[str, dict[str, int | str]]:
        return dict(self._models)

    def save(self) -> None:
        """Write the cache if it changed; drop entries whose file is gone. Either way its
        folder is made traversable (a volume an earlier kit left 0700 too)."""
        if self.path is None:
            return
        traversable(self.path.parent)
        if not self._dirty:
            return
        self._entries = {p: e for p, e in self._entries.items() if os.path.lexists(p)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": CACHE_VERSION, "models": self._models, "entries": self._entries}
        payload = json.dumps(data, indent=0)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            # mkstemp creates 0600; the gate reads this file as another user.
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._dirty = False


def traversable(folder: Path) -> None:
    """Let other users through ``folder`` to the cache (the gate reads it as uid 10001).
    The cache sits at a model volume's root, and a fresh named volume mounted where the
    image has a folder takes that folder's mode (moby's copyOwnership, daemon/volumes_unix.go:
    "copies the permissions and uid:gid of the source"): yanwk/comfyui-boot's /root is
    0700, so the dashboard's Models page said `comfyui unreadable: Permission denied`.
    Search (x) only: the cache is opened by name, the folder's listing stays private.
    A folder this root (no CAP_FOWNER) does not own is left as is: its owner made it."""
    try:
        mode = folder.stat().st_mode
        wanted = mode | stat.S_IXGRP | stat.S_IXOTH
        if wanted != mode:
            os.chmod(folder, stat.S_IMODE(wanted))
    except OSError:
        pass
