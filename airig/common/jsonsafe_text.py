"""Large flat parts of a worker's output kept as the JSON text they came in (issue 36).

A completion's output of four million small numbers is 7.8 MB of JSON but 31 MB of list
pointers once parsed (8 bytes a pointer for every two-byte number), and the parser holds
twice that while it builds it; its canonical JSON (for the result's hash, for the file)
was made twice more. Here such parts never become objects:

- ``defer_large`` finds, in a request body, each long string of plain printable ASCII
  and each long array of scalars only (no string, no container inside), checks it as
  ``check_json_value`` would (by pieces of ``WINDOW`` bytes, each parsed, checked and
  dropped before the next), and replaces it in a copy of the body by a marker string
  that names it; the copy (small) is then parsed and validated as usual.
- ``OutputText``: an output whose parsed skeleton holds such markers, as the pieces of
  its canonical JSON (``canonical_json`` of the value, exactly): the skeleton's own
  canonical JSON, with each marker replaced by its part's canonical text, which is the
  body's own bytes (a view, no copy) wherever they are canonical already. The result's
  hash and the stored file are written from the pieces; the value is built only for a
  consumer that reads it (``value()``), and the length of a deferred list is known
  without it (``count_at``: a ``from`` group is counted before anything is built).
- A submitted plan's long ``items`` list is found and counted the same way, its windows
  read by the plan's own JSON reader (``plans/load.py``): refused by its count unbuilt.

Anything unusual (a marker where no output holds it, a key, a duplicate that drops one,
a part that does not check, nesting at the depth limit) makes ``defer_large`` answer
None: the body is then parsed whole as before, so what is accepted, refused and stored,
and every error message, stays what it was.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json

from airig.common.jsonsafe import MAX_DEPTH, UnsafeJson, check_json_value

# Parts shorter than this are parsed with the rest: only large ones are worth a marker.
LARGE = 64 * 1024
# Texts the scan steps over one by one (a step of Python each) before it gives up and
# the body is parsed whole: 3 million short texts took it 3 s to find nothing.
MAX_STRINGS = 20_000
# What one piece of a deferred array parses at a time (its objects: a few hundred KB).
WINDOW = 64 * 1024
# A JSON string with nothing escaped and nothing ``json.dumps`` (ASCII) would escape: its
# bytes are its canonical text.
_PLAIN_STRING = re.compile(rb'"[\x20\x21\x23-\x5b\x5d-\x7e]*"')
# Whole numbers, not negative, and commas: once parsed (no leading zero, no empty
# element), the canonical text of these elements.
_DIGITS = re.compile(rb"[0-9,]*")
# Left to right, outside strings only: a whole string (consumed, so nothing inside one
# is taken for structure), a long array holding no string and no container, or a quote
# that opens no string (the body is not JSON: parsed whole, the parser says why).
_SCAN = re.compile(
    rb'"[^"\\]*(?:\\.[^"\\]*)*"|\[[^\[\]{}"]{%d,}\]|"' % LARGE,
    re.DOTALL,
)

# A marker as ``canonical_json`` writes it (one pattern for all: a pattern per marker
# would fill ``re``'s cache, one entry per request).
_QUOTED_MARKER = re.compile(rb'"\\u0000airig-[0-9a-f]{32}-[0-9]+"')

Piece = bytes | memoryview


def canonical_json(value: Any) -> str:
    """The one text a stored result is: keys sorted, no spaces, ASCII."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass
class Part:
    """A deferred part: its canonical text in pieces, and its length when it is a list."""

    pieces: list[Piece]
    count: int | None


@dataclass
class Deferred:
    """A body with its large parts replaced by markers (``text``), and the parts."""

    text: bytes
    parts: dict[str, Part]
    marker: str  # every marker starts with it: a NUL and a nonce no body can guess
    found: set[str] = field(default_factory=set)


def _parse_window(window: bytes) -> Any:
    return from_json(window, allow_inf_nan=True)


def defer_large(
    raw: bytes | bytearray, parse: Callable[[bytes], Any] = _parse_window, window: int = WINDOW
) -> Deferred | None:
    """``raw`` with its large flat parts replaced by markers, or None when it has none
    (or a part that is not plain: the caller parses ``raw`` whole). ``parse`` reads one
    window of an array (``[`` + elements + ``]``) as the caller's own reader would: a
    window it refuses (``ValueError``) leaves the body to be parsed whole; ``window``
    bytes of the array at a time."""
    if len(raw) < 2 * LARGE:
        return None
    view = memoryview(raw)
    marker = f"\x00airig-{secrets.token_hex(16)}-"
    parts: dict[str, Part] = {}
    text: list[Piece] = []
    done = 0
    strings = 0
    for match in _SCAN.finditer(raw):
        start, end = match.span()
        first = raw[start]
        if first == 0x22:  # a string
            if end - start == 1:
                return None  # a quote that opens no string
            if end - start < LARGE or not _PLAIN_STRING.fullmatch(raw, start, end):
                strings += 1
                if strings > MAX_STRINGS:
                    return None  # a body of many texts: its objects, as before
                continue
            part = Part([view[start:end]], None)
        else:
            found = _array(raw, view, start, end, parse, window)
            if found is None:
                return None
            part = found
        name = f"{marker}{len(parts)}"
        parts[name] = part
        text += [view[done:start], json.dumps(name).encode()]
        done = end
    if not parts:
        return None
    text.append(view[done:])
    return Deferred(b"".join(text), parts, marker)


def _array(
    raw: bytes | bytearray,
    view: memoryview,
    start: int,
    end: int,
    parse: Callable[[bytes], Any] = _parse_window,
    size: int = WINDOW,
) -> Part | None:
    """An array of scalars only (``raw[start:end]``, brackets included), checked and made
    canonical one window at a time; None when it is not JSON or does not check."""
    pieces: list[Piece] = [b"["]
    count = 0
    at, stop = start + 1, end - 1
    windows = 0
    while True:
        cut = raw.find(b",", min(at + size, stop), stop)
        cut = stop if cut < 0 else cut
        window = bytes(view[at:cut])
        try:
            values = parse(b"[" + window + b"]")
            check_json_value(values)
        except (ValueError, UnsafeJson):
            return None
        windows += 1
        if not values and (windows > 1 or cut < stop):
            return None  # an element missing between two commas, or after the last
        count += len(values)
        if _DIGITS.fullmatch(window):  # parsed: no leading zero, so canonical already
            pieces.append(view[at:cut])
        else:
            text = canonical_json(values)[1:-1].encode()
            pieces.append(view[at:cut] if text == window else text)
        if cut >= stop:
            break
        pieces.append(b",")
        at = cut + 1
    pieces.append(b"]")
    return Part(pieces, count)


def outputs_of(body: Any, deferred: Deferred) -> list[tuple[int, dict[str, Any]]] | None:
    """The reports (by index) whose ``output`` holds markers, once ``body`` (the parsed
    ``deferred.text``) is known to hold every marker exactly once, each in a complete
    report's output and none as a key or at the depth limit; else None."""
    reports = body.get("reports") if isinstance(body, dict) else None
    if not isinstance(reports, list):
        return None
    holding = []
    for index, report in enumerate(reports):
        if not isinstance(report, dict):
            continue
        output = report.get("output")
        if report.get("action") != "complete" or not isinstance(output, dict):
            continue
        before = len(deferred.found)
        # the output lies at depth 3 of the body: reports, the index, output
        if not _markers(output, deferred, depth=3):
            return None
        if len(deferred.found) > before:
            holding.append((index, output))
    if deferred.found != deferred.parts.keys():
        return None  # a marker elsewhere, or dropped (a duplicate key)
    return holding


def _markers(value: Any, deferred: Deferred, depth: int) -> bool:
    """Collect the markers in ``value`` (a node at ``depth`` of the body) into
    ``deferred.found``; False for a marker that is a key, repeated, or a list's at the
    depth limit (its elements would lie past it)."""
    stack = [(value, depth)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            for key, inner in node.items():
                if key.startswith(deferred.marker):
                    return False
                stack.append((inner, level + 1))
        elif isinstance(node, list):
            stack.extend((inner, level + 1) for inner in node)
        elif isinstance(node, str) and node.startswith(deferred.marker):
            part = deferred.parts.get(node)
            if part is None or node in deferred.found:
                return False
            if part.count is not None and level >= MAX_DEPTH:
                return False
            deferred.found.add(node)
    return True


class OutputText:
    """An output held as its canonical JSON in pieces (see the module's docstring)."""

    def __init__(self, skeleton: dict[str, Any], deferred: Deferred) -> None:
        self.skeleton = skeleton
        self.marker = deferred.marker
        self.parts = {name: deferred.parts[name] for name in _names(skeleton, self.marker)}

    def pieces(self) -> Iterator[Piece]:
        """The canonical JSON of the output, piece by piece (ASCII bytes)."""
        text = canonical_json(self.skeleton).encode()
        done = 0
        for match in _QUOTED_MARKER.finditer(text):
            part = self.parts.get("\x00" + match.group()[7:-1].decode("ascii"))
            if part is not None:  # a text that only looks like one stays as it is
                yield text[done : match.start()]
                yield from part.pieces
                done = match.end()
        yield text[done:]

    def size(self) -> int:
        """The canonical JSON's length in bytes."""
        return sum(len(piece) for piece in self.pieces())

    def text(self) -> str:
        return b"".join(self.pieces()).decode("ascii")

    def value(self) -> dict[str, Any]:
        """The output as objects, built now (for a consumer that reads it)."""
        value: dict[str, Any] = json.loads(b"".join(self.pieces()))
        return value

    def count_at(self, path: str) -> int | None:
        """The length of the list at ``path`` (dotted keys) when it is a deferred list or
        a list of the skeleton; None otherwise (the value says what lies there)."""
        node: Any = self.skeleton
        for part in path.split(".") if path else []:
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        if isinstance(node, list):
            return len(node)
        found = self.parts.get(node) if isinstance(node, str) else None
        return found.count if found is not None else None


def _names(skeleton: dict[str, Any], marker: str) -> list[str]:
    names = []
    stack: list[Any] = [skeleton]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and node.startswith(marker):
            names.append(node)
    return names
