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


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def result_hash(output: dict, files: list[str]) -> str:
    return hashlib.sha256(canonical_json({"output": output, "files": files}).encode()).hexdigest()


def task_dir(results_dir: Path, plan_id: str, key: str) -> Path:
    return results_dir / plan_id / key


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


def render(value: Any, output_of: Callable[[str], dict]) -> Any:
    """The payload with every template replaced by the upstream result it names."""
    if isinstance(value, str):
        return TEMPLATE.sub(lambda m: _as_text(_lookup(output_of(m.group(1)), m.group(2))), value)
    if isinstance(value, dict):
        return {k: render(v, output_of) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, output_of) for v in value]
    return value
