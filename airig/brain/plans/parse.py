"""Turn a submitted body (JSON, YAML or Markdown) into a plain plan mapping.

The mapping holds JSON values only (checked by ``airig.common.jsonsafe``: no lone surrogates,
NaN, integers past 64 bits, non-string keys or nesting past ``MAX_DEPTH``), so nothing
that validation, SQLite or a worker does with it later can fail on what it holds.
"""

from __future__ import annotations

from typing import Any

from airig.brain.plans.markdown import MarkdownPlanError, parse_markdown
from airig.brain.plans.readers import MAX_DEPTH, DocumentError, read_json, read_yaml
from airig.common.jsonsafe import UnsafeJson, check_json_value


class PlanSyntaxError(ValueError):
    """The body is not a readable plan document."""


def detect_format(content_type: str | None, body: str) -> str:
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind.endswith("json"):
        return "json"
    if kind.endswith("yaml") or kind.endswith("yml"):
        return "yaml"
    if kind == "text/markdown":
        return "markdown"
    stripped = body.lstrip()
    if stripped.startswith("{"):
        return "json"
    return "markdown" if stripped.startswith("#") else "yaml"


def parse_plan(body: str, fmt: str) -> dict[str, Any]:
    """A mapping with ``name`` and ``tasks``; PlanSyntaxError when it cannot be read."""
    readers = {"json": read_json, "yaml": read_yaml, "markdown": parse_markdown}
    if fmt not in readers:
        raise PlanSyntaxError(f"unknown plan format {fmt!r}")
    try:
        data = check_json_value(readers[fmt](body), "plan", MAX_DEPTH)
    except (DocumentError, MarkdownPlanError, UnsafeJson) as exc:
        raise PlanSyntaxError(str(exc)) from None
    if not isinstance(data, dict):
        raise PlanSyntaxError("a plan is a mapping with 'name' and 'tasks'")
    if not isinstance(data.get("tasks"), list) or not data["tasks"]:
        raise PlanSyntaxError("a plan needs a non-empty 'tasks' list")
    return data
