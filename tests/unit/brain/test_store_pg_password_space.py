"""A PostgreSQL password with a space (found by tests/e2e/test_kit_postgres.py, issue 38):
the kit's launcher percent-encodes it in BRAIN_DATABASE_URL (%20), SQLAlchemy's parse
decodes it, and pg.py's connection string, re-rendered with ``render_as_string``, held a
bare space that libpq refused ("unexpected spaces found in …"), quoting that spelling of
the password, which the brain's scrubbing did not know. pg.py now builds the connection
from the parsed parts, each quoted.
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


def test_a_password_with_spaces_opens_the_store(spaced_url, tmp_path):
    _opened(spaced_url, tmp_path)


def test_a_refused_password_with_spaces_is_never_named(spaced_url, tmp_path):
    wrong = "not the two words"
    url = spaced_url.replace(quote(PASSWORD, safe=""), quote(wrong, safe=""))
    with pytest.raises(Exception) as refused:  # noqa: PT011 - its words are what is checked
        _opened(url, tmp_path)
    said = str(refused.value)
    assert "password authentication failed" in said or "authentication" in said, said
    for spelling in (wrong, quote(wrong), quote(wrong, safe=""), PASSWORD, "two words"):
        assert spelling not in said, said
