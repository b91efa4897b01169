"""What a free-form JSON value (a result, metrics, a payload) may hold.

Python's ``json.loads`` accepts things that break later, far from the request that brought
them: a lone surrogate (``"\\ud800"``) cannot be encoded as UTF-8, ``NaN`` and ``Infinity``
are not JSON (Starlette refuses to send them back), an integer past 64 bits overflows
SQLite, and a value nested hundreds deep overflows the recursion of every consumer. One
walk, run where the value enters, turns each into a message that names the path.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

T = TypeVar("T")

MAX_DEPTH = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class UnsafeJson(ValueError):
    """The value cannot be stored and sent back as JSON; the message names where."""


def check_json_value(
    value: T,
    path: str = "$",
    max_depth: int = MAX_DEPTH,
    bound_ints: bool = True,
    checked: tuple[type, ...] = (),
) -> T:
    """``value`` unchanged, or ``UnsafeJson`` naming the first bad part (iterative walk).

    ``bound_ints=False`` leaves integers to the fields that hold them (an id past 64 bits
    names no task: a 404 for that one report, not a refusal of the whole request).
    ``checked``: types whose instances were validated already (built in code) and pass."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > max_depth:
            raise UnsafeJson(f"{where}: nested deeper than {max_depth} levels")
        if isinstance(item, str):
            _check_text(item, where)
        elif isinstance(item, bool) or item is None or isinstance(item, checked):
            continue
        elif isinstance(item, int):
            if bound_ints and not INT64_MIN <= item <= INT64_MAX:
                raise UnsafeJson(f"{where}: integer {str(item)[:20]}… is outside 64 bits")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise UnsafeJson(f"{where}: {item} is not a JSON number")
        elif isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise UnsafeJson(f"{where}: key {key!r} is not a string")
                _check_text(key, f"{where}.{key[:40]!r}")
                stack.append((inner, f"{where}.{key[:40]}", depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((inner, f"{where}[{i}]", depth + 1) for i, inner in enumerate(item))
        else:
            raise UnsafeJson(f"{where}: a {type(item).__name__} is not a JSON value")
    return value


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UnsafeJson(
            f"{where}: character {exc.start} is a lone surrogate, not valid Unicode"
        ) from None
