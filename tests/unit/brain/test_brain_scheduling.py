"""Which classes a worker may claim (the claim order is tests/unit/brain/test_residency.py)."""

from __future__ import annotations

import pytest

from airig.brain.scheduling.workers import eligible_classes


@pytest.mark.parametrize(
    ("classes", "expected"),
    [
        (("cpu",), {"cpu"}),
        (("script",), {"script"}),
        (("llm",), {"llm", "resource"}),
        (("llm", "cpu"), {"llm", "cpu", "resource"}),
    ],
)
def test_eligible_classes(classes, expected):
    assert eligible_classes(classes) == expected
