"""A fan-out group's items (PLANS.md, "Fan-out"): where they come from and what each holds.

A ``glob`` of files on the data volume (``glob_items``: ``{a,b}`` alternatives, the file
name's case ignored, dot names and links out of the volume left out), a literal ``items``
list or a ``from`` list in an upstream output (``item_values``, ``read_list``); each item
is a mapping of fields (``value``, ``path``, ``name``, ``stem``, ``suffix``, ``dir``,
``index``, or the entry's own) that ``{{ item.<field> }}`` reads (``item_text``). Item
values are data: a template or a control character in one is refused (``ItemError``).
``plans/fanout.py`` expands a group's template over them; everything here is pure but
for the glob, which reads the data volume.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

from airig.common.write_paths import UNSAFE


class _Placeholder(dict[str, Any]):
    """What a ``from`` template is checked with at submission (its items are not known
    yet): it has every field a template may name."""

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> str:
        return "item"


def placeholder() -> dict[str, Any]:
    return _Placeholder(value="item", path="item.txt", name="item.txt", stem="item",
                        suffix=".txt", dir=".", index=0)  # fmt: skip


class ItemError(ValueError):
    """An item (or a template's use of one) that cannot be expanded."""


def _path_fields(path: str) -> dict[str, Any]:
    pure = PurePosixPath(path)
    return {"path": path, "name": pure.name, "stem": pure.stem, "suffix": pure.suffix,
            "dir": str(pure.parent)}  # fmt: skip


def _looks_like_path(text: str) -> bool:
    pure = PurePosixPath(text)
    return (
        bool(text) and ("/" in text or bool(pure.suffix)) and not pure.is_absolute()
        and ".." not in pure.parts and "://" not in text and "\n" not in text
    )  # fmt: skip


# The characters an upload takes out of a file name (``launcher/inputs_sync.py``
# UNSAFE_CHARS, separators aside): control characters, and the bidirectional controls that
# make ``gpj.exe`` read as ``exe.jpg``. NUL is refused in every item value (no path,
# argument or environment variable can hold one: the task would fail on its worker, or
# the value be cut short); the rest in a value that reads as a path.
UNSAFE_IN_PATH = UNSAFE  # one set with the write-path rule (common/write_paths.py)
# The fields a path item has (``_path_fields``): a ``from`` list of ``{path: ...}``
# objects (a frames or pages output) hands its paths in through them.
PATH_FIELDS = ("path", "name", "stem", "suffix", "dir")
SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}\Z")


def _reads_as_path(field: str, text: str) -> bool:
    r"""A path field, or text ending in a file suffix (``a\x01.jpg``), or a ``/`` in a
    text without spaces (``in/a\nb``); a sentence with a ``/`` in it is text."""
    tail = text.rstrip("".join(map(chr, range(33))) + "\x7f")
    return (
        field in PATH_FIELDS or SUFFIX.search(tail) is not None
        or ("/" in text and " " not in text and "://" not in text)
    )  # fmt: skip


def _unsafe_character(field: str, text: str) -> str | None:
    """The first character ``text`` may not hold as the item value ``field``, or None."""
    if "\x00" in text:
        return "\x00"
    found = UNSAFE_IN_PATH.search(text)
    return found.group(0) if found and _reads_as_path(field, text) else None


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def item_values(entry: Any, index: int) -> dict[str, Any]:
    """An ``items`` (or ``from``) entry as its fields; ItemError when it cannot be one."""
    if isinstance(entry, dict):
        values = {str(k): v for k, v in entry.items() if _scalar(v)}
        if not re.match(r"^[A-Za-z0-9_]*$", "".join(values)):
            raise ItemError(f"item {index}: field names are letters, digits and _")
        values["index"] = index
    elif _scalar(entry) and not isinstance(entry, bool) and entry is not None:
        text = str(entry)
        values = {"value": text, "index": index}
        if _looks_like_path(text):
            values.update(_path_fields(text))
    else:
        raise ItemError(f"item {index} is {type(entry).__name__}; give text, a number or a "
                        "mapping of fields")  # fmt: skip
    for name, value in values.items():
        if not isinstance(value, str):
            continue
        if "{{" in value:
            raise ItemError(f"item {index} field {name!r} holds '{{{{' (a template); items "
                            "are data, never templates")  # fmt: skip
        bad = _unsafe_character(name, value)
        if bad is not None:
            why = "" if bad == "\x00" else " (it reads as a path, which holds none)"
            raise ItemError(f"item {index} field {name!r} holds the control character "
                            f"{ascii(bad)}{why}; remove it from the item")  # fmt: skip
    return values


# ``{a,b}`` alternatives in a glob, as a shell writes them (not nested).
BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")
MAX_PATTERNS = 64


def brace_patterns(pattern: str) -> list[str]:
    """``pattern`` with each ``{a,b,...}`` expanded (``*.{jpg,png}`` -> ``*.jpg``, ``*.png``);
    ItemError past MAX_PATTERNS patterns."""
    out = [pattern]
    while any(BRACES.search(p) for p in out):
        grown: list[str] = []
        for text in out:
            match = BRACES.search(text)
            if match is None:
                grown.append(text)
                continue
            head, tail = text[: match.start()], text[match.end() :]
            grown += [head + alt + tail for alt in match.group(1).split(",")]
        out = list(dict.fromkeys(grown))
        if len(out) > MAX_PATTERNS:
            raise ItemError(f"glob {pattern!r:.120} expands to more than {MAX_PATTERNS} patterns")
    return out


def _name_matcher(name: str) -> re.Pattern[str]:
    """A file name pattern matched whatever the case of the name (``*.jpg`` takes
    ``IMG_1.JPG``: cameras and phones write either)."""
    return re.compile(fnmatch.translate(name), re.IGNORECASE)


def _matches(root: Path, pattern: str) -> set[Path]:
    """Python's glob of ``pattern`` under ``root``, its last part matched ignoring case
    (folders as written: ``inputs/Talks`` and ``inputs/talks`` are two uploads)."""
    pure = PurePosixPath(pattern)
    if pure.name == "**" or not pure.name:
        return set(root.glob(pattern))
    name = _name_matcher(pure.name)
    parents = [root] if str(pure.parent) == "." else list(root.glob(str(pure.parent)))
    found: set[Path] = set()
    for parent in parents:
        try:
            children = list(parent.iterdir()) if parent.is_dir() else []
        except OSError:
            continue
        found.update(c for c in children if name.match(c.name))
    return found


def _shown(parts: tuple[str, ...], pattern: str) -> bool:
    """Whether a match may hold its dot names (``.a.jpg``, ``.hidden/``): only where the
    pattern itself writes a part starting with ``.`` that matches it, as a shell's glob
    does. The file service writes an upload in flight as ``.upload-<hex>`` beside its
    final name, so ``*`` or ``**`` taking dot names would fan out over half a file."""
    dotted = [p for p in PurePosixPath(pattern).parts if p.startswith(".")]
    return all(
        any(_name_matcher(d).match(part) for d in dotted) for part in parts if part.startswith(".")
    )


def glob_items(data_dir: Path, pattern: str, limit: int) -> list[dict[str, Any]]:
    """The files (not folders) under the data volume matching ``pattern`` (``{a,b}``
    alternatives; the file name's case ignored), sorted by path; at most ``limit`` + 1
    (the caller reports the count). ItemError for a pattern that is absolute or climbs
    out; a match whose real path leaves the volume (a symlink) is skipped, and so is a
    dot name (a file or a folder ``**`` would descend into) the pattern does not write."""
    patterns = brace_patterns(pattern)
    for each in patterns:
        pure = PurePosixPath(each)
        if not each or pure.is_absolute() or ".." in pure.parts or "\\" in each:
            raise ItemError(f"glob {pattern!r:.120} must be relative to the data volume, "
                            "without '..'")  # fmt: skip
    root = data_dir.resolve()
    found: list[str] = []
    try:
        matches = sorted(set().union(*(
            {m for m in _matches(root, p) if _shown(m.relative_to(root).parts, p)}
            for p in patterns
        )))  # fmt: skip
    except (ValueError, OSError) as exc:
        raise ItemError(f"glob {pattern!r:.120}: {exc}") from None
    for path in matches:
        try:
            real = path.resolve()
            inside = real.is_relative_to(root) and real.is_file()
        except OSError:
            continue
        if inside:
            found.append(path.relative_to(root).as_posix())
        if len(found) > limit:
            break
    return [{**_path_fields(p), "index": i} for i, p in enumerate(found)]


def item_text(item: dict[str, Any], name: str | None) -> str:
    if name is None:
        for default in ("path", "value"):
            if default in item:
                return _text(item[default])
        return json.dumps({k: v for k, v in item.items() if k != "index"}, sort_keys=True)
    if name not in item:
        raise ItemError(f"item {item.get('index')} has no field {name!r} "
                        f"(it has {sorted(item)})")  # fmt: skip
    return _text(item[name])


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def read_list(output: Any, path: str) -> list[Any]:
    """The list at ``path`` of an upstream output (``""``: the output itself, or its
    ``items`` / ``files`` / ``text`` when the output is a mapping holding one list)."""
    value: Any = output
    for part in path.split(".") if path else []:
        if not isinstance(value, dict) or part not in value:
            raise ItemError(f"the output has no field {path!r}")
        value = value[part]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ItemError(f"{path or 'the output'} is text, not a list") from None
    if not isinstance(value, list):
        raise ItemError(f"{path or 'the output'} is {type(value).__name__}, not a list")
    return value
