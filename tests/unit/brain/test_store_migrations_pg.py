"""The store's schema and migrations on a real PostgreSQL server (issue 38, the schema part).

``BRAIN_DATABASE_URL`` names a PostgreSQL store; ``migrations.upgrade(url=…)`` and
``python -m airig.brain.store.migrations upgrade`` make and upgrade it (the brain's queries
still run on SQLite only). On a throwaway cluster (``tests/pg_cluster.py``, the
``pg_cluster`` / ``pg_url`` fixtures of ``tests/conftest.py``), what must hold:

- a new database gets what ``schema.metadata`` declares (Alembic's comparison finds
  nothing; SQLAlchemy's inspector reads the same columns, keys and indexes), stamped at
  the newest revision; a second upgrade changes nothing;
- a store a newer brain made is refused with the SQLite line, and left as it was; so is a
  database with other tables, and one stamped inside SQLite's history (0001-0003);
- revisions after the newest run in one transaction each: a process SIGKILLed between
  two, or in one, leaves the last that committed, and the next upgrade finishes;
- a wrong password, a socket nobody listens on and a hostile URL (NUL, 100k characters,
  another scheme, no URL at all) are one line, the password never in it;
- the brain refuses to start with BRAIN_DATABASE_URL set, in one line.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from pg_cluster import PASSWORD
from sqlalchemy.dialects import postgresql

from airig.brain.store import migrations, schema
from airig.brain.store.migrations import revisions
from airig.common.errors import AirigError

ROOT = Path(__file__).resolve().parents[3]
PG = postgresql.dialect()


def connect(url: str) -> sa.Engine:
    return sa.create_engine(url, poolclass=sa.pool.NullPool)


def query(url: str, sql: str) -> list[tuple[object, ...]]:
    engine = connect(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(sa.text(sql))]
    finally:
        engine.dispose()


def execute(url: str, sql: str) -> None:
    engine = connect(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(sql))
    finally:
        engine.dispose()


def revision_of(url: str) -> str | None:
    rows = query(url, "SELECT version_num FROM alembic_version")
    return str(rows[0][0]) if rows else None


def layout(url: str) -> dict[str, object]:
    """Every table as the server has it: columns (type, nullable, default), primary key,
    foreign keys, unique constraints and indexes (with a partial index's WHERE)."""
    engine = connect(url)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            return {
                table: {
                    "columns": {
                        c["name"]: (
                            str(c["type"].compile(dialect=PG)),
                            c["nullable"],
                            c["default"] if "nextval" not in str(c["default"]) else "serial",
                        )
                        for c in inspector.get_columns(table)
                    },
                    "pk": inspector.get_pk_constraint(table)["constrained_columns"],
                    "fks": sorted(
                        (tuple(fk["constrained_columns"]), fk["referred_table"])
                        for fk in inspector.get_foreign_keys(table)
                    ),
                    "unique": sorted(
                        tuple(u["column_names"]) for u in inspector.get_unique_constraints(table)
                    ),
                    "indexes": sorted(
                        (
                            i["name"],
                            tuple(i["column_names"]),
                            bool(i["unique"]),
                            where(i.get("dialect_options", {}).get("postgresql_where")),
                        )
                        for i in inspector.get_indexes(table)
                        # a UNIQUE constraint's own index: under "unique"
                        if "duplicates_constraint" not in i
                    ),
                }
                for table in inspector.get_table_names()
            }
    finally:
        engine.dispose()


def where(clause: object) -> str:
    """A partial index's WHERE, in words both sides share: the server adds parentheses and
    ``::text`` casts to what it was given."""
    text = "" if clause is None else re.sub(r"::text|[()]", "", str(clause))
    return " ".join(text.split())


def declared() -> dict[str, object]:
    """What ``schema.metadata`` says each table is, in the inspector's words."""

    def default(column: sa.Column[object]) -> str | None:
        value = column.server_default
        if value is None:
            return None
        text = value.arg.text if isinstance(value.arg, sa.TextClause) else f"'{value.arg}'"  # type: ignore[attr-defined]
        return text if text.isdigit() else f"{text}::text"

    tables: dict[str, object] = {}
    for name, table in schema.metadata.tables.items():
        # SQLAlchemy's "auto" rule: a primary key of one integer column is SERIAL/BIGSERIAL
        pk = list(table.primary_key.columns)
        serial = {pk[0].name} if len(pk) == 1 and pk[0].type.python_type is int else set()
        tables[name] = {
            "columns": {
                c.name: (
                    str(c.type.compile(dialect=PG)),
                    not c.primary_key and c.nullable,
                    "serial" if c.name in serial else default(c),
                )
                for c in table.columns
            },
            "pk": [c.name for c in table.primary_key.columns],
            "fks": sorted(
                (tuple(fk.parent.name for fk in con.elements), con.referred_table.name)
                for con in table.foreign_key_constraints
            ),
            "unique": sorted(  # a column's unique=True is a constraint too, in SQLAlchemy 2
                {
                    tuple(c.name for c in con.columns)
                    for con in table.constraints
                    if isinstance(con, sa.UniqueConstraint)
                }
                | {(c.name,) for c in table.columns if c.unique}
            ),
            "indexes": sorted(
                (
                    i.name,
                    tuple(c.name for c in i.columns),
                    bool(i.unique),
                    where(i.dialect_options["postgresql"]["where"]),
                )
                for i in table.indexes
            ),
        }
    return tables


def one_line(text: str, *words: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def refused(url: str) -> str:
    """The one-line message ``migrations.upgrade`` refuses ``url`` with."""
    with pytest.raises(AirigError) as caught:
        migrations.upgrade(url=url)
    return one_line(str(caught.value))


def cli(env_url: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m airig.brain.store.migrations upgrade``, the URL from the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "AIRIG_"))}
    if env_url is not None:
        env["BRAIN_DATABASE_URL"] = env_url
    return subprocess.run(
        [sys.executable, "-m", "airig.brain.store.migrations", "upgrade", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


# ------------------------------------------------------------------ a new store
def test_a_new_database_gets_the_declared_schema_stamped_at_head(pg_url):
    migrations.upgrade(url=pg_url)
    assert revision_of(pg_url) == revisions.head()
    engine = connect(pg_url)
    try:
        with engine.connect() as conn:
            found = compare_metadata(MigrationContext.configure(conn), schema.metadata)
    finally:
        engine.dispose()
    # schema._key declares a primary key nullable, as SQLite's stores have it; PostgreSQL's
    # PRIMARY KEY is NOT NULL whatever the column says: that, and only that, differs
    keys = {(t.name, c.name) for t in schema.metadata.tables.values() for c in t.primary_key
            if c.nullable}  # fmt: skip
    nullable = [d[0] for d in found if isinstance(d, list) and d[0][0] == "modify_nullable"]
    assert {(d[2], d[3]) for d in nullable} == keys and len(keys) == 9
    assert all(d[5] is False for d in nullable)  # NOT NULL on the server
    assert [d for d in found if not (isinstance(d, list) and d[0] in nullable)] == []
    found = layout(pg_url)
    assert found.pop("alembic_version")
    assert found == declared()
    # what the SQLite-only types would have been wrong in (schema.INT, schema.FLOAT)
    tasks = found["tasks"]["columns"]  # type: ignore[index]
    assert tasks["id"][0] == "BIGINT" and tasks["created_at"][0] == "DOUBLE PRECISION"


def test_the_layout_check_can_fail(pg_url):
    """A column the declaration lacks, or a missing index, is a difference."""
    migrations.upgrade(url=pg_url)
    execute(pg_url, "ALTER TABLE tasks ADD COLUMN note TEXT")
    execute(pg_url, "DROP INDEX tasks_fingerprint")
    assert layout(pg_url)["tasks"] != declared()["tasks"]


def test_a_second_upgrade_changes_nothing(pg_url, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="airig.brain.store.migrations")
    migrations.upgrade(url=pg_url)
    assert [r.getMessage() for r in caplog.records] == ["brain store made"]
    assert "***" in caplog.records[0].__dict__["store"]
    assert PASSWORD not in caplog.text
    execute(pg_url, "INSERT INTO plans (id, name, body_hash, submitted_by, created_at) "
                    "VALUES ('p1', 'kept', 'h', 'me', 1.5)")  # fmt: skip
    before = layout(pg_url)
    caplog.clear()
    from airig.brain.store.migrations import postgres

    def nothing_to_do(*_args: object, **_kw: object) -> None:
        raise AssertionError("a store at the newest revision was changed")

    monkeypatch.setattr(postgres.schema.metadata, "create_all", nothing_to_do)
    monkeypatch.setattr(postgres.command, "upgrade", nothing_to_do)
    migrations.upgrade(url=pg_url)
    assert caplog.records == []
    assert layout(pg_url) == before
    assert query(pg_url, "SELECT name FROM plans") == [("kept",)]
    assert query(pg_url, "SELECT count(*) FROM alembic_version") == [(1,)]


# ------------------------------------------------------------------ stores it refuses
def test_a_store_a_newer_brain_made_is_refused_in_the_sqlite_line(pg_url):
    migrations.upgrade(url=pg_url)
    execute(pg_url, "UPDATE alembic_version SET version_num = '9999'")
    before = layout(pg_url)
    line = refused(pg_url)
    masked = pg_url.replace(PASSWORD, "***").replace("/tmp/", "%2Ftmp%2F")
    assert line.startswith(
        f"the brain's store {masked} was made by a newer airig (revision '9999', "
        f"this brain knows revisions up to {revisions.head()}) (update airig, or restore a backup"
    ), line
    assert PASSWORD not in line
    assert layout(pg_url) == before and revision_of(pg_url) == "9999"
    done = cli(pg_url)
    assert done.returncode == 2 and done.stdout == ""
    one_line(done.stderr, "newer airig", "revision '9999'", "***")
    assert PASSWORD not in done.stderr


def test_a_database_with_other_tables_is_refused_and_left_alone(pg_url):
    execute(pg_url, "CREATE TABLE customers (id INT)")
    line = refused(pg_url)
    assert "holds tables (customers) but no brain store revision" in line
    assert set(layout(pg_url)) == {"customers"}


def test_a_store_stamped_inside_sqlites_history_is_refused(pg_url):
    migrations.upgrade(url=pg_url)
    execute(pg_url, "UPDATE alembic_version SET version_num = '0002'")
    assert "one of SQLite's history" in refused(pg_url)
    assert revision_of(pg_url) == "0002"


# ------------------------------------------------------------------ revisions after 0004
NEXT = '''"""{what}

Revision ID: {rev}
Revises: {down}
"""

import os
import signal

import sqlalchemy as sa
from alembic import op

revision = "{rev}"
down_revision = "{down}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if os.environ.get("KILL_AT") == "{rev}-start":
        os.kill(os.getpid(), signal.SIGKILL)
    {body}
    if os.environ.get("KILL_AT") == "{rev}-middle":
        os.kill(os.getpid(), signal.SIGKILL)
    op.create_index("{rev}_index", "tasks", ["created_at", "id"])
'''

UPGRADE = """
import sys
from pathlib import Path
from airig.brain.store import migrations
from airig.brain.store.migrations import revisions, runner
revisions.MIGRATIONS = runner.MIGRATIONS = Path(sys.argv[1])
migrations.upgrade(url=sys.argv[2])
"""


def later_revisions(tmp_path: Path) -> Path:
    """A copy of the migrations with two more revisions after the newest."""
    copy = tmp_path / "migrations"
    shutil.copytree(revisions.MIGRATIONS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    head = revisions.head()
    first, second = f"{int(head) + 1:04d}", f"{int(head) + 2:04d}"
    bodies = {
        first: (head, 'op.add_column("tasks", sa.Column("note", sa.Text))'),
        second: (first, 'op.create_table("notes", sa.Column("id", sa.BigInteger, primary_key=1))'),
    }
    for rev, (down, body) in bodies.items():
        (copy / "versions" / f"{rev}_test.py").write_text(
            NEXT.format(what=f"test revision {rev}", rev=rev, down=down, body=body)
        )
    return copy


def upgrade_with(copy: Path, url: str, kill_at: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KILL_AT": kill_at}
    return subprocess.run([sys.executable, "-c", UPGRADE, str(copy), url], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_an_older_store_runs_the_later_revisions(pg_url, tmp_path):
    migrations.upgrade(url=pg_url)
    copy = later_revisions(tmp_path)
    done = upgrade_with(copy, pg_url)
    assert done.returncode == 0, done.stderr
    head = int(revisions.head())
    assert revision_of(pg_url) == f"{head + 2:04d}"
    assert "note" in layout(pg_url)["tasks"]["columns"]  # type: ignore[index]
    assert "notes" in layout(pg_url)


@pytest.mark.parametrize("where", ["start", "middle"])
def test_a_process_killed_between_or_in_revisions_is_finished_by_the_next(pg_url, tmp_path, where):
    """SIGKILL as the second new revision begins (the boundary: the first committed) and
    after its first statement: the store stays at the first, the next upgrade finishes."""
    migrations.upgrade(url=pg_url)
    copy = later_revisions(tmp_path)
    head = int(revisions.head())
    first, second = f"{head + 1:04d}", f"{head + 2:04d}"
    killed = upgrade_with(copy, pg_url, kill_at=f"{second}-{where}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert revision_of(pg_url) == first
    shape = layout(pg_url)
    assert "note" in shape["tasks"]["columns"] and "notes" not in shape  # type: ignore[index]
    assert f"{second}_index" not in str(shape["tasks"])  # type: ignore[index]
    done = upgrade_with(copy, pg_url)
    assert done.returncode == 0, done.stderr
    assert revision_of(pg_url) == second
    shape = layout(pg_url)
    assert "notes" in shape and f"{second}_index" in str(shape["tasks"])  # type: ignore[index]


# ------------------------------------------------------------------ servers it cannot use
SECRET = "Wr0ng/p@ss%w0rd:x"


def with_password(url: str, password: str) -> str:
    return url.replace(f":{PASSWORD}@", f":{quote(password, safe='')}@")


def test_a_wrong_password_is_one_line_with_the_password_masked(pg_url):
    url = with_password(pg_url, SECRET)
    line = refused(url)
    assert "password authentication failed" in line and ":***@" in line
    for spelling in (SECRET, quote(SECRET, safe=""), "Wr0ng"):
        assert spelling not in line
    done = cli(url)
    assert done.returncode == 2
    one_line(done.stderr, "password authentication failed", ":***@")
    assert "Wr0ng" not in done.stdout + done.stderr


def test_a_socket_nobody_listens_on_is_one_line(pg_url, tmp_path):
    url = with_password(pg_url, SECRET).split("?", 1)[0] + f"?host={tmp_path}&port=5432"
    line = refused(url)
    assert "No such file or directory" in line and ":***@" in line and "Wr0ng" not in line
    done = cli(None, "--url", url)  # the flag works too
    assert done.returncode == 2
    one_line(done.stderr, "cannot bring the brain's store", "No such file")
    assert "Wr0ng" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("postgresql://u:Wr0ng@/db\x00?host=/tmp", "control character ('\\x00' at 24)"),
        ("postgresql://u:Wr0ng@/" + "d" * 100_000, "100022 characters long, over 4096"),
        ("mysql://u:Wr0ng@host/db", "scheme 'mysql' is not PostgreSQL's"),
        ("sqlite:////state/brain.db", "scheme 'sqlite' is not PostgreSQL's"),
        ("Wr0ng", "is not a database URL"),
        ("postgresql://u:Wr0ng@/db?host=/nonexistent&port=99999999999", "port"),
        ("postgresql://u:Wr0ng@somewhere:99999999999/db", "port 99999999999 is not 1-65535"),
        ("postgresql://u:Wr0ng@/db?bogus_option=1&host=/nonexistent", "bogus_option"),
    ],
)
def test_a_hostile_url_is_one_line_without_the_password(url, words):
    line = refused(url)
    assert words in line and "Wr0ng" not in line and len(line) < 800


def test_a_brain_whose_database_url_is_unreachable_exits_in_one_line(tmp_path):
    """The brain serves on BRAIN_DATABASE_URL (issue 38); a server it cannot reach is one
    line at start, the password never in it, no SQLite file made instead."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "AIRIG_"))}
    env.update({"BRAIN_DB": str(tmp_path / "brain.db"), "BRAIN_RESULTS_DIR": str(tmp_path / "r"),
                "BRAIN_ADMIN_TOKEN": "admin-secret-token", "BRAIN_LISTEN_PORT": "1",
                "WORKER_BOOTSTRAP_TOKEN": "bootstrap-secret-token",
                "BRAIN_DATABASE_URL": "postgresql://u:Wr0ng@/db?host=/nonexistent"})  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "airig.brain"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2
    said = "cannot bring the brain's store postgresql+psycopg://u:***@/db?host=%2Fnonexistent"
    one_line(done.stdout + done.stderr, said)
    assert "Wr0ng" not in done.stdout + done.stderr
    assert not (tmp_path / "brain.db").exists()  # refused before the store opened


def test_missing_server_binaries_are_a_skip_ci_does_not_allow(monkeypatch):
    """Without Debian's postgresql the fixture skips, and a strict run (CI) fails on it."""
    import importlib.util

    import pg_cluster

    # tests/conftest.py by its path: the name `conftest` is tests/e2e/conftest.py's once the
    # e2e tests are collected (tests/conftest.py's docstring)
    spec = importlib.util.spec_from_file_location(
        "tests_root_conftest", ROOT / "tests" / "conftest.py"
    )
    assert spec and spec.loader
    conftest = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, conftest)  # its dataclasses look it up
    spec.loader.exec_module(conftest)
    assert not conftest.skip_allowed(pg_cluster.MISSING)
    monkeypatch.setattr(pg_cluster.glob, "glob", lambda _pattern: [])
    assert pg_cluster.start_cluster() is None


RACE = """
import sys, time
from airig.brain.store import migrations, schema
real = schema.metadata.create_all
def slow(*args, **kwargs):
    time.sleep(float(sys.argv[2]))  # both have read "no tables" before either creates one
    return real(*args, **kwargs)
schema.metadata.create_all = slow
migrations.upgrade(url=sys.argv[1])
"""


def test_two_processes_making_one_store_at_once_both_succeed(pg_url):
    """Several brains will share one database (issue 38): two upgrades of one new database
    at once take turns (an advisory lock), the second finds the store made."""
    racers = [
        subprocess.Popen([sys.executable, "-c", RACE, pg_url, "2"], cwd=ROOT, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]  # fmt: skip
    outcomes = [(racer.wait(timeout=120), racer.stderr.read()) for racer in racers]  # type: ignore[union-attr]
    assert [code for code, _ in outcomes] == [0, 0], outcomes
    assert revision_of(pg_url) == revisions.head()
    found = layout(pg_url)
    found.pop("alembic_version")
    assert found == declared()
