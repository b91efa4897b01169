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
A rendered payload is bounded (``MAX_RENDERED_BYTES``): a small plan naming a big result
a thousand times would otherwise build hundreds of megabytes for one assignment.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

TEMPLATE = re.compile(r"\{\{\s*tasks\.([A-Za-z0-9_-]+)\.output((?:\.[A-Za-z0-9_]+)*)\s*\}\}")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Default bound of the text templates add to one payload (BRAIN_MAX_RENDERED_BYTES).
MAX_RENDERED_BYTES = 16 * 1024 * 1024


class RenderTooLarge(ValueError):
    """Templates would make the payload larger than the limit."""


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def result_hash(output: dict, files: list[str]) -> str:
    return hashlib.sha256(canonical_json({"output": output, "files": files}).encode()).hexdigest()


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
    results_dir: Path, plan_id: str, key: str, output: dict, inline_limit: int
) -> tuple[str | None, str | None]:
    """(output_json, output_file): exactly one is set."""
    text = canonical_json(output)
    if len(text.encode()) <= inline_limit:
        return text, None
    target = task_dir(results_dir, plan_id, key) / "output.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
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


class _Renderer:
    """Fills templates, each upstream output loaded and each field turned into text once,
    counting the bytes added so rendering stops as soon as they pass the limit: at most
    one inserted text over it is ever held."""

    def __init__(self, output_of: Callable[[str], dict], limit: int) -> None:
        self.output_of, self.limit, self.added = output_of, limit, 0
        self.outputs: dict[str, dict] = {}
        self.texts: dict[tuple[str, str], tuple[str, int]] = {}

    def text(self, match: re.Match[str]) -> str:
        key, path = match.group(1), match.group(2)
        if (key, path) not in self.texts:
            if key not in self.outputs:
                self.outputs[key] = self.output_of(key)
            text = _as_text(_lookup(self.outputs[key], path))
            self.texts[key, path] = text, len(text.encode("utf-8", "surrogatepass"))
        text, size = self.texts[key, path]
        self.added += size
        if self.added > self.limit:
            raise RenderTooLarge(
                f"payload renders to more than {self.limit} bytes; reference a field "
                "({{ tasks.<id>.output.<field> }}) or a file instead of repeating a large output"
            )
        return text

    def render(self, value: Any) -> Any:
        if isinstance(value, str):
            return TEMPLATE.sub(self.text, value)
        if isinstance(value, dict):
            return {k: self.render(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.render(v) for v in value]
        return value


def render(value: Any, output_of: Callable[[str], dict], limit: int = MAX_RENDERED_BYTES) -> Any:
    """The payload with every template replaced by the upstream result it names;
    RenderTooLarge when the templates add more than ``limit`` bytes."""
    return _Renderer(output_of, limit).render(value)
