"""A PostgreSQL password with a space (found by tests/e2e/test_kit_postgres.py, issue 38):
the kit's launcher percent-encodes it in BRAIN_DATABASE_URL (%20), SQLAlchemy's parse
decodes it, and pg.py's connection string, re-rendered with ``render_as_string``, holds a
bare space that libpq refuses ("unexpected spaces found in …"); the refusal quotes that
spelling of the password, which the brain's scrubbing does not know. Strict xfails: they
pass, and so fail the run, once pg.py builds its connection from the parsed parts.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

PASSWORD = "two words and@colon:slash/"
ROLE = "spaced_user"


@pytest.fixture
def spaced_url(pg_cluster, pg_url) -> str:
    """``pg_url``'s database, reached as a role whose password holds spaces."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {ROLE}")  # a crashed run's
        # a utility statement takes no parameters: the literal quoted by psycopg
        secret = sql.Literal(PASSWORD)
        conn.execute(sql.SQL(f"CREATE ROLE {ROLE} LOGIN SUPERUSER PASSWORD {{}}").format(secret))
    database = pg_url.split("@/", 1)[1]
    yield f"postgresql+psycopg://{ROLE}:{quote(PASSWORD, safe='')}@/{database}"
    # the tables it made are in that database: dropped there, then the role
    with psycopg.connect(pg_cluster.dsn(database.split("?", 1)[0]), autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {ROLE} CASCADE")
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {ROLE}")


def _opened(url: str, tmp_path: Path) -> None:
    from airig.brain.store.engines import open_store

    open_store(tmp_path / "unused.db", url).close()


@pytest.mark.xfail(strict=True, reason="pg.py renders the URL with a bare space (H9 report)")
def test_a_password_with_spaces_opens_the_store(spaced_url, tmp_path):
    _opened(spaced_url, tmp_path)


@pytest.mark.xfail(strict=True, reason="the refusal quotes the password (H9 report)")
def test_a_refused_connection_never_names_the_password(spaced_url, tmp_path):
    try:
        _opened(spaced_url, tmp_path)
    except Exception as exc:  # noqa: BLE001 - whatever it raises, its words are checked
        said = str(exc)
    else:
        said = ""
    for spelling in ("two words", quote("two words"), "two%20words"):
        assert spelling not in said, said
    assert said == ""  # and it opened
