"""01-infra's own services: lay out the shared volumes, and serve the data volume.

``python -m airig.services.infra prepare`` runs once as root: a fresh named volume is root-owned,
but speaches runs as uid 1000 and the kit's brain and workers as 10001, so each volume
gets the owner of the image that writes it (a classic source of "permission denied" in
peer kits). ``serve`` is an authenticated file service so users can put inputs (audio,
documents) on the volume the workers read and fetch what tasks wrote.

A shell task can make links anywhere on the data volume (``outputs/x -> /etc`` or
``-> ../../index``), so every request walks its path one component at a time from the
root's descriptor with O_NOFOLLOW (``_walk``): a link anywhere on the path is refused, never
followed, whether it leads out of the volume or into the brain's ``index/``.
"""

# No `from __future__ import annotations`: FastAPI must resolve the route annotations,
# which are local to create_app().

import contextlib
import errno
import hashlib
import hmac
import json
import mimetypes
import os
import re
import secrets
import stat
import sys
import urllib.request
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Annotated, BinaryIO
from urllib.parse import unquote

from airig.common.http_errors import install_error_handlers
from airig.common.secrets import is_placeholder

AIRIG_UID = 10001
WHISPER_UID = 1000  # speaches' "ubuntu" user
VOLUMES_ROOT = Path(os.environ.get("AIRIG_VOLUMES_ROOT", "/volumes"))
LAYOUT = {
    "data": (AIRIG_UID, ["inputs", "outputs"]),
    "results": (AIRIG_UID, []),
    "state": (AIRIG_UID, []),
    "whisper": (WHISPER_UID, []),
    "ollama": (0, ["models"]),
    "comfyui": (0, []),
}
PORT = 8090
# The brain's search index (``index/search.sqlite``): no upload replaces it (a garbage
# file there turned every search into a 500, issue 36 §3).
BRAIN_ONLY = "index"
BRAIN_ONLY_REFUSAL = (
    "{rel} is in index/, the brain's search index, which only the brain writes; upload into inputs/"
)
UPLOAD_PREFIX = ".upload-"  # in-flight uploads: hidden from listings, not writable by name
# Users upload audio and video; the disk is the real bound, this stops a runaway client.
DEFAULT_MAX_UPLOAD = 8 * 1024**3


def prepare(root: Path = VOLUMES_ROOT) -> list[str]:
    """Create the layout and fix ownership; idempotent. Returns what it did."""
    done = []
    for name, (uid, subdirs) in LAYOUT.items():
        volume = root / name
        if not volume.is_dir():
            continue
        for sub in subdirs:
            (volume / sub).mkdir(exist_ok=True)
        for path in [volume, *(volume / s for s in subdirs)]:
            if path.stat().st_uid != uid:
                os.chown(path, uid, uid)
                done.append(f"chown {uid} {path}")
    return done


def create_app():
    """The file service. Imported lazily so `prepare` needs no web stack."""
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import StreamingResponse
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
    from starlette.requests import ClientDisconnect

    root = Path(os.environ.get("FILES_ROOT", "/data")).resolve()
    token = os.environ.get("BRAIN_ADMIN_TOKEN", "")
    if is_placeholder(token):
        raise SystemExit("files: BRAIN_ADMIN_TOKEN is not set (run python start_services.py)")
    limit = max_upload_bytes()
    bearer = HTTPBearer()
    Credentials = Annotated[HTTPAuthorizationCredentials, Depends(bearer)]

    def authorised(cred: Credentials) -> None:
        if not same_secret(cred.credentials, token):
            raise HTTPException(401, "invalid token")

    def vet(rel: str) -> None:
        reason = bad_path_reason(rel)
        if reason:
            raise HTTPException(400, f"{reason}; give a path inside the data volume")

    app = FastAPI(title="airig files", dependencies=[])
    install_error_handlers(app)  # the kit's one error body (airig/common/http_errors.py)

    @app.get("/health")
    def health() -> dict:
        # the limit too: `submit --inputs-dir` refuses a file over it before it uploads any
        return {"status": "ok", "root": str(root), "max_upload_bytes": limit}

    @app.get("/files/{rel:path}", dependencies=[Depends(authorised)])
    def get(rel: str, sha256: bool = False):
        vet(rel)
        try:
            fd = _walk(root, _parts(rel), last=True)
        except ThroughLink as link:
            raise HTTPException(400, through_link(str(link))) from None
        except (FileNotFoundError, NotADirectoryError):  # a file on the way: nothing there
            raise HTTPException(404, f"no file {rel}") from None
        except OSError as exc:
            raise HTTPException(*_os_failure(exc, rel)) from None
        streamed = False
        try:
            kind = os.fstat(fd)
            if stat.S_ISDIR(kind.st_mode):
                return {"path": rel, "entries": _listing(fd, sha256)}
            if not stat.S_ISREG(kind.st_mode):  # a FIFO, a socket: nothing to fetch
                raise HTTPException(404, f"no file {rel}")
            # Served from the descriptor the walk opened: the path is never looked up
            # again, so a link swapped in now changes nothing.
            source = os.fdopen(fd, "rb")
            streamed = True
        except OSError as exc:
            raise HTTPException(*_os_failure(exc, rel)) from None
        finally:
            if not streamed:
                os.close(fd)
        return StreamingResponse(
            _chunks(source),
            media_type=mimetypes.guess_type(_parts(rel)[-1])[0] or "application/octet-stream",
            headers={
                "content-length": str(kind.st_size),
                "last-modified": formatdate(kind.st_mtime, usegmt=True),
            },
        )

    @app.put("/files/{rel:path}", dependencies=[Depends(authorised)], status_code=201)
    async def put(rel: str, request: Request) -> dict:
        try:
            return await write(rel, request)
        except HTTPException as refused:
            # one line per refused upload in `logs files`, which the client's hint names
            # (not an interrupted one: no client is left to point there)
            if refused.detail != INTERRUPTED:
                log_refusal(rel, refused.status_code, str(refused.detail))
            raise

    async def write(rel: str, request: Request) -> dict:
        vet(rel)
        parent_rel, _, name = rel.rpartition("/")
        if name in ("", "."):
            raise HTTPException(400, f"name a file to write, e.g. inputs/talk.wav (got {rel!r})")
        if _in_flight(name):
            raise HTTPException(400, f"names starting {UPLOAD_PREFIX} are reserved; rename it")
        if _parts(rel)[:1] == (BRAIN_ONLY,):  # the search index: written by the brain alone
            raise HTTPException(403, BRAIN_ONLY_REFUSAL.format(rel=rel))
        # Only the folder is walked: a link in the file's own place is replaced by the
        # upload (os.replace), never written through.
        declared = request.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            raise too_large(name, limit, int(declared))
        expected = request.headers.get("x-content-sha256", "").strip().lower()
        if expected and not SHA256_HEX.match(expected):
            raise HTTPException(400, "X-Content-SHA256 must be 64 hex digits")
        try:
            dir_fd = _walk(root, _parts(parent_rel), make=True)
            try:
                size = await _receive(request, dir_fd, name, limit, expected or None)
            finally:
                os.close(dir_fd)
        except ThroughLink as link:
            raise HTTPException(400, through_link(str(link))) from None
        except UploadTooLarge:
            raise too_large(name, limit, None) from None
        except UploadCorrupt as exc:
            raise HTTPException(422, str(exc)) from None
        except ClientDisconnect:
            # Nobody is left to read this; answering keeps the disconnect out of the logs.
            raise HTTPException(400, INTERRUPTED) from None
        except OSError as exc:
            raise HTTPException(*_os_failure(exc, rel)) from None
        return {"path": rel, "size": size}

    return app


class ThroughLink(Exception):
    """A component of a request's path is a link: refused, never followed. Its argument
    is the path up to and with the link."""


def through_link(link: str) -> str:
    """The refusal of a path through ``link`` (the path up to it: short, and it says
    which component to look at)."""
    return (
        f"{link} is a link on the data volume, which the file service never follows "
        "(a task may have made it); give the real path of the file or folder"
    )


class UploadTooLarge(Exception):
    """The body passed FILES_MAX_UPLOAD_BYTES while streaming."""


class UploadCorrupt(Exception):
    """The body's sha256 is not the X-Content-SHA256 the client sent."""


SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
# (device, inode) -> ((size, mtime_ns), sha256): a second `submit --inputs-dir` of a
# folder of videos must not read every video again. Bounded: old entries just go.
_DIGESTS: dict[tuple[int, int], tuple[tuple[int, int], str]] = {}
MAX_DIGESTS = 4096
CHUNK = 1 << 20
# Never through a link; O_NONBLOCK: a FIFO planted on the volume must not hang a thread.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _digest(dir_fd: int, name: str) -> str | None:
    """The sha256 of the regular file ``name`` in ``dir_fd`` (None for anything else, a
    link included, or a file gone since the listing)."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as source:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            key, seen = (st.st_dev, st.st_ino), (st.st_size, st.st_mtime_ns)
            cached = _DIGESTS.get(key)
            if cached and cached[0] == seen:
                return cached[1]
            digest = hashlib.sha256()
            while chunk := source.read(CHUNK):
                digest.update(chunk)
        except OSError:
            return None
    if len(_DIGESTS) >= MAX_DIGESTS:
        _DIGESTS.pop(next(iter(_DIGESTS)))
    _DIGESTS[key] = (seen, digest.hexdigest())
    return digest.hexdigest()


def _chunks(source: BinaryIO) -> Iterator[bytes]:
    with source:  # closed too when a client leaves mid-file (the generator is closed)
        while chunk := source.read(CHUNK):
            yield chunk


def max_upload_bytes() -> int:
    raw = os.environ.get("FILES_MAX_UPLOAD_BYTES", "").strip()
    if not raw:
        return DEFAULT_MAX_UPLOAD
    if not (raw.isascii() and raw.isdigit()) or int(raw) == 0:
        raise SystemExit(
            f"files: FILES_MAX_UPLOAD_BYTES must be a positive number of bytes, got {raw!r} "
            "(fix it in .env)"
        )
    return int(raw)


def listen_host() -> str:
    """Loopback unless told otherwise: compose sets 0.0.0.0 inside the container, whose
    port is published on AIRIG_BIND_ADDRESS; a plain process must not face the LAN."""
    return os.environ.get("FILES_LISTEN_HOST", "").strip() or "127.0.0.1"


def same_secret(given: str, expected: str) -> bool:
    """Constant-time compare of a bearer token with the configured one, as bytes.

    ASGI servers decode header bytes as latin-1, so encoding back the same way recovers
    what the client sent; the environment decodes with surrogateescape, ditto. Comparing
    str would raise (500) on any non-ASCII character instead of answering 401.
    """
    try:
        sent = given.encode("latin-1")
    except UnicodeEncodeError:  # not something a real header can carry
        return False
    return hmac.compare_digest(sent, expected.encode("utf-8", "surrogateescape"))


def bad_path_reason(rel: str) -> str | None:
    """Why a request path is refused, or None. The server already decoded it once; the
    once-more-decoded form is checked too, so a proxy that decodes twice cannot turn
    ``%252e%252e`` into ``..`` behind this check."""
    for form in (rel, unquote(rel)):
        if "\x00" in form:
            return "path contains a NUL byte"
        if form.startswith(("/", "\\")):
            return "path must be relative, not absolute"
        if ".." in form.replace("\\", "/").split("/"):
            return "path must not contain '..'"
    return None


def _parts(rel: str) -> tuple[str, ...]:
    """The components of a vetted request path (``..`` is refused before this); empty
    and ``.`` components name the folder they are in, as they always did."""
    return tuple(part for part in rel.split("/") if part not in ("", "."))


def _in_flight(name: str) -> bool:
    return name.startswith(UPLOAD_PREFIX)


INTERRUPTED = "upload interrupted by the client"
LIMIT_HEADER = "X-Upload-Limit"  # a 413's limit in bytes, for a client's own message


def too_large(name: str, limit: int, size: int | None):
    """The 413 of an upload over FILES_MAX_UPLOAD_BYTES: the file, its size (when the
    client declared it; else what streamed past the limit), the limit and the knob."""
    from fastapi import HTTPException

    what = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return HTTPException(
        413,
        f"{name} is {what}, over the file service's upload limit of {limit} bytes "
        f"({_gib(limit)}); raise FILES_MAX_UPLOAD_BYTES in .env and run `python "
        "start_services.py up`, or split the file",
        headers={LIMIT_HEADER: str(limit)},
    )


def _gib(size: int) -> str:
    return f"{size / 1024**3:.1f} GiB"


def log_refusal(rel: str, status: int, detail: str) -> None:
    """A refused upload as one JSON line on stdout (`docker compose logs files`): uvicorn
    runs at level warning, so without this the log held nothing about it."""
    line = {"event": "upload.refused", "path": rel, "status": status, "detail": detail}
    print(json.dumps(line, ensure_ascii=False), flush=True)


def _os_failure(exc: OSError, rel: str) -> tuple[int, str]:
    if isinstance(exc, NotADirectoryError):
        return 409, f"a folder on the way to {rel} is a file; remove it or pick another path"
    if isinstance(exc, IsADirectoryError):
        return 409, f"{rel} is a folder; pick a file name inside it"
    if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link that _walk did not see as one
        return 400, through_link(rel)
    if exc.errno == errno.ENAMETOOLONG:
        return 400, "a name in the path is too long; shorten it"
    if exc.errno == errno.ENOSPC:
        return 507, "the data volume is full; free space and upload again"
    return 500, f"{rel}: {exc.strerror or exc}"


def _walk(root: Path, parts: tuple[str, ...], *, make: bool = False, last: bool = False) -> int:
    """A descriptor of root/parts, one component at a time, each opened in its parent's
    descriptor with O_NOFOLLOW, so no link on the volume is ever followed (ThroughLink),
    and no path is looked up twice (a link swapped in meanwhile changes nothing). Every
    component is a folder (made as needed with ``make``), except the last one with
    ``last``: a file or a folder, the caller checks which (fstat)."""
    folder = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, folder)
    try:
        for i, part in enumerate(parts):
            if make:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            flags = READ_FLAGS if last and i == len(parts) - 1 else folder
            try:
                inner = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                # Linux answers ENOTDIR for O_DIRECTORY|O_NOFOLLOW on a link, ELOOP for
                # O_NOFOLLOW alone: only the link's own lstat tells it from a file.
                if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_link(part, fd):
                    raise ThroughLink("/".join(parts[: i + 1])) from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


async def _receive(request, dir_fd: int, name: str, limit: int, sha256: str | None) -> int:
    """Stream the body into a fresh temp file beside `name`, then rename it into place:
    readers never see half a file, and O_EXCL|O_NOFOLLOW means a planted link is never
    opened. The temp file goes on any failure, disconnect or cancellation."""
    temp = f"{UPLOAD_PREFIX}{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    size = 0
    digest = hashlib.sha256()
    try:
        with os.fdopen(os.open(temp, flags, 0o644, dir_fd=dir_fd), "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise UploadTooLarge
                out.write(chunk)
                digest.update(chunk)
        if sha256 and digest.hexdigest() != sha256:
            raise UploadCorrupt(
                f"{name}: the body's sha256 is {digest.hexdigest()}, not the "
                f"X-Content-SHA256 {sha256}; the old file (if any) is kept, upload it again"
            )
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    return size


def _listing(dir_fd: int, sha256: bool) -> list[tuple]:
    """The folder's files as (name, size) and sub-folders as ("name/", size), sorted; with
    ``sha256`` each with its file's hash (None for a folder): `submit --inputs-dir` uploads
    only what is not there yet, and a file of the same name and size may still differ.
    Only what a GET would serve is listed: links (which GET refuses), FIFOs and the like
    are left out, and nothing is stat'ed through a link."""
    entries = []
    with os.scandir(dir_fd) as found:
        for entry in found:
            if _in_flight(entry.name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:  # gone since the folder was read
                continue
            if stat.S_ISDIR(st.st_mode):
                entries.append((entry.name + "/", st.st_size))
            elif stat.S_ISREG(st.st_mode):
                entries.append((entry.name, st.st_size))
    entries.sort()
    if sha256:
        return [(name, size, None if name.endswith("/") else _digest(dir_fd, name))
                for name, size in entries]  # fmt: skip
    return entries


def check(port: int = PORT) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=4) as r:
            return 0 if json.load(r).get("status") == "ok" else 1
    except OSError:
        return 1


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "prepare":
        for line in prepare():
            print(json.dumps({"event": "volume.prepare", "action": line}))
        print(json.dumps({"event": "volume.ready", "root": str(VOLUMES_ROOT)}))
        return 0
    if command == "serve":
        import uvicorn

        uvicorn.run(create_app(), host=listen_host(), port=PORT, log_level="warning")
        return 0
    if command == "check":
        return check()
    print("usage: python -m airig.services.infra prepare|serve|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
