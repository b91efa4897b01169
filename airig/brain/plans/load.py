"""One call from a submitted body to a plan that can be stored.

Pure and bounded in time and memory by the body's size (the readers refuse aliases,
deep nesting and oversized literals before building anything), so the route runs it in
a worker thread and the event loop never waits on a hostile plan.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from airig.brain.plans.fanout import Uncounted, validate_with_fanout
from airig.brain.plans.models import PlanSpec
from airig.brain.plans.parse import PlanSyntaxError, detect_format, parse_plan
from airig.brain.plans.readers import read_json
from airig.brain.plans.submit import body_hash
from airig.brain.plans.validate import Limits
from airig.common.jsonsafe_text import defer_large

# An ``items`` list is read this many bytes at a time: ``json.loads`` takes its window as
# text and makes a pointer per element, 10 bytes of objects a byte of ``1,2,3``.
WINDOW = 16 * 1024
# What ``str.lstrip`` takes off the front of an ASCII text (``detect_format``).
_LEADING_SPACE = re.compile(rb"[\t\n\x0b\x0c\r\x1c-\x1f ]*")


def decode_body(raw: bytes | bytearray) -> str:
    """The body as text; PlanSyntaxError when it is not UTF-8 (replacing bad bytes would
    store a plan that differs from the one sent). A leading byte-order mark is dropped."""
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise PlanSyntaxError(
            f"plan body is not valid UTF-8 (byte {exc.start}); save the file as UTF-8"
        ) from None


def load_plan(
    raw: bytes | bytearray,
    content_type: str | None,
    limits: Limits,
    data_dir: Path | None = None,
) -> tuple[PlanSpec, set[str], str]:
    """(plan, tainted task ids, body digest); PlanSyntaxError or PlanInvalid. Fan-out
    groups are expanded (``plans/fanout.py``; a ``glob`` reads ``data_dir``)."""
    _refuse_by_count(raw, content_type, limits, data_dir)
    body = decode_body(raw)
    data = parse_plan(body, detect_format(content_type, body))
    plan, tainted = validate_with_fanout(data, limits, data_dir)
    return plan, tainted, body_hash(body)


def _refuse_by_count(
    raw: bytes | bytearray, content_type: str | None, limits: Limits, data_dir: Path | None
) -> None:
    """Raise the plan's refusal when a JSON plan's long ``items`` lists pass what it may
    hold, from their counts, without the body's text or the lists' objects (issue 36: a
    1 MB list of half a million numbers took 6.6 MB to refuse). The lists are found,
    checked and counted by windows (``jsonsafe_text.defer_large``, with the plan's own
    JSON reader), the rest of the body parsed as usual. Anything else (a body that is not
    ASCII JSON, a large part elsewhere, a list within the limit, any other problem
    first) returns: the body is then read whole, so every answer stays what it was."""
    # no `items` key as written (one spelled with escapes reads whole, as before), or not
    # ASCII (then UTF-8 too, checked without a decoded copy): nothing to count
    if b'"items"' not in raw or not raw.isascii():
        return
    first = _LEADING_SPACE.match(raw)
    start = first.end() if first else 0
    if detect_format(content_type, raw[start : start + 1].decode()) != "json":
        return
    deferred = defer_large(raw, _read_window, WINDOW)
    if deferred is None:
        return
    try:
        data = parse_plan(deferred.text.decode("ascii"), "json")
    except PlanSyntaxError:
        return  # said again, with the body's own positions, by the whole parse
    counts: dict[int, int] = {}
    for position, task in enumerate(data["tasks"]):
        for_each = task.get("for_each") if isinstance(task, dict) else None
        if not isinstance(for_each, dict):
            continue
        name = for_each.get("items")
        if not isinstance(name, str) or name in deferred.found:
            continue
        part = deferred.parts.get(name)
        if part is None or part.count is None:
            continue
        deferred.found.add(name)
        counts[position] = part.count
        for_each["items"] = [None]  # a list, as the group's shape wants; never read
    if not counts or deferred.found != deferred.parts.keys() or _holds(data, deferred.marker):
        return  # a large part elsewhere (or repeated): its place and value matter
    try:
        validate_with_fanout(data, limits, data_dir, counts)
    except Uncounted:
        return


def _read_window(window: bytes) -> Any:
    return read_json(window.decode("ascii"))


def _holds(value: Any, marker: str) -> bool:
    """Whether a key or a text of ``value`` starts with ``marker``."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if any(key.startswith(marker) for key in node):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and node.startswith(marker):
            return True
    return False
