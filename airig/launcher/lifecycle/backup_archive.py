"""The backup archive: one ``.tar.gz`` with a manifest of every file's size and sha256.

Layout (``manifest.json`` is the last member, so a writer that dies midway leaves an
archive ``verify`` refuses as truncated, never one that looks complete):

- ``env/.env``: the checkout's settings and generated secrets (the archive is written
  ``chmod 600`` for them);
- ``state/<name>``: the launcher's state worth keeping (``STATE_FILES``:
  ``.airig/tuning.log``, ``images.lock``, ``update.log``), no other name;
- ``volumes/<volume>/...``: a volume's files by their path in it, the volume's name
  without the rig's prefix (``brain-state/brain.db`` is the store's online-backup
  snapshot, ``results/...``, ``comfyui-user/...``; the model volumes with ``--models``);
  with the store on PostgreSQL (``AIRIG_BRAIN_STORE=postgres``) the store's folder holds
  ``brain-state/brain.dump`` instead, the brain's database as ``pg_dump -Fc`` wrote it in
  the postgres container (the store's manifest facts say ``engine: postgresql``);
- ``volumes/data/<part>/...``: the data volume's parts (``DATA_PARTS``): ``outputs/``
  (what recipes and tasks wrote), ``index/search.sqlite`` (the search index, an online-backup
  snapshot as the store's) and, with ``--inputs``, ``inputs/`` (the uploaded inputs). An
  older kit's archive has no ``volumes/data/``: it restores, without them.

``verify`` reads the archive once from the start, hashes every member, and compares
with the manifest: a file that is not a gzip'd tar, one that ends early, one without our
manifest, or a member whose bytes or names differ is refused in one line before anything
is touched. Member names are checked before anything is extracted: written as their plain
path (no absolute path, no ``..``, ``.`` or empty part), only ``env/.env``, the state files
above and a file below the folder of one of the kit's volumes (``VOLUMES``; the store's
folder holds only its snapshot, the data volume only its parts); links, special files and
a name twice are refused. The manifest is read only up to what its members can need
(``manifest_cap``), and each of its fields must have its type (``Manifest.parse``): an
archive is untrusted input until it has verified.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import math
import os
import re
import tarfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from airig.common.errors import AirigError

FORMAT = "airig-backup"
VERSION = 1
MANIFEST = "manifest.json"
ROOTS = ("env", "state", "volumes")
# The data volume (volumes/data/...) is archived by part: outputs and the index always,
# inputs only with `backup --inputs` (the user has them, and they may be large).
DATA_VOLUME = "data"
DATA_PARTS = ("outputs", "index", "inputs")
ENV_MEMBER = "env/.env"
# The launcher state `backup` keeps (airig/launcher/lifecycle/backup.py STATE_FILES): a restore
# writes these into .airig/ and no other name (not host.env, not restore.json).
STATE_FILES = ("tuning.log", "images.lock", "update.log")
# The kit's volumes an archive may hold, by their name without the rig's prefix
# (01-infra/compose.yaml; backup.py DATA_VOLUMES and MODEL_VOLUMES): the store's folder
# holds only its snapshot.
STORE_VOLUME = "brain-state"
STORE_FILE = "brain.db"
# The store on PostgreSQL: its dump, in the store's folder in place of the snapshot (the
# server's own volume, airig/launcher/compose/postgres.py VOLUME, is never archived)
PG_DUMP_FILE = "brain.dump"
PG_DUMP_MEMBER = f"volumes/{STORE_VOLUME}/{PG_DUMP_FILE}"
VOLUMES = (STORE_VOLUME, "results", "comfyui-user", DATA_VOLUME,
           "ollama-models", "comfyui-models", "whisper-models")  # fmt: skip
# The manifest lists each member (path, size, sha256): beyond that, one can only be padding
MANIFEST_BASE = 64 * 1024
MANIFEST_PER_FILE = 256
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
TEXT_MAX = 200  # a manifest's words (versions, prefixes, model and index names)
PREFIX = "airig-backup-"
SUFFIX = ".tar.gz"
VERIFY_HINT = "take a new backup, or pick another archive; nothing was changed"


class BackupError(AirigError):
    """An archive that cannot be written, read or trusted."""


@dataclass
class Entry:
    path: str
    size: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass
class Manifest:
    created_at: float
    airig_version: str
    project_prefix: str
    files: list[Entry]
    models: dict[str, list[str]] = field(default_factory=dict)
    models_included: bool = False
    store: dict[str, Any] = field(default_factory=dict)
    # The data volume's parts (an older kit's archive has none: both False, index {}).
    data_included: bool = False
    inputs_included: bool = False
    index: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "created_at": self.created_at,
            "airig_version": self.airig_version, "project_prefix": self.project_prefix,
            "models": self.models, "models_included": self.models_included,
            "store": self.store, "data_included": self.data_included,
            "inputs_included": self.inputs_included, "index": self.index,
            "files": [e.as_dict() for e in self.files],
        }  # fmt: skip

    @classmethod
    def parse(cls, data: bytes, archive: Path) -> Manifest:
        """The manifest of an archive whose members verified, each field of its type: a
        wrong one is one line naming the field (``created_at: "yesterday"`` or
        ``models_included: "false"`` used to pass as a time and as True)."""
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError):
            raise _foreign(archive, "its manifest is not JSON") from None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise _foreign(archive, "its manifest is not an airig backup manifest")
        field = _Fields(raw, archive)
        version = field.integer("version")
        if version != VERSION:
            raise BackupError(
                f"{archive.name} is a version {version} airig backup; this kit reads version "
                f"{VERSION}",
                "restore it with the airig version that wrote it",
            )
        return cls(
            created_at=field.time("created_at"), airig_version=field.text("airig_version"),
            project_prefix=field.text("project_prefix"), files=field.files("files"),
            models=field.models("models"), models_included=field.flag("models_included"),
            store=field.facts("store"), data_included=field.flag("data_included"),
            inputs_included=field.flag("inputs_included"), index=field.facts("index"),
        )  # fmt: skip


class _Fields:
    """A manifest's fields, each read as its type or refused in one line naming it."""

    def __init__(self, raw: dict[str, Any], archive: Path) -> None:
        self.raw, self.archive = raw, archive

    def _wrong(self, name: str, what: str) -> BackupError:
        return _foreign(self.archive, f"its manifest's {name} is not {what}")

    def integer(self, name: str) -> int:
        value = self.raw.get(name)
        if type(value) is not int:  # bool is an int to isinstance
            raise self._wrong(name, "a whole number")
        return value

    def time(self, name: str) -> float:
        value = self.raw.get(name)
        try:
            number = float(value) if isinstance(value, (int, float)) else math.nan
        except OverflowError:  # an int of 400 digits
            number = math.nan
        if isinstance(value, bool) or not math.isfinite(number) or number <= 0:
            raise self._wrong(name, "a time (seconds since 1970)")
        return number

    def text(self, name: str) -> str:
        value = self.raw.get(name)
        if not _plain_text(value):
            raise self._wrong(name, f"printable text of at most {TEXT_MAX} characters")
        return str(value)

    def flag(self, name: str) -> bool:
        value = self.raw.get(name, False)
        if type(value) is not bool:
            raise self._wrong(name, "true or false")
        return value

    def files(self, name: str) -> list[Entry]:
        value = self.raw.get(name)
        if not isinstance(value, list):
            raise self._wrong(name, "a list")
        entries, seen = [], set()
        for item in value:
            if (
                not isinstance(item, dict)
                or set(item) != {"path", "size", "sha256"}
                or not isinstance(item["path"], str)
                or type(item["size"]) is not int
                or item["size"] < 0
                or not isinstance(item["sha256"], str)
                or not SHA256_HEX.fullmatch(item["sha256"])
            ):
                raise self._wrong(name, "a list of {path, size, sha256}")
            if item["path"] in seen:
                raise self._wrong(name, "a list of distinct paths")
            seen.add(item["path"])
            entries.append(Entry(item["path"], item["size"], item["sha256"]))
        return entries

    def models(self, name: str) -> dict[str, list[str]]:
        value = self.raw.get(name) or {}
        if not isinstance(value, dict) or not all(
            _plain_text(k) and isinstance(v, list) and all(_plain_text(m) for m in v)
            for k, v in value.items()
        ):
            raise self._wrong(name, "a map of model lists")
        return {k: list(v) for k, v in value.items()}

    def facts(self, name: str) -> dict[str, Any]:
        """``store`` and ``index``: what `backup` counted (numbers, words, a list of
        index names): nothing nested deeper, no control characters."""
        value = self.raw.get(name) or {}
        if not isinstance(value, dict) or not all(
            _plain_text(k) and _fact(v) for k, v in value.items()
        ):
            raise self._wrong(name, "a map of counts and names")
        return dict(value)


def _plain_text(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) <= TEXT_MAX
        and not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value)
    )


def _fact(value: object) -> bool:
    if isinstance(value, list):
        return len(value) <= 10_000 and all(_fact(v) and not isinstance(v, list) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) < 1 << 63
    return value is None or isinstance(value, (bool, int)) or _plain_text(value)


class _Hashing(io.RawIOBase):
    """Reads through ``source`` and hashes what passes."""

    def __init__(self, source: IO[bytes]) -> None:
        self.source, self.digest, self.size = source, hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        chunk = self.source.read(size)
        self.digest.update(chunk)
        self.size += len(chunk)
        return chunk


class _Chunks(io.RawIOBase):
    """A file over an iterator of byte chunks (what the Docker SDK's get_archive streams)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


def archive_name(now: float) -> str:
    return PREFIX + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)) + SUFFIX


class ArchiveWriter:
    """Writes ``path`` (mode 600 from its first byte) through ``path.part``: the final name
    appears only once the manifest is in and the file is on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.part = path.with_name(path.name + ".part")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(self.part, flags, 0o600)
        except FileExistsError:
            raise BackupError(
                f"{self.part} exists: another backup is writing there, or one was cut off",
                "wait for it, or delete that file",
            ) from None
        except OSError as exc:
            raise BackupError(
                f"cannot write {self.part}: {exc.strerror}", "pick a writable folder with --to"
            ) from None
        self._file = os.fdopen(fd, "wb")
        # closed by finish() or abort(): the writer outlives this call
        self._tar = tarfile.open(fileobj=self._file, mode="w|gz", format=tarfile.PAX_FORMAT)  # noqa: SIM115
        self.entries: list[Entry] = []

    def add_bytes(self, name: str, data: bytes, mode: int = 0o600) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        self.add_stream(info, io.BytesIO(data))

    def add_stream(self, info: tarfile.TarInfo, source: IO[bytes]) -> None:
        check_name(info.name, Path(self.path.name))
        reader = _Hashing(source)
        self._tar.addfile(info, reader)
        if reader.size != info.size:
            raise BackupError(f"{info.name} changed size while it was read", "run backup again")
        self.entries.append(Entry(info.name, info.size, reader.digest.hexdigest()))

    def add_tar(self, prefix: str, chunks: Iterable[bytes], rename: Callable[[str], str]) -> int:
        """Every regular file of a tar stream (a volume's files from the engine), under
        ``prefix``; ``rename`` maps a member's name to its path under it. Links and special
        files are left out: the kit's volumes hold none it needs. The count added."""
        added = 0
        with tarfile.open(fileobj=_Chunks(chunks), mode="r|") as stream:
            for member in stream:
                if not member.isfile():
                    continue
                relative = rename(member.name)
                if not relative:
                    continue
                extracted = stream.extractfile(member)
                if extracted is None:
                    continue
                info = tarfile.TarInfo(f"{prefix}/{relative}")
                info.size, info.mode, info.mtime = member.size, member.mode, int(member.mtime)
                info.uid, info.gid = member.uid, member.gid
                self.add_stream(info, extracted)
                added += 1
        return added

    def finish(self, manifest: Manifest) -> Path:
        manifest.files = list(self.entries)
        data = json.dumps(manifest.as_dict(), indent=1).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
        self._tar.addfile(info, io.BytesIO(data))
        self._tar.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.part, self.path)
        return self.path

    def abort(self) -> None:
        with contextlib.suppress(OSError, tarfile.TarError):
            self._tar.close()
        self._file.close()
        self.part.unlink(missing_ok=True)


def check_name(name: str, archive: Path) -> None:
    """A member's name as the layout allows it (the module's docstring), else one line."""
    path = PurePosixPath(name)
    parts = path.parts
    if name == MANIFEST:
        return
    plain = name == str(path) and "\x00" not in name and "." not in parts
    if not plain or path.is_absolute() or ".." in parts or not parts or parts[0] not in ROOTS \
            or len(parts) < 2:  # fmt: skip
        raise _foreign(archive, f"it holds a file outside env/, state/ and volumes/: {name!r}")
    if parts[0] == "env" and name != ENV_MEMBER:
        raise _foreign(archive, f"it holds a settings file other than {ENV_MEMBER}: {name!r}")
    if parts[0] == "state" and (len(parts) != 2 or parts[1] not in STATE_FILES):
        raise _foreign(archive, f"it holds a launcher state file other than "
                                f"{', '.join(STATE_FILES)}: {name!r}")  # fmt: skip
    if parts[0] == "volumes" and len(parts) < 3:
        raise _foreign(archive, f"it holds a file outside its volume's folder: {name!r}")
    if parts[0] == "volumes" and parts[1] not in VOLUMES:
        raise _foreign(archive, f"it holds a file of a volume the kit does not have: {name!r}")
    if parts[:2] == ("volumes", STORE_VOLUME) and parts[2:] not in ((STORE_FILE,), (PG_DUMP_FILE,)):
        raise _foreign(archive, f"it holds a store file other than its snapshot or dump: "
                                f"{name!r}")  # fmt: skip
    if parts[:2] == ("volumes", DATA_VOLUME) and (len(parts) < 4 or parts[2] not in DATA_PARTS):
        raise _foreign(archive, f"it holds a data volume file outside {', '.join(DATA_PARTS)}: "
                                f"{name!r}")  # fmt: skip


def manifest_cap(paths: Iterable[str]) -> int:
    """The most bytes the manifest of these members can need (each one's path, JSON-escaped,
    its size and sha256): a bigger one is refused before it is read."""
    return MANIFEST_BASE + sum(len(json.dumps(p)) + MANIFEST_PER_FILE for p in paths)


def _foreign(archive: Path, why: str) -> BackupError:
    return BackupError(f"{archive.name} is not an airig backup: {why}", VERIFY_HINT)


def verify(archive: Path, member: Callable[[str, IO[bytes]], None] | None = None) -> Manifest:
    """The archive's manifest once every member's size and sha256 match it. ``member``
    (restore) is called with each file's name and its bytes as they are read; use it only
    after a first ``verify`` without it has passed."""
    if not archive.is_file():
        raise BackupError(f"no archive at {archive}", "give the path of a file `backup` wrote")
    seen: dict[str, Entry] = {}
    manifest_bytes: bytes | None = None
    try:
        with tarfile.open(archive, mode="r|gz") as stream:
            for info in stream:
                check_name(info.name, archive)
                if not info.isfile():
                    raise _foreign(archive, f"{info.name!r} is not a regular file")
                if manifest_bytes is not None:
                    raise _foreign(archive, "files follow its manifest")
                source = stream.extractfile(info)
                assert source is not None  # a regular file always has its bytes
                if info.name == MANIFEST:
                    cap = manifest_cap(seen)
                    if info.size > cap:
                        raise _foreign(archive, f"its manifest is {human_bytes(info.size)}, more "
                                                f"than its {len(seen)} files can need")  # fmt: skip
                    manifest_bytes = source.read(cap + 1)
                    continue
                if info.name in seen:
                    raise _foreign(archive, f"it holds {info.name!r} twice")
                reader = _Hashing(source)
                if member is not None:
                    member(info.name, reader)  # type: ignore[arg-type]
                while reader.read(1 << 20):
                    pass
                seen[info.name] = Entry(info.name, reader.size, reader.digest.hexdigest())
    except (tarfile.ReadError, gzip.BadGzipFile, zlib.error) as exc:
        if "unexpected end" in str(exc) or "truncated" in str(exc):
            raise _truncated(archive) from None
        raise _foreign(archive, "it is not a gzip'd tar archive") from None
    except EOFError:
        raise _truncated(archive) from None
    if manifest_bytes is None:
        if not seen:
            raise _foreign(archive, "it holds no files")
        raise _truncated(archive)
    manifest = Manifest.parse(manifest_bytes, archive)
    wanted = {e.path: e for e in manifest.files}
    for path in sorted(set(wanted) | set(seen)):
        if path not in seen:
            raise BackupError(f"{archive.name} is corrupt: {path} is missing", VERIFY_HINT)
        if path not in wanted:
            raise BackupError(f"{archive.name} is corrupt: {path} is not in its manifest",
                              VERIFY_HINT)  # fmt: skip
        if seen[path] != wanted[path]:
            raise BackupError(
                f"{archive.name} is corrupt: {path} does not match its sha256", VERIFY_HINT
            )
    return manifest


def _truncated(archive: Path) -> BackupError:
    return BackupError(f"{archive.name} is truncated (it ends before its manifest)", VERIFY_HINT)


def prune(folder: Path, keep: int) -> list[Path]:
    """Delete all but the ``keep`` newest archives `backup` named in ``folder``; the
    deleted. Names sort by time (UTC stamps), and only ours are touched."""
    ours = sorted(p for p in folder.glob(f"{PREFIX}*{SUFFIX}") if p.is_file())
    gone = ours[: max(0, len(ours) - keep)]
    for path in gone:
        path.unlink(missing_ok=True)
    return gone


@dataclass(frozen=True)
class Part:
    """One part of an archive as `backup` and `restore` describe it."""

    name: str
    files: int
    size: int


# How each part is named to the user, in this order (others: the volume's own name).
PART_NAMES = {
    "volumes/brain-state": "store", "volumes/results": "results",
    "volumes/data/outputs": "outputs", "volumes/data/index": "search index",
    "volumes/data/inputs": "inputs", "volumes/comfyui-user": "ComfyUI user folder",
    "settings": ".env and launcher state",
}  # fmt: skip


def parts(manifest: Manifest) -> list[Part]:
    """The archive's files by part (the store, results, outputs, the search index, inputs,
    ComfyUI's user folder, each model volume, the settings), with their count and bytes."""
    totals: dict[str, list[int]] = {}
    for entry in manifest.files:
        path = PurePosixPath(entry.path).parts
        if path[0] != "volumes":
            key = "settings"
        elif path[1] == DATA_VOLUME:
            key = "/".join(path[:3])
        else:
            key = "/".join(path[:2])
        total = totals.setdefault(key, [0, 0])
        total[0] += 1
        total[1] += entry.size
    order = list(PART_NAMES)
    keys = sorted(totals, key=lambda k: (order.index(k) if k in order else len(order), k))
    return [Part(PART_NAMES.get(k, k.removeprefix("volumes/")), *totals[k]) for k in keys]


def describe(manifest: Manifest) -> tuple[str, str]:
    """Two lines for the user: what the archive holds (each part's files and size; the
    store's plans and tasks, the index's entries) and what it does not."""
    held = []
    for part in parts(manifest):
        text = f"{part.name} {human_bytes(part.size)}"
        store, index = manifest.store, manifest.index
        if part.name == "store" and store:
            text += f" ({store.get('plans', '?')} plans, {store.get('tasks', '?')} tasks)"
        elif part.name == "search index" and index:
            text += f" ({_count(len(index.get('indexes') or []), 'index', 'indexes')}, "
            text += f"{_count(index.get('entries', '?'), 'entry', 'entries')})"
        else:
            text += f" ({_count(part.files, 'file', 'files')})"
        held.append(text)
    left = []
    if not manifest.data_included:
        left.append("outputs, search index and inputs (an older kit's archive)")
    else:
        names = {part.name for part in parts(manifest)}
        if "search index" not in names:
            left.append("search index (none yet)")
        if not manifest.inputs_included:
            left.append("inputs (--inputs adds them; `submit --inputs-dir` uploads them again)")
    if not manifest.models_included:
        left.append("models (--models adds them; `up` pulls them again)")
    return "In it: " + " · ".join(held), "Not in it: " + (" · ".join(left) or "nothing left out")


def _count(n: object, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def human_bytes(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.1f} GB"
