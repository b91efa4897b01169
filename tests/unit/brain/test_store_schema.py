"""One module declares the brain store's schema (``airig/brain/store/schema.py``, issue 37;
a SQLAlchemy ``MetaData`` since issue 38, upgraded by ``store/migrations/``).

Before it, six files made tables and indexes (``store/db.py``, ``store/backups.py``,
``escalation/ledger.py``, ``ops/alerts.py``, ``scheduling/candidates.py``). Two stores
made by that code lie in ``stores/``: the schema it made (``schema_before_issue37.sql``,
``sqlite_master`` as written then) and a store of an early brain, from before every added
column (``first_release.sql``). A brain of today must make the first (what a query sees
of it: columns, keys, indexes; SQLAlchemy writes its statements in its own words) and
migrate the second to it. The search index (``index/search.sqlite``) is a database of its
own and keeps its schema in ``store/index_file.py``: it is not in these files.
``test_store_migrations.py`` covers the revisions themselves.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import brain_helpers as h

from airig.brain.store.migrations import revisions

STORES = Path(__file__).parent / "stores"


def master(conn: sqlite3.Connection) -> dict[str, str]:
    """Each table and index by name, its statement with its white space squeezed."""
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name != 'sqlite_sequence'"
    )
    return {name: re.sub(r"\s+", " ", sql).strip() for name, sql in rows}


def shape(conn: sqlite3.Connection) -> dict[str, object]:
    """What a query sees of a store, however its statements were written: each table's
    columns (name, type, not null, default, key) and each index's table, columns,
    uniqueness and condition."""
    found: dict[str, object] = {}
    for name, kind, table, sql in conn.execute(
        "SELECT name, type, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL"
    ).fetchall():
        if kind == "table":
            info = conn.execute(f"PRAGMA table_info({name})").fetchall()
            keys = conn.execute(f"PRAGMA foreign_key_list({name})").fetchall()
            found[name] = (
                sorted(tuple(row)[1:] for row in info),  # added ones come last
                sorted(tuple(row)[2:5] for row in keys),  # (table, from, to)
            )
        elif kind == "index":
            columns = [row[2] for row in conn.execute(f"PRAGMA index_info({name})")]
            where = re.sub(r"\s+", " ", sql.partition(" WHERE ")[2]).strip()
            found[name] = (table, columns, sql.startswith("CREATE UNIQUE"), where)
    return found


def load(sql_file: Path, into: Path) -> None:
    into.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(into)
    conn.executescript(sql_file.read_text())
    conn.close()


def test_a_new_store_is_the_store_the_code_before_made(tmp_path):
    # SQLite's store whatever AIRIG_TEST_STORE says: the statements in sqlite_master are
    # compared (test_store_migrations_pg.py checks PostgreSQL's against metadata)
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL="")
    try:
        with brain.db.read() as conn:
            made = shape(conn)
            version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    finally:
        brain.stop()
    before = sqlite3.connect(":memory:")
    before.executescript((STORES / "schema_before_issue37.sql").read_text())
    assert made.pop("alembic_version")  # the one table the code before had no use for
    assert made.pop("estimates") and made.pop("estimates_updated")  # 0005 (issue 40)
    assert made == shape(before)
    assert [tuple(row) for row in version] == [(revisions.head(),)]


def test_an_early_brains_store_opens_and_migrates_to_the_schema_of_today(tmp_path):
    # SQLite's stores whatever AIRIG_TEST_STORE says: an early brain's file, compared by
    # sqlite_master and PRAGMAs (test_store_migrations_pg.py: PostgreSQL's upgrades)
    fresh = h.make_brain(tmp_path / "fresh", BRAIN_DATABASE_URL="")
    try:
        with fresh.db.read() as conn:
            want = shape(conn)
    finally:
        fresh.stop()
    old = tmp_path / "old" / "state" / "brain.db"
    load(STORES / "first_release.sql", old)
    with sqlite3.connect(old) as conn:
        assert "tasks_state" in shape(conn)  # what migrate drops
        assert "escalate" not in str(shape(conn)["tasks"])  # what it adds
    for _ in range(2):  # and a second opening finds nothing left to do
        brain = h.make_brain(tmp_path / "old", BRAIN_DATABASE_URL="")
        try:
            with brain.db.read() as conn:
                assert shape(conn) == want
                tokens = {row["name"]: dict(row) for row in conn.execute("SELECT * FROM tokens")}
                plan = conn.execute("SELECT name, owner FROM plans WHERE id = 'p1'").fetchone()
                task = conn.execute("SELECT state, escalate, depth FROM tasks").fetchone()
                goal = conn.execute("SELECT goal, owner FROM goals").fetchone()
        finally:
            brain.stop()
        assert re.fullmatch(r"[0-9a-f]{12}", tokens["rig-b"]["id"])
        assert re.fullmatch(r"[0-9a-f]{12}", tokens["admin"]["id"])
        assert tokens["rig-b"]["id"] != tokens["admin"]["id"]
        assert tokens["rig-b"]["trust"] == "untrusted" and tokens["admin"]["trust"] is None
        assert tuple(plan) == ("old plan", None)
        assert tuple(task) == ("SUCCEEDED", "never", 0)
        assert tuple(goal) == ("a goal", None)
    ids = tokens  # the ids given on the first opening are kept on the second
    brain = h.make_brain(tmp_path / "old", BRAIN_DATABASE_URL="")
    try:
        with brain.db.read() as conn:
            again = {row["name"]: row["id"] for row in conn.execute("SELECT * FROM tokens")}
    finally:
        brain.stop()
    assert again == {name: row["id"] for name, row in ids.items()}


def test_no_brain_code_writes_its_tables_as_sql_text():
    """Read from the code: ``CREATE TABLE`` / ``CREATE INDEX`` / ``ALTER TABLE`` in a string
    of ``airig/brain/`` is a finding: the tables are ``schema.metadata`` and the changes
    Alembic's operations in ``store/migrations/versions/``, so that one declaration serves
    SQLite and PostgreSQL. The search index's own file (``store/index_file.py``,
    ``store/vectors.py``: its vec0 tables) is the exception."""
    brain = Path(__file__).resolve().parents[3] / "airig" / "brain"
    search_index = {"store/index_file.py", "store/vectors.py"}
    pattern = re.compile(r"\b(CREATE\s+(UNIQUE\s+|VIRTUAL\s+)?(TABLE|INDEX)|ALTER\s+TABLE)\b")
    wrong = sorted(
        name
        for path in brain.rglob("*.py")
        if (name := path.relative_to(brain).as_posix()) not in search_index
        and pattern.search(path.read_text())
    )
    assert wrong == []
    assert pattern.search((brain / "store" / "index_file.py").read_text())  # it reads them
