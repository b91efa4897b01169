"""JSON and YAML readers for plan documents, bounded before anything is built.

A plan comes over the network, so a reader refuses what costs far more than its size or
breaks far from the request: YAML anchors and aliases (a 500-byte "billion laughs"
document expands to gigabytes), nesting past ``MAX_DEPTH`` (recursion overflow),
integer literals long enough to take seconds to convert, and YAML types that are not
JSON values (binary, sets, explicit timestamps). Plain YAML dates stay text, as YAML 1.2
reads them. A key given twice in one mapping is refused: the parsers would keep only the
last one, silently.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    NodeEvent,
)
from yaml.nodes import MappingNode, ScalarNode

MAX_DEPTH = 64
# A 64-bit integer needs at most 20 digits (66 characters in binary); the rest is room
# for underscores. Longer literals only cost time (sexagesimal ones are quadratic).
MAX_INT_LITERAL = 100

_TAG = "tag:yaml.org,2002:"
_NOT_JSON_TAGS = ("timestamp", "binary", "set", "omap", "pairs")
# libyaml when PyYAML has it (four times faster); construction stays in Python either way.
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DocumentError(ValueError):
    """The text is not a JSON / YAML document a plan may be made of (message says why)."""


def _refuse_tag(loader: SafeConstructor, node: yaml.Node) -> Any:
    name = "!!" + node.tag.removeprefix(_TAG)
    raise ConstructorError(
        None, None, f"{name} is not a JSON value; quote it to keep it as text", node.start_mark
    )


def _bounded_int(loader: SafeConstructor, node: ScalarNode) -> int:
    if len(node.value) > MAX_INT_LITERAL:
        raise ConstructorError(
            None, None, f"an integer of {len(node.value)} characters is too long",
            node.start_mark,
        )  # fmt: skip
    return SafeConstructor.construct_yaml_int(loader, node)


class _PlanLoader(_BASE_LOADER):  # type: ignore[valid-type,misc]
    """SafeLoader without implicit timestamps, JSON-only types, unique keys."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TAG + "timestamp"]
        for first, resolvers in _BASE_LOADER.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _TAG + "merge":
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise ConstructorError(
                    "while reading a mapping", node.start_mark,
                    f"the key {key_node.value[:80]!r} appears twice", key_node.start_mark,
                )  # fmt: skip
            seen.add(key)
        return super().construct_mapping(node, deep)


_PlanLoader.add_constructor(_TAG + "int", _bounded_int)
for _name in _NOT_JSON_TAGS:
    _PlanLoader.add_constructor(_TAG + _name, _refuse_tag)
# Walks events only (_check_events): the scanner and parser are what differ.
_PurePlanLoader = _PlanLoader if _BASE_LOADER is yaml.SafeLoader else yaml.SafeLoader


def _check_events(text: str) -> None:
    """Refuse anchors, aliases and deep nesting from the event stream, before the
    composer recurses into the document or an alias is expanded.

    The parser may give up first: libyaml (bundled with PyYAML 6.0.4 wheels) stops at its
    own nesting limit while its scanner looks ahead, before the stream reaches depth
    ``MAX_DEPTH``. Only then the pure-Python parser, which has no such limit and looks
    ahead 1024 characters at most, walks the text again, so a deep document gets the
    kit's refusal whichever parser and version is installed; a YAML error still stands
    where the text is invalid before it nests too deep."""
    try:
        _walk_events(text, _PlanLoader)
    except yaml.YAMLError:
        if _PlanLoader is _PurePlanLoader:
            raise
        _walk_events(text, _PurePlanLoader)
        raise


def _walk_events(text: str, loader: type) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        line = event.start_mark.line + 1 if event.start_mark else "?"
        if isinstance(event, AliasEvent) or (isinstance(event, NodeEvent) and event.anchor):
            raise DocumentError(
                f"line {line}: YAML anchors and aliases are not allowed in plans; "
                "write the value out where it is used"
            )
        if isinstance(event, CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise DocumentError(f"line {line}: nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, CollectionEndEvent):
            depth -= 1


def read_yaml(text: str) -> Any:
    try:
        _check_events(text)
        return yaml.load(text, Loader=_PlanLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise DocumentError(f"not valid yaml: {_one_line(exc)}") from None


def _one_line(exc: yaml.YAMLError) -> str:
    """PyYAML's message (several lines with a source excerpt) as one line."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if not problem or mark is None:
        return " ".join(str(exc).split())
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    return f"{where}: {problem}" + (f" ({context})" if context else "")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) == len(pairs):
        return mapping
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise DocumentError(f"the key {key[:80]!r} appears twice in one object")
        seen.add(key)
    return mapping


def _bounded_json_int(text: str) -> int:
    if len(text) > MAX_INT_LITERAL:
        raise DocumentError(f"an integer of {len(text)} digits is too long")
    return int(text)


def read_json(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_int=_bounded_json_int)
    except DocumentError:
        raise
    except json.JSONDecodeError as exc:
        raise DocumentError(f"not valid json: {exc}") from None
    except RecursionError:
        # The C scanner stops at the interpreter's recursion limit and unwinds cleanly;
        # anything between MAX_DEPTH and that limit is refused by the walk afterwards.
        raise DocumentError(f"nested deeper than {MAX_DEPTH} levels") from None
