"""Put a folder of this machine onto the shared data volume: `submit --inputs-dir ~/talks`.

Workers read the data volume, not the host, so the folder's files go through 01-infra's
file service (``airig.services.infra``) into ``inputs/<folder name>/``. Only what is not
there yet is sent: the service lists the folder with each file's sha256, and a file of
the same name and hash is skipped (a second submit of 50 talks sends nothing). Every
upload carries its sha256, which the service checks before the file replaces the old
one, so a cut connection never leaves half a video under the real name.

Only the folder's own files go (not sub-folders, not hidden files, not links that lead
out of it): a recipe's glob names what it reads, and a user who points at ``~`` must not
upload their home.

A file over the service's upload limit (``FILES_MAX_UPLOAD_BYTES``, which its ``/health``
answers) is refused before anything is sent, in one line that says the file, its size,
the limit and the knob; a 413 all the same (the limit changed meanwhile) says the same.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath
from typing import Any
from urllib.parse import quote

import requests

from airig.common.errors import AirigError
from airig.launcher.brain_client import url_host
from airig.launcher.settings import Settings

# A file keeps its name on the data volume (Unicode letters and all, NFC), less only what
# is unsafe there: a separator (``/``, and ``\\``, which a payload's DataPath refuses),
# NUL and other control characters, the bidirectional controls that make ``gpj.exe`` read
# as ``exe.jpg``, a leading ``-`` or ``.`` (an option to a tool; hidden, ``..``).
UNSAFE_CHARS = re.compile(
    r"[\x00-\x1f\x7f-\x9f/\\\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]+"
)
# The file system allows 255 bytes a name; outputs named after an input add to its stem
# (``<stem>-pages``, ``.<stem>.md.partial``), so an input's name keeps at most this many.
NAME_BYTES = 200
# The data-volume folder made from the host folder's name is also written into the plan's
# text (``{{ inputs_dir }}``) and its globs: letters and digits of any script and
# ``. _ -``; quotes, glob characters, spaces and the rest become ``-``.
FOLDER_UNSAFE = re.compile(r"[^\w.-]+")
UPLOAD_TIMEOUT_S = 600.0
GIB = 1024**3
LIMIT_KNOB = "FILES_MAX_UPLOAD_BYTES"


@dataclass
class Synced:
    """Where the inputs are on the data volume, and what this run sent."""

    data_dir: str  # e.g. "inputs/talks"
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    sent_bytes: int = 0


def is_host_path(value: str) -> bool:
    """A path on this machine (absolute, ~, or a drive), not one on the data volume."""
    return value.startswith(("/", "~")) or bool(PureWindowsPath(value).drive)


def files_url(settings: Settings) -> str:
    address = settings.bind_address or "127.0.0.1"
    if address in ("0.0.0.0", "::", "[::]"):
        address = "127.0.0.1"
    return f"http://{url_host(address)}:{settings.files_port}/files"


def local_files(folder: Path) -> list[Path]:
    """The folder's own regular files, sorted; one-line errors for what cannot be used."""
    if not folder.exists():
        raise AirigError(f"--inputs-dir {folder} does not exist", "give a folder of input files")
    if not folder.is_dir():
        raise AirigError(f"--inputs-dir {folder} is a file", "give the folder that holds it")
    root = folder.resolve()
    found = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.is_symlink() and root not in path.resolve().parents:
            continue
        found.append(path)
    if not found:
        raise AirigError(
            f"--inputs-dir {folder} holds no files (sub-folders and hidden files are not sent)",
            "put the inputs directly in that folder",
        )
    return found


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _fit(name: str, limit: int, keep_suffix: bool) -> str:
    """``name`` cut to ``limit`` UTF-8 bytes at a character boundary, its suffix kept."""
    if len(name.encode()) <= limit:
        return name
    stem, dot, suffix = name.rpartition(".") if keep_suffix else ("", "", "")
    if not dot or not stem or len(suffix.encode()) > 16:
        stem, dot, suffix = name, "", ""
    room = limit - len((dot + suffix).encode())
    cut = stem.encode()[:room].decode("utf-8", "ignore").rstrip()
    return cut + dot + suffix


def volume_name(name: str) -> str:
    """The name a host file gets on the data volume: the user's own, less what is unsafe
    there (``UNSAFE_CHARS`` become ``-``; a leading ``-``/``.`` goes), in NFC (the form
    macOS and Linux agree on), at most NAME_BYTES bytes with its suffix kept."""
    safe = UNSAFE_CHARS.sub("-", unicodedata.normalize("NFC", name)).lstrip("-. ")
    return _fit(safe, NAME_BYTES, keep_suffix=True) or "file"


def data_folder_for(folder: Path) -> str:
    raw = unicodedata.normalize("NFC", folder.expanduser().resolve().name)
    name = FOLDER_UNSAFE.sub("-", raw).strip("-.")
    return f"inputs/{_fit(name, 100, keep_suffix=False).strip('-.') or 'inputs'}"


class FileService:
    """The few calls of the file service this needs, with one-line errors."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}

    def _fail(self, what: str, exc: Exception | None, response: Any = None) -> AirigError:
        if response is not None:
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text[:200]
            # the service writes a line for each upload it refuses (upload.refused), none
            # for a listing: a log is named only where it holds the refusal
            logged = "`python start_services.py logs files` has the refusal; "
            return AirigError(
                f"the file service refused {what}: HTTP {response.status_code}: {detail}",
                f"{logged if what.startswith('uploading') else ''}`python start_services.py "
                "status` shows whether the file service is healthy",
            )
        return AirigError(
            f"cannot reach the file service at {self.base_url} ({type(exc).__name__})",
            "start the kit with `python start_services.py up` (or set FILES_PORT as it runs)",
        )

    def hashes(self, data_dir: str) -> dict[str, str | None]:
        """name -> sha256 of what the data-volume folder holds ({} when it is new)."""
        url = f"{self.base_url}/{quote(data_dir)}"
        try:
            response = requests.get(url, params={"sha256": "true"}, headers=self.headers,
                                    timeout=UPLOAD_TIMEOUT_S)  # fmt: skip
        except requests.RequestException as exc:
            raise self._fail(f"listing {data_dir}", exc) from None
        if response.status_code == 404:
            return {}
        if response.status_code != 200:
            raise self._fail(f"listing {data_dir}", None, response)
        entries = response.json().get("entries", [])
        return {e[0]: (e[2] if len(e) > 2 else None) for e in entries if not e[0].endswith("/")}

    def limit(self) -> int | None:
        """The service's upload limit in bytes; None when it does not say (an older kit's
        service, or no answer: the upload then finds out)."""
        url = self.base_url.rsplit("/files", 1)[0] + "/health"
        try:
            found = requests.get(url, timeout=10).json().get("max_upload_bytes")
        except (requests.RequestException, ValueError, AttributeError):
            return None
        return found if isinstance(found, int) and not isinstance(found, bool) else None

    def put(self, path: Path, rel: str, sha256: str) -> None:
        headers = {**self.headers, "X-Content-SHA256": sha256}
        try:
            with path.open("rb") as body:
                response = requests.put(f"{self.base_url}/{quote(rel)}", data=body,
                                        headers=headers, timeout=UPLOAD_TIMEOUT_S)  # fmt: skip
        except requests.RequestException as exc:
            raise self._fail(f"uploading {path.name}", exc) from None
        except OSError as exc:
            raise AirigError(f"cannot read {path}: {exc.strerror}", "check the file") from None
        if response.status_code == 413:
            said = response.headers.get("X-Upload-Limit", "")
            raise over_limit([path], int(said) if said.isdigit() else None)
        if response.status_code != 201:
            raise self._fail(f"uploading {path.name}", None, response)


def _size(size: int) -> str:
    """``9.1 GiB, 9771234567 bytes``: readable, and exact where the limit is in bytes."""
    for unit, scale in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}, {size} bytes"
    return f"{size} bytes"


def over_limit(paths: list[Path], limit: int | None, sent_nothing: bool = False) -> AirigError:
    """Files over the file service's upload limit, in one line that needs no log: each
    file and its size, the limit, and the knob with a value that takes them."""
    sizes = {path: path.stat().st_size for path in paths}
    shown = ", ".join(f"{p.name} ({_size(n)})" for p, n in sizes.items())
    verb = "is" if len(paths) == 1 else "are"
    cap = f" of {_size(limit)}" if limit is not None else ""
    enough = -(-max(sizes.values()) // GIB) * GIB  # the largest, up to a whole GiB
    return AirigError(
        f"{shown} {verb} over the file service's upload limit{cap}"
        f"{'; nothing was uploaded' if sent_nothing else ''}",
        f"raise it: {LIMIT_KNOB}={enough} in .env, then `python start_services.py up`; "
        "or split the file",
    )


def sync(folder: Path, settings: Settings, service: FileService | None = None) -> Synced:
    """Upload what ``folder`` holds and the data volume lacks; where it all is now."""
    folder = folder.expanduser()
    files = local_files(folder)
    service = service or FileService(files_url(settings), settings.brain_admin_token)
    names = {path: volume_name(path.name) for path in files}
    clash = [p.name for p in files if list(names.values()).count(names[p]) > 1]
    if clash:
        shown = ", ".join(ascii(n)[1:-1] if not n.isprintable() else n for n in clash[:4])
        raise AirigError(
            f"--inputs-dir {folder}: {shown} would have the same name on the data volume "
            "(names are compared in Unicode NFC, with control characters, / and \\ as -, "
            f"cut to {NAME_BYTES} bytes)",
            "rename one of them",
        )
    synced = Synced(data_folder_for(folder))
    there = service.hashes(synced.data_dir)
    digests = {path: sha256_of(path) for path in files}
    sending = [path for path in files if there.get(names[path]) != digests[path]]
    limit = service.limit() if sending else None
    too_big = [p for p in sending if limit is not None and p.stat().st_size > limit]
    if too_big:  # before any upload: not half a folder, then a refusal
        raise over_limit(too_big, limit, sent_nothing=True)
    for path in files:
        name = names[path]
        if path not in sending:
            synced.skipped.append(name)
            continue
        service.put(path, f"{synced.data_dir}/{name}", digests[path])
        synced.uploaded.append(name)
        synced.sent_bytes += path.stat().st_size
    return synced
