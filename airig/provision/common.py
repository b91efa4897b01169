"""What every provisioner shares: its report shape, its interface, small file helpers."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import requests

from airig.common.errors import ProvisionError
from airig.provision.events import Emitter
from airig.provision.verify import ExpectedFile, FileCheckError, VerifiedFile, Verifier


@dataclass(frozen=True)
class ModelReport:
    """One verified model: how many bytes in how many files, and whether all came from cache."""

    model: str
    size: int
    files: int
    cached: bool

    @classmethod
    def of(cls, model: str, files: Sequence[VerifiedFile]) -> ModelReport:
        return cls(
            model=model,
            size=sum(f.size for f in files),
            files=len(files),
            cached=bool(files) and all(f.cached for f in files),
        )


@dataclass(frozen=True)
class Listing:
    model: str
    size: int | None
    configured: bool
    present: bool


def merge_listing(configured: Sequence[str], present: dict[str, int | None]) -> list[Listing]:
    """Configured models first (present or not), then anything else found on disk."""
    rows = [Listing(m, present.get(m), True, m in present) for m in configured]
    rows += [Listing(m, size, False, True) for m, size in present.items() if m not in configured]
    return rows


class ServerProvisioner:
    """What every provisioner keeps: its server's URL and health check, the models it was
    given, the verifier, the event emitter and one HTTP session."""

    service: str
    health_path: str

    def __init__(
        self, url: str, models: list, verifier: Verifier, emitter: Emitter,
        session: requests.Session | None = None,
    ) -> None:  # fmt: skip
        self.url = url.rstrip("/")
        self.health_url = f"{self.url}{self.health_path}"
        self.models = models
        self.verifier = verifier
        self.emitter = emitter
        self.http = session or requests.Session()

    def configured(self) -> list[str]:
        return list(self.models)


class Provisioner(Protocol):
    service: str
    health_url: str
    verifier: Verifier

    def configured(self) -> list[str]: ...

    def ensure(self, model: str, force: bool) -> ModelReport: ...

    def verify(self, model: str) -> ModelReport: ...

    def listing(self) -> list[Listing]: ...


def ensure_model(
    model: str,
    force: bool,
    verify: Callable[[str], ModelReport],
    fetch: Callable[[str], None],
    repair: Callable[[str], None],
) -> ModelReport:
    """Verify; fetch when missing, broken or ``force``; then verify again.

    ``repair`` runs first when files are on disk but wrong: servers trust what they find
    (Ollama skips existing blobs, speaches answers "already exists"), so a bad copy must
    go before asking for the model again. A ``ProvisionError`` from the first verify
    means not known or not there yet, which the fetch fixes.
    """
    try:
        report = verify(model)
        if not force:
            return report
    except FileCheckError:
        repair(model)
    except ProvisionError:
        pass
    fetch(model)
    return verify(model)


def remove_corrupt(verifier: Verifier, files: Sequence[ExpectedFile]) -> list[Path]:
    """Delete every file that exists but holds wrong bytes; return what was deleted.

    A server that finds a blob on disk trusts it (Ollama skips existing blobs on pull), so
    repairing means removing the bad copy before asking for the model again.
    """
    removed = []
    for expected in files:
        try:
            verifier.verify_content(expected)
        except FileCheckError as exc:
            if exc.corrupt and os.path.lexists(exc.path):
                _remove(exc.path, verifier.store)
                removed.append(exc.path)
    return removed


def _remove(path: Path, store: Path | None) -> None:
    """Delete a corrupt entry: a link, and its target only when that lies inside the model
    store (a link pointing elsewhere must never make repair delete a file it does not own);
    a directory in a file's place as a whole."""
    if path.is_symlink():
        target = path.resolve()
        if store is not None and target.is_relative_to(store.resolve()) and target.is_file():
            target.unlink(missing_ok=True)
    remove_path(path)


def remove_path(path: Path) -> None:
    """Remove whatever stands at ``path`` (a file, a link itself, a directory tree)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def tree_size(root: Path) -> int:
    """Bytes under ``root`` (regular files only, symlinks not followed)."""
    total = 0
    for directory, _, names in os.walk(root):
        for name in names:
            try:
                info = os.lstat(os.path.join(directory, name))
            except FileNotFoundError:
                continue  # renamed away between listing and stat: a download finishing
            if not os.path.islink(os.path.join(directory, name)):
                total += info.st_size
    return total


class GrowthWatcher:
    """Reports the growing size of a directory while a blocking download runs.

    Some servers (speaches) and tools (comfy-cli) give no machine-readable progress; the
    bytes landing on the volume are the honest measure of it.
    """

    def __init__(
        self,
        measure: Callable[[], int],
        report: Callable[[int], None],
        interval: float = 0.5,
    ) -> None:
        self._measure = measure
        self._report = report
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._report(self._measure())

    def __enter__(self) -> GrowthWatcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
