"""The PostgreSQL pass runs only the tests marked ``store`` (tests/pg_stores.py): a test
under tests/unit/brain/ that opens a brain store through ``make_settings`` unmarked fails
in every run, so the pass cannot silently lose it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pg_stores
import pytest
from brain_helpers import make_settings


@pytest.fixture
def as_test() -> Iterator[None]:
    before = pg_stores.running
    yield
    pg_stores.running = before


def test_an_unmarked_brain_test_that_opens_a_store_fails_naming_the_fix(
    tmp_path: Path, as_test: None
) -> None:
    pg_stores.running = ("tests/unit/brain/test_x.py::test_y", False)
    with pytest.raises(RuntimeError) as raised:
        make_settings(tmp_path)
    message = str(raised.value)
    assert "tests/unit/brain/test_x.py::test_y" in message
    assert "pytestmark = pytest.mark.store" in message
    assert "\n" not in message


def test_a_marked_test_a_test_elsewhere_and_a_given_database_pass(
    tmp_path: Path, as_test: None
) -> None:
    pg_stores.running = ("tests/unit/brain/test_x.py::test_y", True)
    make_settings(tmp_path)
    pg_stores.running = ("tests/unit/brain/test_x.py::test_y", False)
    # its own database, not the engine the pass picks: the pass would change nothing
    make_settings(tmp_path, BRAIN_DATABASE_URL="postgresql://u@/d?host=/nowhere")
    pg_stores.running = None  # a subprocess's brain, a fixture outside any test
    make_settings(tmp_path)


def test_the_running_test_is_known_and_must_mark_only_under_the_brains_tests(
    request: pytest.FixtureRequest,
) -> None:
    # set by tests/conftest.py around this very test; it is not under tests/unit/brain/
    assert pg_stores.running == (request.node.nodeid, True)
    assert not request.node.nodeid.startswith(pg_stores.MUST_MARK)


def test_every_brain_module_that_opens_a_store_is_marked() -> None:
    """A module under tests/unit/brain/ that calls make_settings or make_brain and is not
    marked: its tests fail when they run (above); this names them all at once."""
    root = Path(__file__).parent / "brain"
    unmarked = [
        path.name
        for path in sorted(root.glob("test_*.py"))
        if ("make_settings(" in (text := path.read_text()) or "make_brain(" in text)
        and "pytest.mark.store" not in text
        # a module that names its own database for each brain: the pass changes nothing
        and "BRAIN_DATABASE_URL" not in text
    ]
    assert unmarked == []
