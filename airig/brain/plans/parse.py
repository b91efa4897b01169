"""Turn a submitted body (JSON, YAML or Markdown) into a plain plan mapping."""

from __future__ import annotations

import json
from typing import Any

import yaml

from airig.brain.plans.markdown import MarkdownPlanError, parse_markdown


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
    try:
        if fmt == "json":
            data = json.loads(body)
        elif fmt == "yaml":
            data = yaml.safe_load(body)
        elif fmt == "markdown":
            data = parse_markdown(body)
        else:
            raise PlanSyntaxError(f"unknown plan format {fmt!r}")
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise PlanSyntaxError(f"not valid {fmt}: {exc}") from None
    except MarkdownPlanError as exc:
        raise PlanSyntaxError(str(exc)) from None
    if not isinstance(data, dict):
        raise PlanSyntaxError("a plan is a mapping with 'name' and 'tasks'")
    if not isinstance(data.get("tasks"), list) or not data["tasks"]:
        raise PlanSyntaxError("a plan needs a non-empty 'tasks' list")
    return data
