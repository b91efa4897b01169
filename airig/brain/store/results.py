"""Task results: stored inline or as files, and templated into dependent payloads.

A result (the executor's ``output`` dict) up to ``BRAIN_RESULT_INLINE_BYTES`` of JSON is
kept in the database; a larger one goes to ``<results>/<plan>/<task>/output.json``.
Files a worker uploads (images, transcripts) land in ``<results>/<plan>/<task>/``.

Templates in any string of a payload (the only syntax, so no template engine is needed):
- ``{{ tasks.<id>.output }}``: the upstream output's ``text`` when it has one, else its
  JSON;
- ``{{ tasks.<id>.output.<field>[.<field>...] }}``: one field (strings as they are,
  anything else as JSON).
The referenced task must be one of the task's ``depends_on`` (checked at submission).
What templates add to one payload is bounded (``BRAIN_MAX_RENDERED_BYTES``), and counted
from the upstream sizes times how often each template appears before anything is built: a
48 KB plan naming a 1 MB result 15 times in each of 32 tasks would otherwise make one claim
build 480 MB. The bound is checked when a task becomes READY (``leases.complete``: its
upstream results, hence its size, are known), so an oversized task fails then, with the
sizes in its error, not when a worker claims it; a claim still checks it, and stops adding
prefetched tasks once its payloads would pass ``BRAIN_MAX_CLAIM_BYTES``. Large data is
never passed by reference: a payload holds at most that much text, and a plan moves more
as a file on the shared data volume.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from airig.common.jsonsafe_text import OutputText, canonical_json

TEMPLATE = re.compile(r"\{\{\s*tasks\.([A-Za-z0-9_-]+)\.output((?:\.[A-Za-z0-9_]+)*)\s*\}\}")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Default bound of the text templates add to one payload (BRAIN_MAX_RENDERED_BYTES).
MAX_RENDERED_BYTES = 4 * 1024 * 1024
# Default bound of the payload bytes one claim (one exchange answer) carries
# (BRAIN_MAX_CLAIM_BYTES); its first task always goes, however large.
MAX_CLAIM_BYTES = 4 * 1024 * 1024


class RenderTooLarge(ValueError):
    """Templates would make the payload larger than the limit."""


# An output as a worker's exchange brought it: large flat parts kept as the body's JSON
# text, never built as objects (``airig/common/jsonsafe_text.py``, issue 36).
Output = dict[str, Any] | OutputText


def result_hash(output: Output, files: list[str]) -> str:
    """The digest of the canonical JSON of ``{"files", "output"}`` (keys sorted), fed
    piece by piece: the same digest whether the output is objects or text."""
    digest = hashlib.sha256()
    digest.update(b'{"files":' + canonical_json(files).encode() + b',"output":')
    for piece in output_pieces(output):
        digest.update(piece)
    digest.update(b"}")
    return digest.hexdigest()


def output_pieces(output: Output) -> Iterator[bytes | memoryview]:
    """The output's canonical JSON (ASCII), in pieces."""
    if isinstance(output, OutputText):
        yield from output.pieces()
    else:
        yield canonical_json(output).encode()


def value_of(output: Output) -> dict[str, Any]:
    """The output as objects, for a consumer that reads it (built only then)."""
    return output.value() if isinstance(output, OutputText) else output


def failure_hash(error_type: str, message: str) -> str:
    """A failure's digest, in its own space: no completion output can hash to it, so a
    completion is never taken for the replay of a failure (or the other way round)."""
    body = {"failed": {"error_type": error_type, "message": message}}
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


_PART = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # plan ids are hex, task keys TASK_ID_PATTERN


def task_dir(results_dir: Path, plan_id: str, key: str) -> Path:
    """``<results>/<plan>/<task>``; ValueError for any part that is not a plain name, so
    no path built from a request can leave the results volume (``..``, ``/``, ``%2e``)."""
    if not (_PART.match(plan_id) and _PART.match(key)):
        raise ValueError(f"not a plan id / task key: {plan_id[:70]!r} / {key[:70]!r}")
    return results_dir / plan_id / key


def task_file(results_dir: Path, plan_id: str, key: str, name: str) -> Path | None:
    """An existing regular file a task stored, or None. Confined to the task's folder
    after symlinks are resolved, so a link planted in the volume leads nowhere."""
    if not SAFE_NAME.match(name):
        return None
    try:
        folder = task_dir(results_dir, plan_id, key).resolve()
    except ValueError:
        return None
    path = (folder / name).resolve()
    if path.parent != folder or not path.is_file():
        return None
    return path


def store_output(
    results_dir: Path, plan_id: str, key: str, output: Output, inline_limit: int
) -> tuple[str | None, str | None]:
    """(output_json, output_file): exactly one is set. The text is the output's
    canonical JSON (ASCII); an ``OutputText`` is written piece by piece, never joined."""
    if isinstance(output, OutputText):
        if output.size() <= inline_limit:
            return output.text(), None
        pieces: Iterable[bytes | memoryview] = output.pieces()
    else:
        text = canonical_json(output)
        if len(text) <= inline_limit:  # ASCII: its length is its size
            return text, None
        pieces = (text.encode(),)
    target = task_dir(results_dir, plan_id, key) / "output.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    with tmp.open("wb") as stream:
        for piece in pieces:
            stream.write(piece)
    tmp.replace(target)
    return None, str(target.relative_to(results_dir))


def load_output(results_dir: Path, output_json: str | None, output_file: str | None) -> dict:
    if output_json is not None:
        return json.loads(output_json)
    if output_file:
        return json.loads((results_dir / output_file).read_text(encoding="utf-8"))
    return {}


def references(value: Any) -> set[str]:
    """Task ids referenced by templates anywhere inside a payload."""
    if isinstance(value, str):
        return {match.group(1) for match in TEMPLATE.finditer(value)}
    if isinstance(value, dict):
        return set().union(*(references(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(references(v) for v in value)) if value else set()
    return set()


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def _lookup(output: dict, path: str) -> Any:
    if not path:
        text = output.get("text")
        return text if isinstance(text, str) else output
    value: Any = output
    for part in path.strip(".").split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"output has no field {path.strip('.')!r}")
        value = value[part]
    return value


# upstream task id -> {field path ("" = the whole output): how many templates name it}
Uses = dict[str, dict[str, int]]


def template_uses(value: Any) -> Uses:
    """Every template of a payload, counted: what rendering would insert, and how often."""
    uses: Uses = {}

    def walk(item: Any) -> None:
        if isinstance(item, str):
            for match in TEMPLATE.finditer(item):
                paths = uses.setdefault(match.group(1), {})
                paths[match.group(2)] = paths.get(match.group(2), 0) + 1
        elif isinstance(item, dict):
            for inner in item.values():
                walk(inner)
        elif isinstance(item, list):
            for inner in item:
                walk(inner)

    walk(value)
    return uses


def upper_bound(uses: Uses, stored_bytes: Callable[[str], int]) -> int:
    """The most bytes the templates can add, from the upstream results' stored sizes only
    (nothing loaded). A stored result is the canonical, ASCII-escaped JSON of the output:
    a text value taken from it is no longer on the wire than it is there, and JSON taken
    from it (a field, the whole output) at most twice as long (``"`` and ``\\`` escaped
    again)."""
    return sum(2 * stored_bytes(key) * sum(paths.values()) for key, paths in uses.items())


# What JSON escaping adds to a character on the wire: \" \\ \n ... or \u00XX.
_ESCAPE_EXTRA = {chr(c): 5 for c in range(0x20)} | dict.fromkeys('"\\\b\f\n\r\t', 1)


def wire_len(text: str) -> int:
    """The bytes ``text`` takes in a JSON answer (UTF-8, escaped as pydantic and ``json``
    escape it), counted without building the escaped copy: a text of control characters
    is six times its length there."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return size + sum(extra * text.count(char) for char, extra in _ESCAPE_EXTRA.items())


def too_large(limit: int, key: str, path: str, count: int, size: int) -> RenderTooLarge:
    times = f"{count} x " if count > 1 else ""
    return RenderTooLarge(
        f"payload renders to more than {limit} bytes (BRAIN_MAX_RENDERED_BYTES): "
        f"{times}{{{{ tasks.{key}.output{path} }}}} of {size} bytes; reference a field "
        "({{ tasks.<id>.output.<field> }}) or pass large data as a file on the shared data "
        "volume instead of inlining a large output"
    )


def fill_texts(
    uses: Uses, output_of: Callable[[str], dict], limit: int,
    least: Callable[[str, str], int] | None = None,
) -> tuple[dict[tuple[str, str], str], int]:  # fmt: skip
    """The text each template inserts, and the bytes all of them add (each text's size
    times how often it is named), counted before anything is built: RenderTooLarge as
    soon as the sum passes ``limit``. One upstream output is held at a time, and the
    texts kept never add up to more than the limit plus the one that passed it.

    ``least(key, path)``: the fewest bytes a template's text can take, known from the
    store without loading the output (a group's, from its items' stored sizes); when
    they already pass ``limit``, RenderTooLarge before any output is loaded."""
    if least is not None:
        floor = 0
        for key, paths in uses.items():
            for path, count in paths.items():
                size = least(key, path)
                floor += count * size
                if floor > limit:
                    raise too_large(limit, key, path, count, size)
    texts: dict[tuple[str, str], str] = {}
    added = 0
    for key, paths in uses.items():
        output = output_of(key)
        for path, count in paths.items():
            text = _as_text(_lookup(output, path))
            size = wire_len(text)
            added += count * size
            if added > limit:
                raise too_large(limit, key, path, count, size)
            texts[key, path] = text
        del output
    return texts, added


def substitute(value: Any, texts: dict[tuple[str, str], str]) -> Any:
    """The payload with every template replaced by its text from ``fill_texts``."""
    if isinstance(value, str):
        return TEMPLATE.sub(lambda match: texts[match.group(1), match.group(2)], value)
    if isinstance(value, dict):
        return {k: substitute(v, texts) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, texts) for v in value]
    return value


def render(value: Any, output_of: Callable[[str], dict], limit: int = MAX_RENDERED_BYTES) -> Any:
    """The payload with every template replaced by the upstream result it names;
    RenderTooLarge, before any of it is built, when the templates add more than ``limit``
    bytes."""
    texts, _ = fill_texts(template_uses(value), output_of, limit)
    return substitute(value, texts)
