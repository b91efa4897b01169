"""`restore ARCHIVE`: the kit an archive of `backup` holds, on a fresh clone or over a kit.

In two halves, so nothing is half-started:

1. ``prepare`` (before any container): the archive verified whole (one line and nothing
   touched if it is corrupt, truncated or foreign); the kit must be stopped; a checkout or
   an engine that has this rig's data needs ``--yes`` (its data volumes are then removed,
   its ``.env`` kept as ``.env.before-restore``); ``.env`` and ``.airig/``'s state
   written; ``.airig/restore.json`` records what `up` still has to put back.
2. ``apply_pending`` (run by `up` once 01-infra has made the volumes, before any service
   that reads them starts): the archive verified again while its volume files are
   streamed into the volumes through a container of the kit's image that never starts;
   then ``restore.json`` goes. If `up` stops before that, the next `up` finishes it.

Models the archive does not hold are pulled and verified by `up`'s init containers, as on
a first `up`.
"""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO, Any

from airig.launcher.backup import DATA_VOLUMES, MODEL_VOLUMES
from airig.launcher.backup_archive import BackupError, Manifest, verify
from airig.launcher.docker import Docker, engine_errors
from airig.launcher.settings import Settings, load_settings

PENDING = "restore.json"
STATE_VOLUME = "brain-state"


def prepare(root: Path, archive: Path, yes: bool, docker: Docker,
            say: Callable[[str], None]) -> Manifest:  # fmt: skip
    """Check everything, then write the checkout's half; ``apply_pending`` does the rest."""
    archive = archive.expanduser().resolve()
    say(f"Verifying {archive.name} …")
    manifest = verify(archive)
    prefixes = {manifest.project_prefix}
    env_file = root / ".env"
    if env_file.is_file():
        prefixes.add(load_settings(root).project_prefix)
    running = _running(docker, prefixes)
    if running:
        raise BackupError(
            f"the kit is running ({', '.join(running)}): a restore replaces its store",
            "stop it first with `python start_services.py down`, then restore again",
        )
    present = _present_volumes(docker, manifest.project_prefix)
    had = [".env"] if env_file.is_file() else []
    if (had or present) and not yes:
        what = ", ".join(had + present)
        raise BackupError(
            f"this kit already has data ({what}); the restore would replace it",
            "add --yes to replace it (.env is kept as .env.before-restore)",
        )
    if present:
        _remove_volumes(docker, present)
    _write_checkout(root, archive, manifest)
    return manifest


def _running(docker: Docker, prefixes: set[str]) -> list[str]:
    names = []
    for prefix in sorted(prefixes):
        for project in (f"{prefix}-{s}" for s in ("infra", "compute", "agents")):
            names += [c.name for c in docker.containers(
                label=f"com.docker.compose.project={project}")]  # fmt: skip
    return names


def _present_volumes(docker: Docker, prefix: str) -> list[str]:
    """This rig's volumes that would be replaced (the store, results, ComfyUI's files)."""
    import docker.errors as errors

    found = []
    for volume in (STATE_VOLUME, *DATA_VOLUMES):
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


def _write_checkout(root: Path, archive: Path, manifest: Manifest) -> None:
    state = root / ".airig"
    state.mkdir(exist_ok=True)
    env_file = root / ".env"
    if env_file.is_file():
        os.replace(env_file, root / ".env.before-restore")
    files: dict[str, bytes] = {}

    def keep(name: str, reader: IO[bytes]) -> None:
        if name.startswith(("env/", "state/")):
            files[name] = reader.read()

    verify(archive, keep)  # its bytes as verified, not a second unchecked read
    _write_private(env_file, files["env/.env"])
    for name, data in files.items():
        if name.startswith("state/"):
            _write_private(state / PurePosixPath(name).name, data)
    volumes = sorted({PurePosixPath(e.path).parts[1] for e in manifest.files
                      if e.path.startswith("volumes/")})  # fmt: skip
    pending = {"archive": str(archive), "volumes": volumes, "created_at": manifest.created_at,
               "prepared_at": time.time()}  # fmt: skip
    _write_private(state / PENDING, json.dumps(pending, indent=1).encode())


def _write_private(path: Path, data: bytes) -> None:
    part = path.with_name(path.name + ".part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(part, path)


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
                                                          *MODEL_VOLUMES)]  # fmt: skip
    say(f"Restoring {', '.join(volumes) or 'nothing'} from {archive.name} …")
    with tempfile.TemporaryDirectory(prefix="airig-restore-") as tmp:
        # one tar per volume, closed below once the archive has been read
        tars = {v: tarfile.open(Path(tmp) / f"{v}.tar", "w") for v in volumes}  # noqa: SIM115
        made: set[tuple[str, str]] = set()

        def spill(name: str, reader: IO[bytes]) -> None:
            parts = PurePosixPath(name).parts
            if parts[0] != "volumes" or parts[1] not in tars:
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
            verify(archive, spill)
        finally:
            for handle in tars.values():
                handle.close()
        _put(settings, docker, {v: Path(tmp) / f"{v}.tar" for v in volumes})
    (settings.state_dir / PENDING).unlink(missing_ok=True)
    return True


# Who writes each volume (airig/services/infra.py LAYOUT: the kit's brain and workers run
# as 10001, speaches as 1000, the rest as root): restored files are theirs, or the brain
# could not add a result to a restored plan's folder.
OWNERS = {STATE_VOLUME: 10001, "results": 10001, "whisper-models": 1000}


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
