"""The brain's store on PostgreSQL in `backup` and `restore` (AIRIG_BRAIN_STORE=postgres).

`backup` takes ``pg_dump -Fc`` of the brain's database in the postgres container (the
server's own consistent snapshot: one transaction, no writer held up), written on the
service's volume beside the data folder (``postgres.DUMP_DIR``, disk rather than the
container's memory), streamed into the archive as ``volumes/brain-state/brain.dump``
and removed. The SQLite snapshot (``python -m airig.brain --snapshot``) is not taken: it
reads the SQLite file, which a PostgreSQL brain never writes.

`restore` removes the service's volume (``prepare``), so the next `up` starts a fresh
cluster with the restored .env's password; once 01-infra is up and the server answers
``pg_isready`` (``compose up --wait`` waited for its healthcheck), ``load`` puts the dump on
that volume and runs ``pg_restore --clean --if-exists`` in one transaction, before the
brain (03-agents) starts. Every command runs in the container over its unix socket (the
image trusts local connections), so no password is passed or printed.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airig.common.errors import AirigError
from airig.launcher.compose import postgres
from airig.launcher.compose.container import SERVICE_LABEL
from airig.launcher.compose.docker import Docker, engine_errors
from airig.launcher.compose.plan import PROJECT_SUFFIX
from airig.launcher.lifecycle.backup_archive import (
    BackupError,
    Manifest,
    human_bytes,
)
from airig.launcher.settings import Settings

# Where the dumps lie while they are made or read, on the service's volume
DUMP = f"{postgres.DUMP_DIR}/.backup-brain.dump"
RESTORE = f"{postgres.DUMP_DIR}/.restore-brain.dump"
RECORD_SQL = f"{postgres.DUMP_DIR}/.restore-record.sql"
# What pg_dump's custom format starts with (pg_backup_archiver.c: "PGDMP")
DUMP_HEADER = b"PGDMP"
POSTGRES_UID = 999  # the image's postgres user, as 01-infra/compose.yaml runs it
CONNECT = ["-U", postgres.USER, "-d", postgres.DATABASE]
COUNTS_SQL = "SELECT (SELECT count(*) FROM plans), (SELECT count(*) FROM tasks)"
# psql's -v variables, quoted by psql itself (:'name' is a literal): the archive's name
# never becomes SQL text
RECORD = (
    "INSERT INTO backups (created_at, archive, bytes, sha256, models) "
    "VALUES (:created_at, :'archive', :bytes, :'sha256', :models);\n"
)
NOT_RUNNING = (
    "the postgres service is not running (AIRIG_BRAIN_STORE=postgres): a backup is a "
    "consistent dump of the running store"
)


def container(settings: Settings, docker: Docker) -> Any | None:
    """The running postgres container of this rig's 01-infra project, or None."""
    project = f"{settings.project_prefix}-{PROJECT_SUFFIX[postgres.INFRA_STACK]}"
    for found in docker.containers(label=f"com.docker.compose.project={project}"):
        if found.labels.get(SERVICE_LABEL) == postgres.SERVICE:
            return found
    return None


def pg_isready(found: Any) -> tuple[bool, str]:
    """`pg_isready` in the container, over TCP as its healthcheck asks: (ready, its words)."""
    command = ["pg_isready", "-h", "127.0.0.1", "-p", str(postgres.PORT), *CONNECT]
    try:
        with engine_errors("running pg_isready in the postgres container"):
            code, output = found.exec_run(command)
    except AirigError as exc:
        return False, exc.message
    said = output.decode(errors="replace").strip() if isinstance(output, bytes) else ""
    return code == 0, said.splitlines()[-1] if said else f"exit {code}"


def running(settings: Settings, docker: Docker) -> Any:
    """The postgres container, or one line saying it is not running."""
    found = container(settings, docker)
    if found is None:
        raise BackupError(
            NOT_RUNNING, "start it with `python start_services.py up`, then run backup again"
        )
    return found


def dump(found: Any, add: Callable[[Any], object]) -> dict[str, Any]:
    """``pg_dump -Fc`` in the container; ``add`` gets the engine's tar stream of the dump
    (``get_archive``). The store's facts for the manifest."""
    try:
        _run(found, ["pg_dump", "-Fc", "--file", DUMP, *CONNECT], "pg_dump")
        with engine_errors("reading the database's dump"):
            chunks, stat = found.get_archive(DUMP)
            add(chunks)
        facts: dict[str, Any] = {"engine": "postgresql", "format": "pg_dump -Fc"}
        if isinstance(stat, dict) and isinstance(stat.get("size"), int):
            facts["bytes"] = stat["size"]
        facts.update(_counts(found))
        return facts
    finally:
        _remove(found, DUMP)


def _counts(found: Any) -> dict[str, int]:
    """The plans and tasks the dump holds, as the SQLite snapshot says them; {} when the
    server cannot say (the summary shows '?' then: the dump is the data)."""
    try:
        code, output = found.exec_run(["psql", "-tA", "-F", " ", "-c", COUNTS_SQL, *CONNECT])
    except Exception:  # noqa: BLE001 - a count for people, never a failed backup
        return {}
    words = output.decode(errors="replace").split() if isinstance(output, bytes) else []
    if code != 0 or len(words) != 2 or not all(w.isdigit() for w in words):
        return {}
    return {"plans": int(words[0]), "tasks": int(words[1])}


def load(settings: Settings, docker: Docker, spooled: Path, archive: Path,
         manifest: Manifest, sha256: str, say: Callable[[str], None]) -> bool:  # fmt: skip
    """The archive's dump (``spooled``, verified) into the fresh database of the running
    postgres service, with the archive recorded in its ``backups`` table; True when the
    record went in (best effort, as ``restore.record_restored``)."""
    found = container(settings, docker)
    if found is None:
        raise BackupError(
            "the restore holds a PostgreSQL dump but the postgres service is not running",
            "set AIRIG_BRAIN_STORE=postgres in .env (the archive's kit ran on it), then run "
            "`python start_services.py up` again: it finishes the restore",
        )
    ready, said = pg_isready(found)
    if not ready:
        raise BackupError(
            f"the postgres service is not ready for the restore ({said})",
            "see `python start_services.py logs postgres`, then run up again: it finishes "
            "the restore",
        )
    say(f"Loading the store's dump ({human_bytes(spooled.stat().st_size)}) with pg_restore …")
    tar = spooled.with_name(spooled.name + ".tar")
    with tarfile.open(tar, "w") as out:  # streamed from disk: a dump may be large
        out.add(spooled, arcname=Path(RESTORE).name, filter=_theirs)
    with tar.open("rb") as data:
        _send(found, data)
    try:
        _run(found, ["pg_restore", "--clean", "--if-exists", "--no-owner", "--single-transaction",
                     "--exit-on-error", *CONNECT, RESTORE], "pg_restore")  # fmt: skip
    finally:
        _remove(found, RESTORE)
    return _record(found, archive, manifest, sha256)


def _record(found: Any, archive: Path, manifest: Manifest, sha256: str) -> bool:
    """The archive in the restored database's ``backups`` table, as `backup` recorded it
    with the brain after the dump was taken; False when it could not go in."""
    values = {
        "created_at": repr(float(manifest.created_at)), "archive": archive.name,
        "bytes": str(archive.stat().st_size), "sha256": sha256,
        "models": str(int(manifest.models_included)),
    }  # fmt: skip
    try:
        _put(found, {Path(RECORD_SQL).name: RECORD.encode()})
        variables = [arg for key, value in values.items() for arg in ("-v", f"{key}={value}")]
        code, _ = found.exec_run(
            ["psql", "-q", "-v", "ON_ERROR_STOP=1", *variables, "-f", RECORD_SQL, *CONNECT]
        )
    except Exception:  # noqa: BLE001 - the record is for people, the dump is the data
        return False
    finally:
        _remove(found, RECORD_SQL)
    return bool(code == 0)


def _put(found: Any, files: dict[str, bytes]) -> None:
    """Small files into ``postgres.DUMP_DIR`` on the service's volume (``_theirs``)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(_theirs(info), io.BytesIO(data))
    _send(found, buffer.getvalue())


def _theirs(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """A file for the server's user: owned by it, readable by it alone."""
    info.uid = info.gid = POSTGRES_UID
    info.uname = info.gname = ""
    info.mode = 0o600
    return info


def _send(found: Any, data: Any) -> None:
    with engine_errors("writing into the postgres container's volume"):
        if not found.put_archive(postgres.DUMP_DIR, data):
            raise BackupError("the engine refused the files for the postgres container")


def _run(found: Any, command: list[str], what: str) -> None:
    with engine_errors(f"running {what} in the postgres container"):
        code, output = found.exec_run(command)
    if code != 0:
        text = output.decode(errors="replace").strip() if isinstance(output, bytes) else ""
        raise BackupError(
            f"{what} failed in the postgres container: "
            f"{text.splitlines()[-1] if text else f'exit {code}'}",
            "see `python start_services.py logs postgres`; nothing was written",
        )


def _remove(found: Any, path: str) -> None:
    # a leftover file on the volume is never a failure of what ran
    with contextlib.suppress(Exception):
        found.exec_run(["rm", "-f", path])
