"""Prove that a model file on disk is the file we meant to have.

The seed runbook's rule: never treat a model sync as successful without checking the
file afterwards: a regular, readable, non-zero file whose size is stable across
repeated checks. On top of that, when the expected size and sha256 are known, both
must match. Hashing streams the file through a large reused buffer (hashlib releases
the GIL on big updates, so this runs at the speed of the C hash), and a cache keyed on
the file's identity lets an unchanged file skip the hash on the next run.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_mod
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from airig.common.errors import ProvisionError
from airig.provision.cache import FileIdentity, VerifyCache

# 4 MiB: large enough that per-call overhead vanishes next to the hash itself, small
# enough to stay in L2/L3 cache on the machines this runs on.
HASH_BUFFER_BYTES = 4 * 1024 * 1024
PARTIAL_MARKER = "-partial"


class FileCheckError(ProvisionError):
    """A file failed a check; ``path`` names it so a repair can delete exactly it."""

    def __init__(self, path: Path, message: str, hint: str = "", corrupt: bool = False) -> None:
        super().__init__(message, hint)
        self.path = path
        # corrupt: the file exists but holds wrong bytes (repair = delete and re-pull).
        self.corrupt = corrupt


@dataclass(frozen=True)
class ExpectedFile:
    """A file we require: where, and (when known) its size and sha256 hex digest."""

    path: Path
    size: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class VerifiedFile:
    path: Path
    size: int
    sha256: str | None
    cached: bool


def is_partial(path: Path) -> bool:
    """In-flight downloads (Ollama's ``<blob>-partial-N``) are never model files."""
    return PARTIAL_MARKER in path.name


def sha256_file(path: Path, buffer_bytes: int = HASH_BUFFER_BYTES) -> str:
    """Hex sha256 of a file, streamed through one preallocated buffer."""
    digest = hashlib.sha256()
    buffer = bytearray(buffer_bytes)
    view = memoryview(buffer)
    # buffering=0: read straight into our buffer, no second copy through BufferedReader.
    with open(path, "rb", buffering=0) as handle:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while count := handle.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


def check_regular(path: Path, store: Path | None = None) -> os.stat_result:
    """Stat of the file ``path`` leads to; fails unless it is a readable, non-empty file.

    A symlink is accepted when its target is a regular file (the Hugging Face cache links
    snapshots to blobs) and, if ``store`` is given, lies inside it.
    """
    try:
        link = path.lstat()
    except FileNotFoundError:
        raise FileCheckError(path, f"{path} is missing") from None
    if stat_mod.S_ISLNK(link.st_mode):
        target = path.resolve()
        if not target.exists():
            raise FileCheckError(path, f"{path} is a dangling symlink", corrupt=True)
        if store is not None and not target.is_relative_to(store.resolve()):
            raise FileCheckError(path, f"{path} links outside {store}", corrupt=True)
    info = path.stat()
    if not stat_mod.S_ISREG(info.st_mode):
        kind = "a directory" if stat_mod.S_ISDIR(info.st_mode) else "not a regular file"
        raise FileCheckError(path, f"{path} is {kind}", corrupt=True)
    if not os.access(path, os.R_OK):
        raise FileCheckError(path, f"{path} is not readable", "check the volume's ownership")
    if info.st_size == 0:
        raise FileCheckError(path, f"{path} is empty (0 bytes)", corrupt=True)
    return info


class Verifier:
    """Checks a batch of files; one settle pause per batch proves sizes are stable.

    Every file is stat'ed before hashing and again after the batch and a pause of at
    least ``settle_seconds``: a file whose size or mtime moved in between is still being
    written and fails, whatever its hash said at the time. A batch served entirely from
    the cache skips the pause (see ``verify``), so re-verifying unchanged models is
    near-instant.
    """

    def __init__(
        self,
        cache: VerifyCache | None = None,
        settle_seconds: float = 1.0,
        store: Path | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cache = cache or VerifyCache(None)
        self.settle_seconds = settle_seconds
        self.store = store
        self._sleep = sleep

    def verify(self, files: Sequence[ExpectedFile]) -> list[VerifiedFile]:
        """Verify all ``files``; raises FileCheckError naming the first bad one."""
        started = time.monotonic()
        first: dict[Path, os.stat_result] = {}
        results = []
        for expected in files:
            first[expected.path] = check_regular(expected.path, self.store)
            results.append(self._check_content(expected, first[expected.path]))
        # A cache hit means the file kept the identity it had when it last verified
        # (after its own pause): it has been stable far longer than any pause we could add.
        remaining = self.settle_seconds - (time.monotonic() - started)
        if remaining > 0 and not all(result.cached for result in results):
            self._sleep(remaining)
        for expected in files:
            self._check_stable(expected.path, first[expected.path])
        return results

    def verify_content(self, expected: ExpectedFile) -> VerifiedFile:
        """Check one file's type, size and digest now, without the stability pause."""
        return self._check_content(expected, check_regular(expected.path, self.store))

    def _check_content(self, expected: ExpectedFile, info: os.stat_result) -> VerifiedFile:
        path = expected.path
        if expected.size is not None and info.st_size != expected.size:
            raise FileCheckError(
                path,
                f"{path} has {info.st_size} bytes, expected {expected.size}",
                corrupt=True,
            )
        real = path.resolve()
        identity = FileIdentity.of(info)
        # "" records a file checked without a digest (small HF files): unchanged since.
        cached = self.cache.lookup(real, identity)
        if expected.sha256 is None:
            if cached is None:
                self.cache.remember(real, identity, "")
            return VerifiedFile(path, info.st_size, None, cached=cached is not None)
        cached = cached or None  # an identity known without a digest still needs hashing
        digest = cached or sha256_file(real)
        if digest != expected.sha256.lower():
            self.cache.forget(real)
            raise FileCheckError(
                path,
                f"{path} sha256 mismatch "
                f"(expected {expected.sha256[:12]}..., got {digest[:12]}...)",
                corrupt=True,
            )
        if cached is None:
            self.cache.remember(real, identity, digest)
        return VerifiedFile(path, info.st_size, digest, cached=cached is not None)

    def _check_stable(self, path: Path, before: os.stat_result) -> None:
        after = check_regular(path, self.store)
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            self.cache.forget(path.resolve())
            raise FileCheckError(
                path,
                f"{path} is still changing ({before.st_size} → {after.st_size} bytes)",
                "another process is writing it; wait for it to finish and verify again",
            )
