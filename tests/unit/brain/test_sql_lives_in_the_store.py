"""No SQL outside the store (issue 24, finished by issue 37): the brain's SQL statements run in
``airig/brain/store/`` only; every other room calls a store function with the connection it
already holds. Read from the code: a call of ``.execute``, ``.executemany`` or
``.executescript`` anywhere in ``airig/brain/`` outside ``store/`` is a finding, with no
exception. The tables and indexes are declared in ``store/schema.py`` alone
(``test_store_schema.py``); the search index, a database file of its own, keeps its schema in
``store/index_file.py``."""

from __future__ import annotations

import ast
from pathlib import Path

BRAIN = Path(__file__).resolve().parents[3] / "airig" / "brain"
SQL_CALLS = {"execute", "executemany", "executescript"}


def sql_calls(path: Path) -> list[int]:
    """The lines of ``path`` that call ``.execute`` / ``.executemany`` / ``.executescript``."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SQL_CALLS
    )


def files_with_sql(root: Path) -> dict[str, list[int]]:
    """Every file under ``root`` outside ``store/`` that runs SQL, with its lines."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith("store/"):
            continue
        lines = sql_calls(path)
        if lines:
            found[name] = lines
    return found


def test_no_sql_outside_the_store():
    found = files_with_sql(BRAIN)
    wrong = sorted(f"airig/brain/{name}:{lines}" for name, lines in found.items())
    assert wrong == [], (
        "SQL outside airig/brain/store/: put the statement in a store module (a function "
        "that takes the caller's connection) and call that"
    )


def test_the_checker_sees_every_kind_of_call(tmp_path):
    """The rule above cannot pass by reading nothing."""
    (tmp_path / "store").mkdir()
    (tmp_path / "api").mkdir()
    (tmp_path / "store" / "rows.py").write_text("conn.execute('SELECT 1')\n")
    (tmp_path / "api" / "route.py").write_text(
        "def f(conn, db):\n"
        "    conn.execute('SELECT 1').fetchone()\n"
        "    conn.executemany('INSERT INTO t VALUES (?)', [(1,)])\n"
        "    db._conn.executescript('SELECT 1')\n"
        "    execute = 'a name, not a call'\n"
    )
    (tmp_path / "clean.py").write_text("from store import rows\nrows.read(conn)\n")
    assert files_with_sql(tmp_path) == {"api/route.py": [2, 3, 4]}
