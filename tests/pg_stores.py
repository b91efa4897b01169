"""The brain's unit tests on PostgreSQL: ``AIRIG_TEST_STORE=postgresql`` (issue 38).

Set, ``brain_helpers.make_settings`` gives every test's brain a database of its own on one
throwaway cluster per test process (``pg_cluster.py``) instead of ``<tmp>/state/brain.db``:
the same tests, the same assertions, on the other engine. Each database is a copy of one
made and brought to the schema's head once (``TEMPLATE``), so a test pays a file copy, not
the schema's DDL. A test that starts a second brain on the same folder (a restart) gets the
same database again, as it would get the same file.

Unset (the default), nothing here runs and no server is needed.

Only the tests marked ``store`` run in that pass (``.ci/run``: ``-m store``): a test whose
brain never opens a store through ``make_settings`` would run the very same code twice.
The mark cannot be forgotten: in every run, a test under ``tests/unit/brain/`` that opens
a store through ``make_settings`` without it fails (``check_marked``), so the PostgreSQL
pass never silently loses one.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path

ENV = "AIRIG_TEST_STORE"
_lock = threading.Lock()
_cluster = None
_template = ""
_by_folder: dict[str, str] = {}
# The test running now, as tests/conftest.py sets it: its node id, and whether it must be
# marked ``store`` (it is under tests/unit/brain/) and is. None outside a test (a
# subprocess's brain, a fixture of a wider scope).
running: tuple[str, bool] | None = None
MARK = "store"
MUST_MARK = "tests/unit/brain/"


def wanted() -> bool:
    engine = os.environ.get(ENV, "sqlite")
    if engine not in ("sqlite", "postgresql"):
        raise RuntimeError(f"{ENV} must be sqlite or postgresql, not {engine!r}")
    return engine == "postgresql"


def check_marked() -> None:
    """Refuse a store opened through ``make_settings`` by a test under ``MUST_MARK`` that is
    not marked ``store``: the PostgreSQL pass, which runs only the marked ones, would never
    run it on PostgreSQL."""
    if running is None:
        return
    nodeid, marked = running
    if not marked:
        raise RuntimeError(
            f"{nodeid} opens a brain store (make_settings) but is not marked {MARK!r}, so "
            f"the PostgreSQL pass would skip it; fix: add `pytestmark = pytest.mark.{MARK}` "
            "to its module (tests/pg_stores.py)"
        )


def url_for(folder: Path) -> str:
    """The database of the brain whose files are under ``folder``; made on first ask."""
    global _cluster, _template
    with _lock:
        key = str(folder.resolve())
        if key in _by_folder:
            return _by_folder[key]
        if _cluster is None:
            from pg_cluster import MISSING, start_cluster

            cluster = start_cluster()
            if cluster is None:
                raise RuntimeError(MISSING)
            atexit.register(cluster.stop)
            _cluster = cluster
            _template = _made_template(cluster)
        url = _cluster.database(template=_template)
        _by_folder[key] = url
        return url


def drop_all() -> None:
    """Drop every database made since the last call, their brains' connections cut
    (``WITH (FORCE)``): a test that never stops its brain leaves no connection behind
    (the server takes 100)."""
    with _lock:
        made = list(_by_folder.values())
        _by_folder.clear()
    for url in made:
        assert _cluster is not None
        _cluster.drop(url)


def _made_template(cluster) -> str:  # type: ignore[no-untyped-def]
    from airig.brain.store import migrations

    url = cluster.database()
    migrations.upgrade(url=url)
    return url.split("@/", 1)[1].split("?", 1)[0]
