"""Rows on PostgreSQL read as sqlite3.Row reads them (pg.py ``Row``): by index, by name in
any case, the first of two same-named columns, a name nothing declared refused with
sqlite3's words. The names come from libpq's result (not psycopg's ``description``, which
a claim paid for per statement) and are shared by every result with the same columns: one
statement's names never leak into another's."""

from __future__ import annotations

import pytest

from airig.brain.store.pg import PgConnection, _names


@pytest.fixture
def conn(pg_cluster, pg_url):
    database = pg_url.split("@/", 1)[1].split("?", 1)[0]
    opened = PgConnection(pg_cluster.dsn(database))
    try:
        yield opened
    finally:
        opened.close()


def test_a_row_reads_by_index_and_by_name_in_any_case(conn):
    row = conn.execute("SELECT 1 AS one, 'x' AS \"Mixed\", NULL AS nothing").fetchone()
    assert (row[0], row["one"], row["ONE"]) == (1, 1, 1)
    assert (row["Mixed"], row["mixed"]) == ("x", "x")
    assert row["nothing"] is None and row.keys() == ["one", "Mixed", "nothing"]
    assert dict(row) == {"one": 1, "Mixed": "x", "nothing": None}
    with pytest.raises(IndexError, match="No item with that key: 'two'"):
        row["two"]


def test_two_columns_of_one_name_read_the_first_as_sqlite3_does(conn):
    row = conn.execute("SELECT 1 AS id, 2 AS id").fetchone()
    assert row["id"] == 1 and tuple(row) == (1, 2)


def test_names_of_one_statement_never_reach_another(conn):
    first = conn.execute("SELECT 1 AS a, 2 AS b").fetchone()
    second = conn.execute("SELECT 3 AS b, 4 AS a").fetchone()
    assert (first["a"], first["b"], second["a"], second["b"]) == (1, 2, 4, 3)
    # the same columns again share one map, and reading it changed nothing
    again = conn.execute("SELECT 5 AS a, 6 AS b").fetchone()
    assert (again["a"], again["b"]) == (5, 6)


def test_a_statement_without_columns_and_a_hostile_column_name(conn):
    assert conn.execute("SELECT FROM generate_series(1, 2)").fetchall() != []
    name = 'na"me é \u2603 ' + "x" * 40  # quoted identifiers: any text, cut at 63 bytes
    row = conn.execute(f'SELECT 7 AS "{name.replace(chr(34), chr(34) * 2)}"').fetchone()
    [stored] = row.keys()
    assert row[stored] == 7 and stored == name.encode()[:63].decode("utf-8", "ignore")


def test_the_name_cache_is_bounded():
    before = _names.cache_info().maxsize
    for i in range(3000):
        _names((f"c{i}".encode(),))
    info = _names.cache_info()
    assert info.maxsize == before and info.currsize <= before
