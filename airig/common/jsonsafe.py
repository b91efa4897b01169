"""What a free-form JSON value (a result, metrics, a payload) may hold.

Python's ``json.loads`` accepts things that break later, far from the request that brought
them: a lone surrogate (``"\\ud800"``) cannot be encoded as UTF-8, ``NaN`` and ``Infinity``
are not JSON (Starlette refuses to send them back), an integer past 64 bits overflows
SQLite, and a value nested hundreds deep overflows the recursion of every consumer. One
walk, run where the value enters, turns each into a message that names the path.

The walk holds one iterator per open container (at most ``max_depth`` + 1 of them), never
one entry per node: a 7.8 MB list of small numbers is four million nodes, and a pending
entry with its own path text for each made the brain peak at 889 MB and take 40 s
(issue 36). The path is built from the open containers' keys only when a node is refused,
and a long list of plain scalars is checked by loops that run in C (``_all_pass``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

MAX_DEPTH = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_END = object()  # an open container has no more children
# What ``str.encode("utf-8")`` refuses, found without making the encoded copy.
_SURROGATE = re.compile("[\ud800-\udfff]")
_NO_CHECK = frozenset({bool, type(None)})
_NUMBERS = frozenset({int, float})
_SUMMED = 16  # children from which a container's scalars are checked in C (``_all_pass``)


class UnsafeJson(ValueError):
    """The value cannot be stored and sent back as JSON; the message names where."""


def check_json_value(
    value: T,
    path: str = "$",
    max_depth: int = MAX_DEPTH,
    bound_ints: bool = True,
    checked: tuple[type, ...] = (),
) -> T:
    """``value`` unchanged, or ``UnsafeJson`` naming the first bad part (iterative walk,
    children in order, a mapping's keys before its values).

    ``bound_ints=False`` leaves integers to the fields that hold them (an id past 64 bits
    names no task: a 404 for that one report, not a refusal of the whole request).
    ``checked``: types whose instances were validated already (built in code) and pass."""
    # ``steps[i]`` is the key or index, in ``opened[i]``, of the node under check: the path
    # of that node is ``path`` followed by every step.
    opened: list[Iterator[tuple[Any, Any]]] = []
    steps: list[Any] = []
    item: Any = value
    while True:
        if len(steps) > max_depth:
            raise UnsafeJson(f"{_where(path, steps)}: nested deeper than {max_depth} levels")
        kind = type(item)  # the exact types a parser makes first: most nodes stop here
        if kind is str:
            if not item.isascii():  # only the rest can hold a surrogate
                _check_text(item, path, steps)
        elif kind is int:
            if bound_ints and not INT64_MIN <= item <= INT64_MAX:
                _too_wide(item, path, steps)
        elif kind is float:
            if not math.isfinite(item):
                raise UnsafeJson(f"{_where(path, steps)}: {item} is not a JSON number")
        elif kind in _NO_CHECK:
            pass
        elif kind is dict or kind is list:
            if item:
                _open(item, path, steps, opened, max_depth, bound_ints)
        else:
            _other(item, path, steps, opened, max_depth, bound_ints, checked)
        # The next node: the next child of the innermost container that has one left.
        while opened:
            following: Any = next(opened[-1], _END)
            if following is not _END:
                steps[-1], item = following
                break
            opened.pop()
            steps.pop()
        else:
            return value


def _open(
    container: dict[Any, Any] | list[Any] | tuple[Any, ...],
    path: str,
    steps: list[Any],
    opened: list[Iterator[tuple[Any, Any]]],
    max_depth: int,
    bound_ints: bool,
) -> None:
    """Check a mapping's keys, then open the container for its children to be walked one
    by one, unless they are plain scalars that all pass (found in C, ``_all_pass``)."""
    if isinstance(container, dict):
        if len(container) < _SUMMED or not _plain_keys(container):
            for key in container:
                if type(key) is not str or not key.isascii():
                    _check_key(key, path, steps)
        values: Collection[Any] = container.values()
    else:
        values = container
    # Children one level below the deepest allowed are refused, so they are walked; a
    # few are walked faster than they are summed.
    if len(steps) == max_depth or len(values) < _SUMMED or not _all_pass(values, bound_ints):
        opened.append(iter(container.items()) if isinstance(container, dict)
                      else enumerate(container))  # fmt: skip
        steps.append(None)


def _other(
    item: Any,
    path: str,
    steps: list[Any],
    opened: list[Iterator[tuple[Any, Any]]],
    max_depth: int,
    bound_ints: bool,
    checked: tuple[type, ...],
) -> None:
    """A node of another type than the parser's own: a subclass, a tuple, a model built in
    code (``checked``), or no JSON value at all."""
    if isinstance(item, str):
        _check_text(item, path, steps)
    elif isinstance(item, (bool, *checked)):
        pass
    elif isinstance(item, int):
        if bound_ints and not INT64_MIN <= item <= INT64_MAX:
            _too_wide(item, path, steps)
    elif isinstance(item, float):
        if not math.isfinite(item):
            raise UnsafeJson(f"{_where(path, steps)}: {item} is not a JSON number")
    elif isinstance(item, dict | list | tuple):
        if item:
            _open(item, path, steps, opened, max_depth, bound_ints)
    else:
        raise UnsafeJson(f"{_where(path, steps)}: a {type(item).__name__} is not a JSON value")


def _check_key(key: Any, path: str, steps: list[Any]) -> None:
    if not isinstance(key, str):
        raise UnsafeJson(f"{_where(path, steps)}: key {key!r} is not a string")
    _check_text(key, path, steps, key)


def _too_wide(number: int, path: str, steps: list[Any]) -> None:
    raise UnsafeJson(f"{_where(path, steps)}: integer {str(number)[:20]}… is outside 64 bits")


def _plain_keys(mapping: dict[Any, Any]) -> bool:
    """True when every key is text without a lone surrogate (checked in C, as below)."""
    return set(map(type, mapping)) <= {str} and not any(map(_SURROGATE.search, mapping))


def _all_pass(values: Collection[Any], bound_ints: bool) -> bool:
    """True when every one of ``values`` is a plain scalar that passes, found by loops
    that run in C (``map``, ``min``, ``sum``), never a Python step per value: a list of
    four million numbers is the common large output. False says "walk them one by one",
    which finds the bad one and names it (or finds none: a sum can overflow)."""
    kinds = set(map(type, values))
    if kinds <= _NO_CHECK:
        return True
    if kinds == {str}:
        return not any(map(_SURROGATE.search, values))
    if not kinds <= _NUMBERS:
        return False  # containers, subclasses, a mix of numbers and text: one by one
    try:
        if float in kinds and not math.isfinite(sum(values)):  # a NaN or an infinity
            return False
        if not bound_ints or int not in kinds:
            return True
        # Finite from here, so the comparisons hold. The sum of sizes answers at once
        # when the numbers are small; else the extremes (a float past 64 bits fails too:
        # one by one then, which passes it).
        return bool(sum(map(abs, values)) <= INT64_MAX) or (
            min(values) >= INT64_MIN and max(values) <= INT64_MAX
        )
    except OverflowError:  # an int too large for a float
        return False


def _where(path: str, steps: list[Any]) -> str:
    """The path of the node ``steps`` lead to: ``$.key[3]`` (keys clipped to 40 chars)."""
    return path + "".join(f"[{s}]" if isinstance(s, int) else f".{s[:40]}" for s in steps)


def _check_text(text: str, path: str, steps: list[Any], key: str | None = None) -> None:
    """``text`` (a value, or ``key`` of the mapping ``steps`` lead to) encodes as UTF-8."""
    found = _SURROGATE.search(text)
    if found is not None:
        where = _where(path, steps) + (f".{key[:40]!r}" if key is not None else "")
        raise UnsafeJson(
            f"{where}: character {found.start()} is a lone surrogate, not valid Unicode"
        )
