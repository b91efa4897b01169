"""``.airig/images.lock``: the registry digest of each compute image `up` started.

Upstream rebuilds tags in place (``cu126-slim``, ``rocm``, ``cpu``: weekly builds), so a tag
names a different image from one week to the next. `up` writes here the digest behind the
tag it started, and every later `up` starts ``repo@sha256:…`` instead of the tag: after a
prune or on a restart the rig runs the image that worked, until `update` moves it (and
rolls back when the new one fails). The file is JSON, one entry per image variable of
02-compute (``OLLAMA_IMAGE``, ``WHISPER_IMAGE_CPU`` …)::

    {"version": 1, "images": {"WHISPER_IMAGE_CPU": {
        "service": "whisper", "variable": "WHISPER_IMAGE_CPU",
        "tag": "ghcr.io/speaches-ai/speaches:0.8.3-cpu",      # what images.yaml / .env chose
        "digest": "sha256:…",                                 # the manifest the tag named
        "why": "cpu profile; image from 02-compute/images.yaml",
        "created": "2026-11-20T03:12:09Z",                    # the image's build time
        "locked_at": "2026-11-25T08:40:00+00:00"}}}

Pure: no Docker here (``airig/launcher/lifecycle/update.py`` reads the engine and the registry).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from airig.common.errors import ConfigError
from airig.launcher.images.choose import ImageChoice, ImageSelection
from airig.launcher.images.registry import split_domain

LOCK_FILE = "images.lock"
VERSION = 1
# What a registry digest is: the lock's digests become `repo@digest` image references in
# .airig/host.env and Compose files, and are printed; anything else (a registry's markup,
# a newline that would add a line to host.env) is refused where it is read.
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
DIGEST_WORDS = "sha256: and 64 lowercase hex digits"
# A tag or variable also lands in host.env as `VARIABLE=ref`: one line, no spaces
REFERENCE_TEXT = re.compile(r"[^\s\x00-\x1f\x7f]*")


def is_digest(value: object) -> bool:
    return isinstance(value, str) and DIGEST.fullmatch(value) is not None


@dataclass(frozen=True)
class Locked:
    service: str
    variable: str
    tag: str  # the reference chosen (mirror host included), never a digest reference
    digest: str  # "sha256:…"; "" when the image has no registry digest (built locally)
    why: str
    created: str = ""
    locked_at: str = ""

    @property
    def reference(self) -> str:
        """What compose starts: ``repo@digest``, or the tag when there is no digest."""
        return pinned(self.tag, self.digest) if self.digest else self.tag


def lock_path(state_dir: Path) -> Path:
    return state_dir / LOCK_FILE


def repository(ref: str) -> str:
    """``ref`` without its tag or digest: ``127.0.0.1:5000/ollama/ollama:0.20.6`` →
    ``127.0.0.1:5000/ollama/ollama`` (a registry's port is not a tag: only a ``:`` after
    the last ``/`` is)."""
    name = ref.split("@", 1)[0]
    head, slash, last = name.rpartition("/")
    return f"{head}{slash}{last.split(':', 1)[0]}"


def digest_of(ref: str) -> str:
    """The digest a ``repo@sha256:…`` reference names, else ""."""
    return ref.split("@", 1)[1] if "@" in ref else ""


def pinned(ref: str, digest: str) -> str:
    return f"{repository(ref)}@{digest}"


def same_image_path(a: str, b: str) -> bool:
    """The same repository and tag whichever registry serves it: a changed
    AIRIG_IMAGE_REGISTRY (a mirror of the same upstream name) keeps the lock."""
    return split_domain(a)[1] == split_domain(b)[1]


def read_lock(state_dir: Path) -> dict[str, Locked]:
    """Entries by variable; {} when there is no lock yet. A file that is not ours is one
    ConfigError (never a traceback), since `up` reads it before it starts anything."""
    path = lock_path(state_dir)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        entries = {name: Locked(**entry) for name, entry in data["images"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"cannot read {path}: {type(exc).__name__}: {exc}",
            f"move {path} away: the next up locks the images it starts again",
        ) from None
    for name, entry in entries.items():
        check_entry(path, name, entry)
    return entries


def check_entry(path: Path, name: str, entry: Locked) -> None:
    """One entry as the lock's writers write it, else one line naming it: its digest ""
    (an image built locally) or sha256 + 64 hex, every field a string, the variable and
    tag one word each (they become a host.env line)."""
    label = shown(name)
    fix = (
        f"delete the {label} entry from {path} (or the file): the next up locks the image "
        "it starts again, and `update --check` then shows what its tag names"
    )
    where = f"{path}: the entry {label}"
    fields = {k: getattr(entry, k) for k in Locked.__dataclass_fields__}
    wrong = [k for k, v in fields.items() if not isinstance(v, str)]
    if wrong:
        raise ConfigError(f"{where} has a {wrong[0]} that is not a string", fix)
    if entry.digest and not is_digest(entry.digest):
        raise ConfigError(f"{where} has a digest that is not {DIGEST_WORDS}", fix)
    for key in ("variable", "tag"):
        if not fields[key] or not REFERENCE_TEXT.fullmatch(fields[key]):
            raise ConfigError(f"{where} has a {key} that is not one word of printable text", fix)


def shown(text: str, limit: int = 80) -> str:
    """Text from a file or a registry, fit for one line: control characters (ANSI
    escapes, NUL, newlines) replaced by "?", clipped to ``limit``. Markup is the printer's
    to escape (rich.markup.escape)."""
    clean = re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", text[: limit + 1])
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def write_lock(state_dir: Path, entries: dict[str, Locked]) -> None:
    """Written whole to a temporary file, then renamed over the old one: a crash never
    leaves half a lock for the next `up` to refuse."""
    path = lock_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"version": VERSION, "images": {k: asdict(v) for k, v in sorted(entries.items())}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


@dataclass(frozen=True)
class Held:
    """What `up` starts for one image variable when the lock holds it."""

    variable: str
    reference: str  # repo@digest
    note: str = ""  # one line when images.yaml now picks another tag than the locked one


def hold(
    selection: ImageSelection,
    lock: dict[str, Locked],
    pins: dict[str, str],
    local: Callable[[str], set[str]] = lambda _ref: set(),
) -> tuple[ImageSelection, list[Held]]:
    """``selection`` with each locked image replaced by its digest reference.

    ``local(ref)``: the registry digests the engine's image of ``ref`` has. When the
    engine's tag still is the locked digest, the tag itself is kept: Compose hashes the
    ``image:`` string into a service's config, so swapping it for ``repo@sha256:`` would
    recreate every compute container on the second `up`, which must change nothing.

    - The chosen tag is the locked tag (mirror host aside): start the locked digest.
    - images.yaml now picks another tag (a driver upgrade: ``cu126-slim`` → a newer build):
      keep the locked digest, which ran here, and say that `update` moves to the new
      choice; the change goes through the same check, health wait and rollback.
    - A pin in .env (``pins``) that differs from the lock: the user asked for that image
      by name, so it wins and the next record locks it.
    - No digest (an image built locally) or no entry: the tag, as chosen."""
    held: list[Held] = []
    choices = []
    env = dict(selection.env)
    for choice in selection.choices:
        entry = lock.get(choice.variable)
        if entry is None or not entry.digest or digest_of(choice.image):
            choices.append(choice)
            continue
        if same_image_path(entry.tag, choice.image):
            tag, note = choice.image, ""
        elif choice.variable in pins:
            choices.append(choice)
            continue
        else:
            tag, note = entry.tag, moved_note(choice, entry)
        ref = tag if entry.digest in local(tag) else pinned(tag, entry.digest)
        held.append(Held(choice.variable, ref, note))
        choices.append(replace(choice, image=ref))
        env[choice.variable] = ref
    return replace(selection, choices=tuple(choices), env=env), held


def moved_note(choice: ImageChoice, entry: Locked) -> str:
    return (
        f"{choice.service}: {choice.image} is chosen now ({choice.why}); still running the "
        f"locked {entry.tag} — `python start_services.py update {choice.service}` moves to it"
    )


@dataclass(frozen=True)
class Move:
    """One image variable whose upstream differs from the lock (update --check)."""

    service: str
    variable: str
    locked: Locked | None
    tag: str  # what the rig would run now: the chosen tag
    digest: str  # that tag's digest in its registry now
    created: str
    why: str

    @property
    def kind(self) -> str:
        if self.locked is None:
            return "new"
        if not same_image_path(self.locked.tag, self.tag):
            return "choice"  # images.yaml / the driver picks another tag
        return "moved" if self.locked.digest != self.digest else "current"

    @property
    def reference(self) -> str:
        return pinned(self.tag, self.digest)


def diff(
    lock: dict[str, Locked],
    wanted: dict[str, ImageChoice],
    remote: Callable[[str], tuple[str, str]],
) -> list[Move]:
    """Per locked variable: the chosen tag now (``wanted`` by variable; the locked tag
    when nothing chooses that variable any more) against the registry (``remote``: tag →
    (digest, created), raising when it cannot tell). Pure given ``remote``, so every case
    is a unit test."""
    moves = []
    for variable, entry in sorted(lock.items()):
        choice = wanted.get(variable)
        tag = choice.image if choice is not None and not digest_of(choice.image) else entry.tag
        digest, created = remote(tag)
        why = choice.why if choice is not None else entry.why
        moves.append(Move(entry.service, variable, entry, tag, digest, created, why))
    return moves


def log_entry(action: str, move: Move, ok: bool, reason: str, time: str) -> dict[str, Any]:
    """One line of ``.airig/update.log``: an update, a rollback, or a lock `up` wrote."""
    locked = move.locked
    return {
        "time": time,
        "action": action,
        "service": move.service,
        "variable": move.variable,
        "from": {"tag": locked.tag, "digest": locked.digest} if locked else None,
        "to": {"tag": move.tag, "digest": move.digest},
        "ok": ok,
        "reason": reason,
    }


def append_log(path: Path, entry: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps(entry, sort_keys=True) + "\n")


@dataclass(frozen=True)
class FailedUpdate:
    """An update to a digest that failed its health or smoke check and was rolled back."""

    time: str
    reason: str


def failed_updates(entries: list[dict[str, Any]]) -> dict[tuple[str, str], FailedUpdate]:
    """(variable, digest) → its last failed update, from ``.airig/update.log``'s lines:
    `update --check` does not offer that digest again. A later update of the same digest
    that passed (`update SERVICE` tried it again) clears it."""
    failed: dict[tuple[str, str], FailedUpdate] = {}
    for entry in entries:
        target = entry.get("to")
        if entry.get("action") != "update" or not isinstance(target, dict):
            continue
        key = (str(entry.get("variable")), str(target.get("digest")))
        if entry.get("ok"):
            failed.pop(key, None)
        else:
            failed[key] = FailedUpdate(str(entry.get("time", "")), str(entry.get("reason", "")))
    return failed


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", "fix or move the file away") from None
