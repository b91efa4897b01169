"""Answers under `format`: Ollama constrains sampling to it, so the text is always JSON.

Upstream (ollama v0.20.6): server/routes.go passes `req.Format` to the runner as the
completion's format; llm/server.go `Completion` turns `"json"` into the JSON grammar and a
JSON Schema object into a grammar of that schema (`llama.SchemaToGrammar`), and sampling
follows the grammar, so the answer is a JSON value of that shape (structured outputs,
docs/api.md "Structured outputs"). The stand-in cannot sample: it builds a value of the
shape from its reply words, deterministically (same request, same answer), with every
property of an object filled in (a grammar from a schema emits the required ones; the
stand-in emits all, which a schema also allows).
"""

from __future__ import annotations

import json
from typing import Any

MAX_ARRAY = 3


def shaped(format_: object, words: list[str]) -> str | None:
    """The answer text for `format`, or None when there is none (free text)."""
    if format_ in (None, ""):
        return None
    if format_ == "json":
        return json.dumps({"response": " ".join(words)})
    if isinstance(format_, dict):
        return json.dumps(_value(format_, words, 0))
    return None


def _value(schema: dict, words: list[str], at: int) -> Any:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if "enum" in schema and schema["enum"]:
        return schema["enum"][at % len(schema["enum"])]
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        return {
            name: _value(sub if isinstance(sub, dict) else {}, words, at + index)
            for index, (name, sub) in enumerate(properties.items())
        }
    if kind == "array":
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        count = max(int(schema.get("minItems", 1)), min(MAX_ARRAY, len(words) // 4 or 1))
        return [_value(items, words, at + 4 * index) for index in range(count)]
    if kind in ("number", "integer"):
        return 3 * at
    if kind == "boolean":
        return at % 2 == 0
    if kind == "null":
        return None
    # a string: a few of the reply's words, from a place that depends on where it stands
    start = at % max(1, len(words))
    return " ".join((words[start:] + words[:start])[:8])
