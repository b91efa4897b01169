"""A fan-out group's items from ZIM archives (PLANS.md, "Fan-out", ``zim``).

``for_each: {zim: "inputs/wiki/*.zim", mimetype: "text/html", path: "A/*"}``: the entries
of each archive the pattern matches (a glob on the data volume, as ``glob`` reads one),
those whose MIME type and path match the filters, redirects left out, in the archive's
path order. Each entry is extracted once onto the data volume beside its archive, in
``.<archive name>.entries/<sha256 of the content>/<safe name>``: the same content is never
written twice, a dot folder no ``glob`` takes, and a file name made from the entry's path
with every character that is not a letter, digit, ``.``, ``-`` or ``_`` replaced (no
``..``, ``/``, NUL or control character of an archive ever reaches a path). Each item is
a file item as a glob's (``path``, ``name``, ``stem``, ``suffix``, ``dir``) plus the
entry's ``entry`` (its path in the archive), ``title``, ``mimetype``, ``archive``,
``sha256`` and ``bytes``, so every executor reads it as it reads any uploaded file.

Read with libzim (openZIM's own reader); a file that is no ZIM archive, or is cut short,
is one ItemError naming it. The brain extracts at submission, as it hashes a glob's files
then: the executors see plain files, on whichever worker claims them.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import mimetypes
import os
import re
import secrets
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from libzim.reader import Archive  # type: ignore[import-untyped]

from airig.brain.plans.items import SUFFIX, ItemError, glob_items, item_values
from airig.common.write_paths import UNSAFE

FILTERS = ("mimetype", "path")
# Archives one pattern may take, and entries one group may look at (a filter that matches
# little of a Wikipedia of 20 million entries is refused, not read for minutes).
MAX_ARCHIVES = 64
MAX_SCANNED = 2_000_000
# One entry is read into memory whole (libzim's Python reader has no partial read).
MAX_ENTRY_BYTES = 1 << 30
TEXT_CHARS = 200  # an item's title and entry as text fields
NAME_BYTES = 120  # an extracted file's name (NAME_MAX is 255: room for an output's own suffix)
WRITE_CHUNK = 1 << 20
# The standard library's own table only (not /etc/mime.types): the same name on every host.
_TYPES = mimetypes.MimeTypes()


@dataclass(frozen=True)
class ZimSource:
    """What a ``zim`` group reads: the archives' pattern and the entries' filters."""

    archives: str
    mimetype: str | None = None
    path: str | None = None


def read_source(spec: dict[str, Any]) -> ZimSource:
    """The ``for_each`` mapping as a ZimSource; ItemError naming the bad field."""
    values: dict[str, str] = {}
    for name in ("zim", *FILTERS):
        value = spec.get(name)
        if value is None and name != "zim":
            continue
        if not isinstance(value, str) or not value or "\x00" in value:
            raise ItemError(f"{name} is a text pattern (e.g. zim: \"inputs/wiki/*.zim\", "
                            "mimetype: \"text/html\", path: \"A/*\")")  # fmt: skip
        values[name] = value
    return ZimSource(values["zim"], values.get("mimetype"), values.get("path"))


def zim_items(data_dir: Path, source: ZimSource, limit: int) -> list[dict[str, Any]]:
    """The matching entries of every archive ``source`` names, extracted, as items; at
    most ``limit`` + 1 (more is refused by the caller from the count, and then nothing is
    extracted). ItemError (one line) for an archive that cannot be read, an entry too
    large, or a data volume that cannot take the files."""
    archives = glob_items(data_dir, source.archives, MAX_ARCHIVES)
    if len(archives) > MAX_ARCHIVES:
        raise ItemError(f"zim {source.archives!r:.120} matches more than {MAX_ARCHIVES} "
                        "archives; name fewer")  # fmt: skip
    root = data_dir.resolve()
    found: list[tuple[str, Archive, Any, Any]] = []
    for archive_item in archives:
        relative = archive_item["path"]
        archive = open_archive(root / relative, relative)
        for entry, item in matching(archive, source, relative):
            found.append((relative, archive, entry, item))
            if len(found) > limit:
                return [{"index": i} for i in range(len(found))]  # counted, never extracted
    names: set[str] = set()
    return [_extracted(root, relative, entry, item, index, names)
            for index, (relative, _archive, entry, item) in enumerate(found)]  # fmt: skip


def open_archive(path: Path, relative: str) -> Archive:
    try:
        return Archive(str(path))
    except (RuntimeError, OSError) as exc:
        raise ItemError(f"zim {relative!r:.160} is not a readable ZIM archive "
                        f"({_one_line(exc)}); give a whole .zim file, as Kiwix publishes "
                        "them") from None  # fmt: skip


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _prefix(pattern: str) -> str:
    """The literal start of a path pattern, before its first wildcard."""
    found = re.search(r"[*?\[]", pattern)
    return pattern if found is None else pattern[: found.start()]


def _first_at_or_after(archive: Archive, prefix: str) -> int:
    """The first entry whose path sorts at or after ``prefix``: entries are numbered in
    their paths' byte order (which is a Python text's order), so a path filter with a
    literal start reads only its own part of a large archive."""
    low, high = 0, archive.entry_count
    while low < high:
        middle = (low + high) // 2
        if archive._get_entry_by_id(middle).path < prefix:
            low = middle + 1
        else:
            high = middle
    return low


def _pattern(glob: str | None, flags: int) -> re.Pattern[str] | None:
    return re.compile(fnmatch.translate(glob), flags) if glob else None


def matching(archive: Archive, source: ZimSource, relative: str) -> Iterator[tuple[Any, Any]]:
    """(entry, item) of each entry that is no redirect and matches the filters."""
    mime = _pattern(source.mimetype, re.IGNORECASE)  # text/HTML is text/html
    path = _pattern(source.path, 0)
    prefix = _prefix(source.path) if source.path else ""
    try:
        start = _first_at_or_after(archive, prefix) if prefix else 0
        for number in range(start, archive.entry_count):
            if number - start >= MAX_SCANNED:
                raise ItemError(f"zim {relative!r:.160}: {MAX_SCANNED} entries read and the "
                                "filters still go on; narrow them with a path with a literal "
                                "start (path: \"A/Physics*\")")  # fmt: skip
            entry = archive._get_entry_by_id(number)
            if prefix and not entry.path.startswith(prefix):
                break  # past the part of the archive the prefix names
            if entry.is_redirect or (path is not None and not path.match(entry.path)):
                continue
            item = entry.get_item()
            if mime is None or mime.match(item.mimetype.split(";")[0].strip()):
                yield entry, item
    except RuntimeError as exc:
        raise ItemError(f"zim {relative!r:.160} is damaged ({_one_line(exc)}); give a whole "
                        ".zim file") from None  # fmt: skip


def clean_text(text: str, limit: int = TEXT_CHARS) -> str:
    """An archive's text as an item value: control and bidirectional characters out (an
    item refuses them in what reads as a path), no ``{{`` (items are never templates)."""
    text = UNSAFE.sub("\ufffd", text).replace("{{", "{ {")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def safe_name(entry: str, mimetype: str) -> str:
    """A file name for an entry: its whole path in letters, digits, ``.``, ``-`` and
    ``_`` (in its NFKC form, so no fullwidth ``．．`` or ``／`` survives), no leading dot,
    the suffix its MIME type gives when the path has none (``Zürich`` -> ``Zürich.html``)."""
    name = re.sub(r"[^\w.-]+", "_", unicodedata.normalize("NFKC", entry))
    # no "..": runs of dots and of dots with _ (what ``a/../b`` became) are one
    name = re.sub(r"[._]*_[._]*", "_", re.sub(r"\.{2,}", ".", name)).strip("._") or "entry"
    suffix = PurePosixPath(name).suffix
    if SUFFIX.fullmatch(suffix):
        name = name[: -len(suffix)]
    else:
        suffix = _TYPES.guess_extension(mimetype.split(";")[0].strip()) or ""
    # cut by bytes: a file name's limit is 255 bytes, and a Greek title is two a letter
    stem = name.encode()[: NAME_BYTES - len(suffix)].decode("utf-8", "ignore")
    stem = stem.rstrip("._") or "entry"
    return stem + suffix


def _unique(name: str, index: int, taken: set[str]) -> str:
    """Two entries whose safe names meet (``a/b`` and ``a_b``) get the later's index."""
    if name.lower() in taken:
        pure = PurePosixPath(name)
        stem = pure.stem.encode()[: NAME_BYTES - 24].decode("utf-8", "ignore")
        name = f"{stem}-{index}{pure.suffix}"
    taken.add(name.lower())
    return name


def _extracted(
    root: Path, archive: str, entry: Any, item: Any, index: int, names: set[str]
) -> dict[str, Any]:
    mimetype = str(item.mimetype)
    if item.size > MAX_ENTRY_BYTES:
        raise ItemError(f"zim {archive!r:.160}: entry {clean_text(entry.path)!r} is "
                        f"{item.size} bytes, over {MAX_ENTRY_BYTES}; leave it out with a "
                        "path or mimetype filter")  # fmt: skip
    try:
        content = item.content
    except RuntimeError as exc:
        raise ItemError(f"zim {archive!r:.160}: entry {clean_text(entry.path)!r} cannot be "
                        f"read ({_one_line(exc)}); the archive is damaged") from None  # fmt: skip
    digest = hashlib.sha256(content).hexdigest()
    pure = PurePosixPath(archive)
    name = _unique(safe_name(entry.path, mimetype), index, names)
    relative = pure.parent / f".{pure.name}.entries" / digest / name
    what = f"zim {archive!r:.160}: entry {clean_text(entry.path)!r}"
    write_once(root, relative, content, what, made_from=pure.parent)
    values = {
        "path": relative.as_posix(), "name": name, "stem": PurePosixPath(name).stem,
        "suffix": PurePosixPath(name).suffix, "dir": relative.parent.as_posix(),
        "entry": clean_text(entry.path), "title": clean_text(entry.title or entry.path),
        "mimetype": clean_text(mimetype, 100), "archive": archive, "sha256": digest,
        "bytes": int(item.size),
    }  # fmt: skip
    return item_values(values, index)  # the rules every item meets (a last guard)


def write_once(
    root: Path, relative: PurePosixPath, content: Any, what: str, made_from: PurePosixPath
) -> bool:
    """``content`` at ``root/relative`` unless a file of its size stands there (its folder
    is named by the content's hash: the same bytes); written to a new file of a random
    name in that folder and renamed whole, so a full disk or a crash leaves no part of
    it under the final name. True when written. The folders below ``made_from`` (the
    archive's own, which its glob found inside the volume) are made one by one, and one
    that is a link is refused, never followed: ``mkdir -p`` would make the hash's folder
    wherever a planted link points. ItemError when the volume refuses."""
    target = root / relative
    folder = root / made_from
    try:
        for part in relative.parent.relative_to(made_from).parts:
            folder = folder / part
            with contextlib.suppress(FileExistsError):
                folder.mkdir()
            if folder.is_symlink() or not folder.is_dir():
                raise ItemError(f"{what}: {folder.relative_to(root)} is a link or a file, which "
                                "leads out of the data volume; remove it")  # fmt: skip
        with contextlib.suppress(FileNotFoundError):
            stat = target.lstat()
            if target.is_file() and not target.is_symlink() and stat.st_size == len(content):
                return False
        _write_new(folder, target.name, memoryview(content))
    except OSError as exc:
        raise ItemError(f"{what} cannot be extracted onto the data volume "
                        f"({exc.strerror or exc}); free space there (or make it writable) "
                        "and submit again") from None  # fmt: skip
    return True


def _write_new(folder: Path, name: str, data: memoryview) -> None:
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW
    folder_fd = os.open(folder, flags)
    partial = f".{secrets.token_hex(8)}.partial"
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                     dir_fd=folder_fd)  # fmt: skip
        try:
            with os.fdopen(fd, "wb") as handle:
                for start in range(0, len(data), WRITE_CHUNK):
                    handle.write(data[start : start + WRITE_CHUNK])
                handle.flush()
                os.fsync(handle.fileno())  # whole before its name says it is there
            os.replace(partial, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(partial, dir_fd=folder_fd)
            raise
    finally:
        os.close(folder_fd)
