"""Where SQLite's SQL and PostgreSQL's differ, the store says it here, once.

Every other statement of the store is written in the SQL both engines accept (``ON
CONFLICT DO NOTHING``, ``RETURNING``, ``IS [NOT] DISTINCT FROM``, ``COALESCE``, ``CASE``).
What has no common spelling is a function of the connection: JSON read from a TEXT
column, a JSON array given as one parameter, string aggregation. Each takes the
connection the statement runs on (``of``): ``sqlite3.Connection`` is SQLite's,
``pg.PgConnection`` says ``dialect = "postgresql"``.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

SQLITE = "sqlite"
POSTGRESQL = "postgresql"
_savepoints = itertools.count()
_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str, only a lone one is ever seen


def of(conn: Any) -> str:
    """The engine a connection (or ``Database``) runs on; an engine's name is itself."""
    if isinstance(conn, str):
        return conn
    return str(getattr(conn, "dialect", SQLITE))


def is_pg(conn: Any) -> bool:
    return of(conn) == POSTGRESQL


def locks_rows(conn: Any) -> bool:
    """Whether ``conn`` is in a PostgreSQL write transaction that other brains' may run
    beside (``pg.PgDatabase``: only the store-wide write lock's holder runs alone). Its
    reads of rows it will change must lock them; SQLite's one writer never needs to."""
    return is_pg(conn) and bool(getattr(conn, "locks_rows", False))


def for_update(conn: Any, skip_locked: bool = False) -> str:
    """The row-lock clause a write transaction's SELECT ends with on PostgreSQL, "" on
    SQLite. ``skip_locked``: rows another transaction holds are passed over (a claim's
    candidates, the reaper's and the retries' rows: another brain is at them), else waited
    for (a fenced write's one task: its state after the other's commit decides)."""
    if not locks_rows(conn):
        return ""
    return " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"


def json_text(conn: Any, column: str, key: str) -> str:
    """A top-level key of a JSON object held as TEXT, as text (NULL where absent).

    ``key`` is the code's own word (letters, digits, _), never input: it is written into
    the statement."""
    if not key.replace("_", "").isalnum():
        raise ValueError(f"not a JSON key this module writes into SQL: {key!r}")
    if is_pg(conn):
        return f"(({column})::jsonb ->> '{key}')"
    return f"json_extract({column}, '$.{key}')"


def json_rows(conn: Any, expr: str, alias: str) -> str:
    """A FROM item: one row per element of the JSON array ``expr`` (a TEXT column or a
    parameter), its text in ``alias.value``."""
    if is_pg(conn):
        return f"jsonb_array_elements_text(({expr})::jsonb) AS {alias}(value)"
    return f"json_each({expr}) AS {alias}"


def json_values(conn: Any, param: str = "?", cast: str = "") -> str:
    """A subquery of the values of a JSON array given as one parameter (``param``), one row
    each in a column named ``value``: ``x IN ({json_values(conn)})``. ``cast`` is the SQL
    type the values compare as on PostgreSQL (``bigint`` for ids), which types strictly
    where SQLite compares 1 and '1' alike only by affinity."""
    if is_pg(conn):
        value = f"value::{cast}" if cast else "value"
        return f"SELECT {value} FROM jsonb_array_elements_text(({param})::jsonb) AS j(value)"
    return f"SELECT value FROM json_each({param})"


def text_holdable(value: str) -> bool:
    """Whether PostgreSQL's text can hold ``value``: no NUL, no lone surrogate (not UTF-8).
    A name from input (a model's answer, a log line: JSON may escape either) with one
    names no row of the store, whose keys and ids never hold them."""
    return "\x00" not in value and not _SURROGATE.search(value)


def json_list(values: Iterable[Any]) -> str:
    """The JSON array parameter of ``json_values``: the values less the strings no row can
    equal (``text_holdable``), for which PostgreSQL's jsonb would refuse the whole
    statement where SQLite finds nothing."""
    return json.dumps([v for v in values if not isinstance(v, str) or text_holdable(v)])


@contextmanager
def savepoint(conn: Any) -> Iterator[None]:
    """A part of the caller's transaction that may fail alone: on an error it is undone and
    the error raised, the transaction still open. SQLite goes on after a failed statement;
    PostgreSQL refuses every later statement of the transaction without this."""
    name = f"airig_sp{next(_savepoints)}"
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        conn.execute(f"ROLLBACK TO {name}")
        conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")
