"""How far back: the one grammar of every "since" duration the kit reads (``triage
--since``, ``training export --since``, ``report --since``, ``GET /v1/report?since=``,
``GET /v1/report/routing?since=``).

A duration is a whole count without a leading zero and one lowercase unit: ``90s``,
``30m``, ``12h``, ``7d``, ``4w``. Nothing else: no sign, no fraction, no exponent, no
space, no NUL, no digit outside ASCII (``str.isdigit`` and ``\\d`` take ``７``), no
uppercase (``M`` would read as months to some), at most ``MAX_DIGITS`` digits (so no
huge number is ever built). ``PATTERN`` is the same grammar for an OpenAPI document, so
a route's schema and its check cannot drift apart.

Bounds: positive (``0d`` is no window), at most ``MAX_S`` (ten years: more than any
store keeps and older than the kit). Past it is ``DurationTooLong``, a kind of
``DurationError``, so a caller that clamps (the report routes: retention and the bucket
bound decide there) tells it from a typo.
"""

from __future__ import annotations

import re

from airig.common.errors import AirigError

UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
MAX_DIGITS = 9
MAX_DAYS = 3650
MAX_S = MAX_DAYS * 86_400
PATTERN = rf"^[1-9][0-9]{{0,{MAX_DIGITS - 1}}}[smhdw]$"
MAX_LENGTH = MAX_DIGITS + 1
FORMS = (
    "give a whole number and a unit: s, m, h, d or w (e.g. 90s, 30m, 12h, 7d, 4w), "
    f"at most {MAX_DAYS}d"
)
SHOWN = 20  # characters of a refused text quoted back
_GRAMMAR = re.compile(rf"([1-9][0-9]{{0,{MAX_DIGITS - 1}}})([smhdw])")


class DurationError(AirigError):
    """A text that is not a duration; the message names the option and quotes the text
    (escaped: no newline, NUL or terminal control reaches a log or a screen)."""


class DurationTooLong(DurationError):
    """A well-formed duration past ``MAX_S``."""


def seconds(text: str, name: str = "since") -> int:
    """``text`` as seconds, or a DurationError in one line naming ``name``."""
    found = _GRAMMAR.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise DurationError(f"{name} {shown(text)} is not a count and a unit", FORMS)
    value = int(found[1]) * UNIT_S[found[2]]
    if value > MAX_S:
        raise DurationTooLong(
            f"{name} {text} is more than {MAX_DAYS} days (ten years)",
            f"give at most {MAX_DAYS}d",
        )
    return value


def clamped(text: str, name: str = "since") -> tuple[int, bool]:
    """``seconds``, but a duration past the bound reads as ``MAX_S``; whether it did."""
    try:
        return seconds(text, name), False
    except DurationTooLong:
        return MAX_S, True


def shown(text: object) -> str:
    """The refused text as an ASCII literal, cut to ``SHOWN`` characters."""
    if not isinstance(text, str):
        return type(text).__name__
    return ascii(text[:SHOWN]) + ("…" if len(text) > SHOWN else "")
