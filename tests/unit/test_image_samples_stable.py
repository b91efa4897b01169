"""tests/image_samples.py's bytes are test parameters: every xdist worker must collect the
same ids, whatever the clock says while it collects."""

from __future__ import annotations

import time

import image_samples
import pytest


def test_the_zip_sample_is_the_same_bytes_at_any_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)
    before = image_samples.zip_file()
    monkeypatch.setattr(time, "time", lambda: 1_700_000_003.0)  # another DOS 2-second tick
    assert image_samples.zip_file() == before
