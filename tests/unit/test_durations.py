"""The kit's one "since" duration (``airig/common/durations.py``) and its five readers:
`triage --since`, `training export --since`, `report --since`, ``GET /v1/report`` and
``GET /v1/report/routing`` accept and refuse the same texts."""

from __future__ import annotations

import re

import pytest

from airig.brain.api.routes import report as report_route
from airig.common import durations
from airig.common.errors import AirigError
from airig.launcher.cli import report as report_cli
from airig.launcher.cli import training
from airig.launcher.views.triage import collect

GOOD = {
    "90s": 90, "30m": 1800, "12h": 43_200, "7d": 604_800, "4w": 2_419_200,
    "1s": 1, "3650d": durations.MAX_S, "521w": 521 * 604_800,
}  # fmt: skip
BAD = [
    "", "d", "7", "0d", "0s", "07d", "-1d", "+1d", "1e9d", "1.5h", "7d\x00", "\x007d",
    " 7d", "7d ", "7d\n", "7 d", "7D", "7dd", "７d", "٧d", "7ｄ", "9" * 400 + "d",
    "1y", "1M", "0x10d", "1_000d", "7d;DROP",
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), GOOD.items())
def test_a_count_and_a_unit_is_seconds(text, expected):
    assert durations.seconds(text) == expected
    assert re.fullmatch(durations.PATTERN, text)  # the OpenAPI grammar says the same
    assert len(text) <= durations.MAX_LENGTH


@pytest.mark.parametrize("text", BAD)
def test_anything_else_is_one_line_naming_the_forms(text):
    with pytest.raises(durations.DurationError) as refused:
        durations.seconds(text, "--since")
    error = refused.value
    assert not isinstance(error, durations.DurationTooLong)
    assert error.message.startswith("--since ") and "is not a count and a unit" in error.message
    assert "90s, 30m, 12h, 7d, 4w" in error.hint
    line = str(error)
    assert "\n" not in line and line.replace("…", "").isascii()  # no NUL, no control
    assert len(line) < 300  # 400 digits are not quoted back
    assert re.fullmatch(durations.PATTERN, text) is None  # nor does the OpenAPI grammar


@pytest.mark.parametrize("text", ["3651d", "522w", "87601h", "999999999w", "999999999s"])
def test_past_ten_years_is_too_long_and_clamps_to_ten(text):
    with pytest.raises(durations.DurationTooLong, match="more than 3650 days"):
        durations.seconds(text)
    assert durations.clamped(text) == (durations.MAX_S, True)
    assert durations.clamped("7d") == (604_800, False)


def test_a_value_that_is_no_text_is_refused_in_one_line():
    with pytest.raises(durations.DurationError, match="since int is not"):
        durations.seconds(7)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the five readers
def _refuses(read, text: str) -> str:
    with pytest.raises((AirigError, report_route.HTTPException)) as refused:
        read(text)
    error = refused.value
    said = str(error.detail) if isinstance(error, report_route.HTTPException) else str(error)
    assert "\n" not in said and "\x00" not in said
    return said


READERS = {
    "triage": collect.parse_since,
    "training": lambda text: training.parse_since(text, 2e9),
    "report": lambda text: report_cli.check(text, "day"),
    "GET /v1/report": lambda text: report_route.window(text, "week", 30, 2e9),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("text", BAD)
def test_every_reader_refuses_what_the_grammar_refuses(reader, text):
    _refuses(READERS[reader], text)


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_accepts_what_the_grammar_accepts(reader):
    for text in ("90s", "30m", "12h", "7d", "4w"):
        READERS[reader](text)


def test_past_ten_years_a_launcher_option_is_refused_the_report_s_is_the_brain_s():
    for reader in ("triage", "training"):
        assert "more than 3650 days" in _refuses(READERS[reader], "99999w")
    report_cli.check("99999w", "day")  # the brain clamps it to retention or refuses it
    window, clamped = report_route.window("99999w", "week", 30, 2e9)
    assert clamped and window.until - window.since == 30 * 86_400
