"""Every test module has a basename of its own.

pytest imports test files by basename (rootdir-relative, no packages under tests/): two
``test_x.py`` in different folders make the second an "import file mismatch" error, and
which one loses depends on the order xdist's workers happen to collect them in. A unit
run then errors now and then, and a full run errors every time."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name():
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
