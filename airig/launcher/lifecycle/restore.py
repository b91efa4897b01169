"""`restore ARCHIVE`: the kit an archive of `backup` holds, on a fresh clone or over a kit.

In two halves, so nothing is half-started:

1. ``prepare`` (before any container): everything the restore needs is checked before
   anything is touched: the archive verified whole in one read (one line if it is
   corrupt, truncated or foreign, holds a link, a path that leaves its folder, a state
   file the kit does not keep, or a manifest field of the wrong type), holding ``env/.env``
   and the store's snapshot (an SQLite file), its ``.env`` one this kit's settings accept;
   the kit must be stopped; a checkout or an engine that has this rig's data needs
   ``--yes``. The volumes are this checkout's (``AIRIG_PROJECT_PREFIX`` as it runs now,
   never the name the archive gives): the restored ``.env`` keeps that prefix. Then
   ``.env``, ``.airig/``'s state and ``.airig/restore.json`` (what `up` still has to put
   back) are written beside their places (``.part``, ``O_EXCL|O_NOFOLLOW``, mode 600),
   and only once all are on disk are the volumes the archive replaces removed (the data
   volume only when the archive holds its part: an older kit's archive leaves it) and the
   files moved into place, the old ``.env`` kept as ``.env.before-restore``. A disk that
   is full or read-only leaves the checkout and the volumes as they were.
2. ``apply_pending`` (run by `up` once 01-infra has made the volumes, before any service
   that reads them starts): the archive verified again while its volume files are
   spooled (under ``.airig/``, not a tmpfs ``/tmp``: inputs can be large) into one tar
   per volume; only once it has verified whole are they streamed into the volumes through
   a container of the kit's image that never starts; then ``restore.json`` goes. If `up`
   stops before that (a full disk included), the next `up` finishes it. The store's
   snapshot was taken before `backup` recorded the archive with the brain, so the
   archive restored from is recorded in the restored store here (``record_restored``):
   `status` and the dashboard then show it as the last backup, not "No backup yet". Beside
   the store, on either engine, goes ``restored.json``: the brain's cue that the attempts
   the snapshot caught leased or running are the old kit's, released at its start rather
   than failed when a worker of the same name registers (airig/brain/store/restored.py).

Models the archive does not hold are pulled and verified by `up`'s init containers, as on
a first `up`.

An archive of a kit whose store was on PostgreSQL holds ``pg_dump -Fc``'s file instead of
the SQLite snapshot (``volumes/brain-state/brain.dump``, checked for pg_dump's header),
and its ``.env`` must say ``AIRIG_BRAIN_STORE=postgres`` (an SQLite archive's must not):
``prepare`` removes the postgres service's volume with the others, so `up` starts a fresh
cluster with the restored password, and ``apply_pending`` loads the dump there with
``pg_restore --clean`` once 01-infra is up and healthy, before the brain starts
(``pg_store.load``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from airig.common.errors import AirigError
from airig.launcher.compose import postgres
from airig.launcher.compose.docker import Docker, engine_errors
from airig.launcher.envfile import read_env, set_values
from airig.launcher.lifecycle import pg_store
from airig.launcher.lifecycle.backup import (
    DATA_VOLUMES,
    MODEL_VOLUMES,
    STORE_MEMBER,
    archive_sha256,
)
from airig.launcher.lifecycle.backup_archive import (
    DATA_VOLUME,
    ENV_MEMBER,
    PG_DUMP_MEMBER,
    STATE_FILES,
    BackupError,
    Manifest,
    human_bytes,
    verify,
)
from airig.launcher.settings import Settings, load_settings

PENDING = "restore.json"
STATE_VOLUME = "brain-state"
# Beside the store in the state volume: the brain's cue that its store was restored, so
# the attempts leased in the backup's snapshot are released, not failed, at its start
# (airig/brain/store/restored.py MARKER, the same name).
RESTORED_MARKER = "restored.json"
# What a restore keeps in memory of the checkout's files, at most: a kit's .env is a few
# KB, its state files (append-only logs) a few MB after years
ENV_MAX = 1 << 20
STATE_MAX = 64 << 20
SQLITE_HEADER = b"SQLite format 3\x00"
NOTHING_CHANGED = (
    "take a new backup with `python start_services.py backup`, or pick another archive; "
    "nothing was changed"
)


def prepare(root: Path, archive: Path, yes: bool, docker: Docker,
            say: Callable[[str], None]) -> Manifest:  # fmt: skip
    """Check everything, then write the checkout's half; ``apply_pending`` does the rest."""
    archive = archive.expanduser().resolve()
    # this checkout's prefix names the volumes removed and filled: the archive's manifest
    # (or its .env) never chooses which of the engine's volumes go
    prefix = load_settings(root).project_prefix
    say(f"Verifying {archive.name} …")
    kept = _Kept(archive)
    manifest = verify(archive, kept.keep)  # its bytes as verified: used once it returns
    kept.check(manifest)
    env, store = _restored_env(archive, kept.files[ENV_MEMBER], prefix, say)
    kept.check_store(manifest, store)
    files = {**kept.files, ENV_MEMBER: env}
    running = _running(docker, {prefix})
    if running:
        raise BackupError(
            f"the kit is running ({', '.join(running)}): a restore replaces its store",
            "stop it first with `python start_services.py down`, then restore again",
        )
    present = _present_volumes(docker, prefix, replaced_volumes(manifest))
    env_file = root / ".env"
    had = [".env"] if env_file.is_file() else []
    if (had or present) and not yes:
        what = ", ".join(had + present)
        raise BackupError(
            f"this kit already has data ({what}); the restore would replace it",
            "add --yes to replace it (.env is kept as .env.before-restore)",
        )
    staged = _stage_checkout(root, archive, manifest, files)
    try:
        if present:
            _remove_volumes(docker, present)
    except BaseException:
        staged.discard()
        raise
    staged.commit()
    return manifest


class _Kept:
    """What ``prepare`` keeps of an archive as ``verify`` reads it: ``.env`` and the state
    files (each within its cap), and the first bytes of the store."""

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self.files: dict[str, bytes] = {}
        self.store_head = b""
        self.dump_head = b""

    def keep(self, name: str, reader: IO[bytes]) -> None:
        if name == STORE_MEMBER:
            self.store_head = reader.read(len(SQLITE_HEADER))
        elif name == PG_DUMP_MEMBER:
            self.dump_head = reader.read(len(pg_store.DUMP_HEADER))
        elif name.startswith(("env/", "state/")):
            cap = ENV_MAX if name == ENV_MEMBER else STATE_MAX
            data = reader.read(cap + 1)
            if len(data) > cap:
                raise BackupError(
                    f"{self.archive.name} cannot be restored: its {name} is over "
                    f"{human_bytes(cap)}, more than the kit ever writes there", NOTHING_CHANGED,
                )  # fmt: skip
            self.files[name] = data

    def check(self, manifest: Manifest) -> None:
        """What the restore cannot do without: the kit's settings and its store (the
        store's volume is replaced: without a snapshot it would be left empty), the
        SQLite snapshot or, from a kit on PostgreSQL, the database's dump."""
        held = {e.path for e in manifest.files}
        wanted = [(ENV_MEMBER, "the kit's settings and secrets")]
        if PG_DUMP_MEMBER not in held:
            wanted.append((STORE_MEMBER, "the brain's store"))
        for member, what in wanted:
            if member not in held:
                raise BackupError(
                    f"{self.archive.name} cannot be restored: it holds no {member} ({what})",
                    NOTHING_CHANGED,
                )
        if PG_DUMP_MEMBER in held:
            if STORE_MEMBER in held:
                raise BackupError(
                    f"{self.archive.name} cannot be restored: it holds both an SQLite store "
                    "and a PostgreSQL dump", NOTHING_CHANGED,
                )  # fmt: skip
            if self.dump_head != pg_store.DUMP_HEADER:
                raise BackupError(
                    f"{self.archive.name} cannot be restored: its {PG_DUMP_MEMBER} is not a "
                    "pg_dump archive (-Fc)", NOTHING_CHANGED,
                )  # fmt: skip
            return
        if self.store_head != SQLITE_HEADER:
            raise BackupError(
                f"{self.archive.name} cannot be restored: its {STORE_MEMBER} is not an SQLite "
                "database", NOTHING_CHANGED,
            )  # fmt: skip

    def check_store(self, manifest: Manifest, store: str) -> None:
        """The restored .env's AIRIG_BRAIN_STORE names the store the archive holds: a
        PostgreSQL dump with sqlite (or the other way round) would start a brain on an
        empty store while the archive's data lay unused."""
        has_dump = any(e.path == PG_DUMP_MEMBER for e in manifest.files)
        if has_dump == (store == "postgres"):
            return
        held = "a PostgreSQL dump" if has_dump else "an SQLite store"
        raise BackupError(
            f"{self.archive.name} cannot be restored: it holds {held} but its .env says "
            f"AIRIG_BRAIN_STORE={store}", NOTHING_CHANGED,
        )  # fmt: skip


def _restored_env(
    archive: Path, data: bytes, prefix: str, say: Callable[[str], None]
) -> tuple[bytes, str]:
    """The archive's ``.env`` as this checkout will run it: read with this kit's settings
    (one it would refuse at `up` is refused now, while the old data is still there), with
    this checkout's ``AIRIG_PROJECT_PREFIX``; and the store it names (AIRIG_BRAIN_STORE)."""
    with tempfile.TemporaryDirectory(prefix="airig-restore-env-") as tmp:  # mode 700
        path = Path(tmp) / ".env"
        _write_private(path, data)
        try:
            # the .env alone: a variable of this shell must not decide what it says
            store = read_env(path).get("AIRIG_BRAIN_STORE") or "sqlite"
            load_settings(Path(tmp))
            own = read_env(path).get("AIRIG_PROJECT_PREFIX", "")
        except AirigError as exc:
            raise BackupError(
                f"{archive.name} cannot be restored: its .env is not one this kit runs "
                f"({exc.message})",
                NOTHING_CHANGED,
            ) from None
        if own == prefix:
            return data, store
        set_values(path, {"AIRIG_PROJECT_PREFIX": prefix})
        was = f"the archive's kit ran as {own}" if own else "the archive's .env names none"
        say(f"  AIRIG_PROJECT_PREFIX stays this checkout's {prefix} ({was})")
        return path.read_bytes(), store


def replaced_volumes(manifest: Manifest) -> list[str]:
    """The volumes a restore of this archive replaces: the store, results, ComfyUI's
    user folder, and the data volume when the archive holds it (an older kit's archive
    does not: the data volume is left as it is); with a PostgreSQL dump the postgres
    service's volume too, so `up` makes a fresh cluster with the restored password."""
    data = [DATA_VOLUME] if any(
        PurePosixPath(e.path).parts[:2] == ("volumes", DATA_VOLUME) for e in manifest.files
    ) or manifest.data_included else []  # fmt: skip
    database = [postgres.VOLUME] if any(e.path == PG_DUMP_MEMBER for e in manifest.files) else []
    return [STATE_VOLUME, *DATA_VOLUMES, *data, *database]


def _running(docker: Docker, prefixes: set[str]) -> list[str]:
    names = []
    for prefix in sorted(prefixes):
        for project in (f"{prefix}-{s}" for s in ("infra", "compute", "agents")):
            names += [c.name for c in docker.containers(
                label=f"com.docker.compose.project={project}")]  # fmt: skip
    return names


def _present_volumes(docker: Docker, prefix: str, volumes: list[str]) -> list[str]:
    """This rig's volumes that would be replaced (the store, results, ComfyUI's files)."""
    import docker.errors as errors

    found = []
    for volume in volumes:
        name = f"{prefix}-{volume}"
        with engine_errors(f"looking for volume {name}"):
            try:
                docker.sdk().volumes.get(name)
            except errors.NotFound:
                continue
        found.append(name)
    return found


def _remove_volumes(docker: Docker, names: list[str]) -> None:
    removed = docker.remove_volumes(names)
    if len(removed) != len(names):
        raise BackupError(
            f"could not remove {', '.join(sorted(set(names) - set(removed)))}",
            "stop what uses them (`docker ps -a`), then restore again",
        )


@dataclass
class _Staged:
    """The checkout's files written beside their places (``.part``), not yet moved."""

    root: Path
    moves: list[tuple[Path, Path]] = field(default_factory=list)
    made: list[Path] = field(default_factory=list)  # folders this restore created

    def discard(self) -> None:
        for part, _ in self.moves:
            part.unlink(missing_ok=True)
        for folder in reversed(self.made):
            with contextlib.suppress(OSError):
                folder.rmdir()

    def commit(self) -> None:
        env_file = self.root / ".env"
        if env_file.is_file():
            os.replace(env_file, self.root / ".env.before-restore")
        for part, final in self.moves:  # restore.json last: it says the rest is there
            os.replace(part, final)


def _stage_checkout(
    root: Path, archive: Path, manifest: Manifest, files: dict[str, bytes]
) -> _Staged:
    """``.env``, the launcher's state and ``restore.json`` as ``.part`` files; on a full or
    read-only disk, one line and nothing left behind. ``files``: the archive's ``env/.env``
    and ``state/`` files as verified (only the names the kit keeps reach here)."""
    state = root / ".airig"
    wanted = [(root / ".env", files[ENV_MEMBER])]
    wanted += [(state / name, files[f"state/{name}"]) for name in STATE_FILES
               if f"state/{name}" in files]  # fmt: skip
    volumes = sorted({PurePosixPath(e.path).parts[1] for e in manifest.files
                      if e.path.startswith("volumes/")})  # fmt: skip
    pending = {"archive": str(archive), "volumes": volumes, "created_at": manifest.created_at,
               "prepared_at": time.time()}  # fmt: skip
    wanted.append((state / PENDING, json.dumps(pending, indent=1).encode()))
    staged = _Staged(root)
    target = root
    try:
        if not state.is_dir():
            target = state
            state.mkdir()
            staged.made.append(state)
        for final, data in wanted:
            target = final
            part = final.with_name(final.name + ".part")
            staged.moves.append((part, final))
            _write_private(part, data)
    except OSError as exc:
        staged.discard()
        raise BackupError(
            f"cannot write {target}: {exc.strerror or exc}",
            "free space there or make the checkout writable, then restore again; nothing "
            "was changed",
        ) from None
    return staged


def _write_private(path: Path, data: bytes) -> None:
    """``data`` at ``path``, a new file readable by its owner only, on disk before it
    returns. A file or link already there (a cut-off restore's ``.part``) is removed, never
    followed: a link planted there would have the restored secrets written where it points."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def pending(settings: Settings) -> dict[str, Any] | None:
    path = settings.state_dir / PENDING
    if not path.is_file():
        return None
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        raise BackupError(
            f"{path} is unreadable", "run `restore ARCHIVE --yes` again, or delete that file"
        ) from None


def apply_pending(settings: Settings, docker: Docker, say: Callable[[str], None]) -> bool:
    """Put an archive's volume files back (``up``, before a service reads them). True when
    a restore was finished here."""
    todo = pending(settings)
    if todo is None:
        return False
    archive = Path(todo["archive"])
    volumes = [v for v in todo.get("volumes", []) if v in (STATE_VOLUME, *DATA_VOLUMES,
                                                          DATA_VOLUME, *MODEL_VOLUMES)]  # fmt: skip
    say(f"Restoring {', '.join(volumes) or 'nothing'} from {archive.name} …")
    try:
        _spool_and_put(settings, docker, archive, volumes, say)
    except OSError as exc:  # the spool's disk filled up: the volumes were not touched
        raise BackupError(
            f"cannot spool {archive.name}'s files under {settings.state_dir}: "
            f"{exc.strerror or exc}",
            "free space there, then run `python start_services.py up` again: it finishes "
            "the restore",
        ) from None
    (settings.state_dir / PENDING).unlink(missing_ok=True)
    return True


def _spool_and_put(settings: Settings, docker: Docker, archive: Path, volumes: list[str],
                   say: Callable[[str], None] = print) -> None:  # fmt: skip
    """The archive verified while its volume files go into one tar per volume; only
    once it has verified whole do they go into the volumes, and a PostgreSQL store's
    dump into the running postgres service (``pg_store.load``)."""
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="restore-spool-", dir=settings.state_dir) as tmp:
        # one tar per volume, closed below once the archive has been read
        tars = {v: tarfile.open(Path(tmp) / f"{v}.tar", "w") for v in volumes}  # noqa: SIM115
        made: set[tuple[str, str]] = set()
        store = Path(tmp) / "brain.db"  # the store, recorded in before it goes in its tar
        dump = Path(tmp) / "brain.dump"  # the PostgreSQL store, for pg_restore

        def spill(name: str, reader: IO[bytes]) -> None:
            parts = PurePosixPath(name).parts
            if name == PG_DUMP_MEMBER:  # for pg_restore, not a file of the volume
                with dump.open("wb") as out:
                    for chunk in iter(lambda: reader.read(1 << 20), b""):
                        out.write(chunk)
                return
            if parts[0] != "volumes" or parts[1] not in tars:
                return
            if name == STORE_MEMBER:
                with store.open("wb") as out:
                    for chunk in iter(lambda: reader.read(1 << 20), b""):
                        out.write(chunk)
                return
            owner = OWNERS.get(parts[1], 0)
            for depth in range(3, len(parts)):  # its folders first, owned as the file
                folder = "/".join(parts[2:depth])
                if (parts[1], folder) not in made:
                    made.add((parts[1], folder))
                    entry = tarfile.TarInfo(folder)
                    entry.type, entry.mode, entry.uid, entry.gid = (
                        tarfile.DIRTYPE,
                        0o755,
                        owner,
                        owner,
                    )
                    tars[parts[1]].addfile(entry)
            info = tarfile.TarInfo("/".join(parts[2:]))
            with tempfile.TemporaryFile(dir=tmp) as spooled:  # its size before its header
                for chunk in iter(lambda: reader.read(1 << 20), b""):
                    spooled.write(chunk)
                info.size, info.mode, info.uid, info.gid = spooled.tell(), 0o644, owner, owner
                spooled.seek(0)
                tars[parts[1]].addfile(info, spooled)

        try:
            manifest = verify(archive, spill)
            if store.is_file():
                record_restored(store, archive, manifest)
                info = tarfile.TarInfo(PurePosixPath(STORE_MEMBER).name)
                owner = OWNERS[STATE_VOLUME]
                info.size, info.mode, info.uid, info.gid = store.stat().st_size, 0o644, owner, owner
                with store.open("rb") as data:
                    tars[STATE_VOLUME].addfile(info, data)
            if STATE_VOLUME in tars:  # the SQLite snapshot's or, beside it, a dump's kit
                _add_marker(tars[STATE_VOLUME], archive, manifest)
        finally:
            for handle in tars.values():
                with contextlib.suppress(OSError):
                    handle.close()
        _put(settings, docker, {v: Path(tmp) / f"{v}.tar" for v in volumes})
        if dump.is_file():
            pg_store.load(settings, docker, dump, archive, manifest, archive_sha256(archive), say)


def _add_marker(tar: tarfile.TarFile, archive: Path, manifest: Manifest) -> None:
    """``restored.json`` into the state volume's tar, whichever engine the store is on:
    which archive, when its snapshot was taken, and a nonce (each restore's marker is
    a new one: the brain records the marker it applied and never applies it twice)."""
    body = json.dumps({
        "archive": archive.name, "created_at": manifest.created_at,
        "restored_at": time.time(), "restore": uuid.uuid4().hex,
    }).encode()  # fmt: skip
    info = tarfile.TarInfo(RESTORED_MARKER)
    owner = OWNERS[STATE_VOLUME]  # the brain removes it once applied
    info.size, info.mode, info.uid, info.gid = len(body), 0o644, owner, owner
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(body))


def record_restored(store: Path, archive: Path, manifest: Manifest) -> bool:
    """The archive in the restored store's ``backups`` table (airig/brain/store/backups.py),
    as `backup` recorded it with the brain after the snapshot was taken: its name, size,
    sha256, when its snapshot was taken, whether it holds the models. A store this cannot
    write (an older kit's, without the table; a damaged file) is left as it is; False
    then, and the restore goes on: the record is for people, the store is the data."""
    row = (manifest.created_at, archive.name, archive.stat().st_size, archive_sha256(archive),
           int(manifest.models_included))  # fmt: skip
    try:
        conn = sqlite3.connect(store)
        try:
            with conn:
                conn.execute(
                    "INSERT INTO backups (created_at, archive, bytes, sha256, models) "
                    "VALUES (?, ?, ?, ?, ?)",
                    row,
                )
        finally:
            conn.close()  # the last connection: the WAL, if any, goes into the file
    except sqlite3.Error:
        return False
    return True


# Who writes each volume (airig/services/infra.py LAYOUT: the kit's brain and workers run
# as 10001, speaches as 1000, the rest as root): restored files are theirs, or the brain
# could not add a result to a restored plan's folder.
OWNERS = {STATE_VOLUME: 10001, "results": 10001, DATA_VOLUME: 10001, "whisper-models": 1000}


def _put(settings: Settings, docker: Docker, tars: dict[str, Path]) -> None:
    prefix = settings.project_prefix
    mounts = {f"{prefix}-{v}": {"bind": f"/restore/{v}", "mode": "rw"} for v in tars}
    sdk = docker.sdk()
    with engine_errors("creating the container that writes the volumes"):
        writer = sdk.containers.create(
            settings.image, ["true"], volumes=mounts, network_mode="none",
            name=f"{prefix}-restore-writer-{int(time.time())}",
            labels={"airig.role": "restore-writer"},
        )  # fmt: skip
    try:
        for volume, tar in tars.items():
            with engine_errors(f"writing volume {prefix}-{volume}"), tar.open("rb") as data:
                if not writer.put_archive(f"/restore/{volume}", data):
                    raise BackupError(f"the engine refused the files of volume {volume}")
    finally:
        writer.remove(force=True)
