"""The store's one schema and its versioned history (issue 38, the first part).

``airig/brain/store/schema.py``'s ``metadata`` declares the tables once, for SQLite now
and PostgreSQL later; ``store/migrations/versions/`` holds the numbered Alembic revisions
the brain runs at start (``migrations.upgrade``). What must hold:

- the revisions, run one by one, make what ``metadata`` declares (Alembic's own
  comparison finds nothing, and the store looks the same to a query);
- the same declaration compiles for PostgreSQL (no server needed);
- a store an older release made (5fda188: ``stores/release_5fda188.sql``, the file that
  release's brain made, dumped) upgrades and keeps its rows; so does the early brain's
  store of ``test_store_schema.py``;
- a store a newer brain made is refused with one line and left as it was, in process and
  through ``python -m airig.brain``; a damaged file too;
- a brain killed between revisions, or in the middle of one, leaves the store at the last
  revision it finished, and the next start finishes the job (each revision is one
  transaction: tried at every statement, and with a real SIGKILL);
- a store on a read-only volume is one line;
- the healthcheck imports neither SQLAlchemy nor Alembic, and a start on a store at this
  revision does not import Alembic.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import brain_helpers as h
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.ddl.impl import DefaultImpl
from alembic.migration import MigrationContext
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable
from test_store_schema import STORES, load, shape

from airig.brain.store import schema
from airig.brain.store.db import Database
from airig.brain.store.migrations import revisions, runner

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ("first_release.sql", "release_5fda188.sql")


def fresh_shape(tmp_path: Path) -> dict[str, object]:
    db = Database(tmp_path / "fresh" / "brain.db")
    try:
        with db.read() as conn:
            return shape(conn)
    finally:
        db.close()


def revision_of(path: Path) -> str | None:
    return revisions.store_revision(path)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def upgrade_to(path: Path, target: str) -> None:
    """Alembic's own upgrade, to ``target`` (not the brain's start): the reference a store
    stopped at ``target`` must look like."""
    engine = runner.engine(path)
    try:
        with engine.connect() as conn:
            command.upgrade(runner.config(conn), target)
    finally:
        engine.dispose()


# ------------------------------------------------------------------ one schema, its history
def test_the_revision_files_are_one_numbered_line():
    scripts = runner.scripts()
    chain = [rev.revision for rev in reversed(list(scripts.walk_revisions()))]
    assert chain == revisions.known() == [f"{n:04d}" for n in range(1, len(chain) + 1)]
    assert scripts.get_heads() == [revisions.head()]
    for rev in scripts.walk_revisions():
        assert Path(rev.path).name.startswith(f"{rev.revision}_")
        assert rev.down_revision == (
            None if rev.revision == "0001" else chain[chain.index(rev.revision) - 1]
        )


def test_the_revisions_one_by_one_make_what_metadata_declares(tmp_path):
    path = tmp_path / "replayed.db"
    upgrade_to(path, "head")  # from nothing, revision by revision (the brain would create_all)
    engine = runner.engine(path)
    try:
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), schema.metadata) == []
    finally:
        engine.dispose()
    with sqlite3.connect(path) as conn:
        assert shape(conn) == fresh_shape(tmp_path)


def test_a_column_in_metadata_without_a_revision_is_found(tmp_path):
    """The check above can fail: a column declared without its revision is a difference."""
    path = tmp_path / "replayed.db"
    upgrade_to(path, "head")
    changed = sa.MetaData()
    for table in schema.metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["tasks"].append_column(sa.Column("note", sa.Text))
    engine = runner.engine(path)
    try:
        with engine.connect() as conn:
            found = compare_metadata(MigrationContext.configure(conn), changed)
    finally:
        engine.dispose()
    assert [diff[0] for diff in found] == ["add_column"]


def test_the_same_declaration_compiles_for_sqlite_and_postgresql():
    pg, lite = postgresql.dialect(), sqlite.dialect()
    ddl = {
        name: (
            str(CreateTable(table).compile(dialect=lite)),
            str(CreateTable(table).compile(dialect=pg)),
        )
        for name, table in schema.metadata.tables.items()
    }
    assert set(ddl) == {"plans", "tasks", "deps", "workers", "tokens", "events", "goals",
                        "input_hashes", "backups", "escalations", "alerts",
                        "estimates"}  # fmt: skip
    lite_tasks, pg_tasks = ddl["tasks"]
    assert "id INTEGER PRIMARY KEY AUTOINCREMENT" in lite_tasks
    assert "id BIGSERIAL" in pg_tasks and "PRIMARY KEY (id)" in pg_tasks
    # seconds since the epoch: 8 bytes on both (PostgreSQL's REAL is 4)
    assert "created_at REAL NOT NULL" in lite_tasks
    assert "created_at DOUBLE PRECISION NOT NULL" in pg_tasks
    assert "REAL" not in " ".join(pg for _, pg in ddl.values())
    assert "mtime_ns BIGINT NOT NULL" in ddl["input_hashes"][1]
    assert "escalate TEXT DEFAULT 'never' NOT NULL" in pg_tasks
    assert "FOREIGN KEY(plan_id) REFERENCES plans (id)" in pg_tasks
    partial = {str(CreateIndex(index).compile(dialect=pg)) for index in schema.tasks.indexes}
    assert any(text.endswith("WHERE fingerprint IS NOT NULL") for text in partial)
    assert any("tasks_review_due" in text and "WHERE escalate = 'on_failure'" in text
               for text in partial)  # fmt: skip


# ------------------------------------------------------------------ older stores
def test_a_store_made_by_release_5fda188_upgrades_and_keeps_its_rows(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="airig.brain.store.migrations")
    want = fresh_shape(tmp_path)
    old = tmp_path / "old" / "state" / "brain.db"
    load(STORES / "release_5fda188.sql", old)
    with sqlite3.connect(old) as conn:
        before = shape(conn)
    assert "alembic_version" not in before and "input_hashes" not in before
    assert "fingerprint" not in str(before["tasks"])
    for _ in range(2):  # the second start finds nothing to do
        # the SQLite file whatever AIRIG_TEST_STORE says: an old release's file upgraded
        # (test_store_migrations_pg.py: the same on PostgreSQL)
        brain = h.make_brain(tmp_path / "old", BRAIN_DATABASE_URL="")
        try:
            with brain.db.read() as conn:
                assert shape(conn) == want
                tasks = conn.execute(
                    "SELECT key, state, escalate, fingerprint FROM tasks ORDER BY key"
                )
                tasks = [tuple(row) for row in tasks]
                token = tuple(
                    conn.execute("SELECT id, trust FROM tokens WHERE name = 'rig-b'").fetchone()
                )
                worker = tuple(conn.execute("SELECT host, last_claim_at FROM workers").fetchone())
                alert = tuple(conn.execute("SELECT kind, message FROM alerts").fetchone())
        finally:
            brain.stop()
        assert tasks == [("a", "READY", "never", None), ("b", "PENDING", "never", None)]
        assert token == ("abcdefabcdef", "untrusted")
        assert worker == ("rig-b", None)
        assert alert == ("queue_depth", "deep")
        assert revision_of(old) == revisions.head()
    said = [r for r in caplog.records if r.getMessage() == "brain store upgraded"]
    assert [(r.__dict__["from"], r.__dict__["to"]) for r in said] == [
        ("before revisions", revisions.head())
    ]  # one line, at the first start only


@pytest.mark.parametrize("fixture", FIXTURES)
def test_an_old_store_is_stamped_with_the_newest_revision(tmp_path, fixture):
    old = tmp_path / "brain.db"
    load(STORES / fixture, old)
    assert revision_of(old) is None
    Database(old).close()
    assert revision_of(old) == revisions.head()


def test_a_store_with_only_some_tables_gains_the_rest(tmp_path):
    """Before revisions a brain made what it missed at each start: a store with one old
    table (and an empty version table, as a crash could leave) ends as a new one."""
    path = tmp_path / "brain.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE tokens (token_hash TEXT PRIMARY KEY, scope TEXT NOT NULL, "
                     "name TEXT NOT NULL, created_at REAL NOT NULL)")  # fmt: skip
        conn.execute("INSERT INTO tokens VALUES ('h', 'join', 'old', 1.0)")
        conn.execute(
            "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL,"
            " CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
        )
    db = Database(path)
    try:
        with db.read() as conn:
            assert shape(conn) == fresh_shape(tmp_path)
            assert conn.execute("SELECT trust FROM tokens").fetchone()[0] == "untrusted"
    finally:
        db.close()


# ------------------------------------------------------------------ a newer store
def newer_store(tmp_path: Path, revision: str = "9999") -> Path:
    path = tmp_path / "state" / "brain.db"
    Database(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))
        conn.execute("PRAGMA journal_mode=DELETE")  # one file: nothing beside it to compare
    return path


@pytest.mark.parametrize("revision", ["9999", "0004a", "x" * 100_000, "'; DROP TABLE tasks; --"])
def test_a_store_a_newer_brain_made_is_refused_and_left_as_it_was(tmp_path, revision):
    path = newer_store(tmp_path, revision)
    before, listing = digest(path), sorted(os.listdir(path.parent))
    with pytest.raises(revisions.StoreVersionError) as refused:
        Database(path)
    message = str(refused.value)
    assert "\n" not in message and len(message) < 400
    assert "newer airig" in message and repr(revision[:40]) in message
    assert f"up to {revisions.head()}" in message and "restore a backup" in message
    assert digest(path) == before and sorted(os.listdir(path.parent)) == listing


def brain_cli(db: Path, results: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m airig.brain`` on the store ``db`` (it serves no one: each use fails first)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "AIRIG_"))}
    results = results or db.parent / "results"
    env.update({"BRAIN_DB": str(db), "BRAIN_RESULTS_DIR": str(results),
                "BRAIN_ADMIN_TOKEN": "admin-secret-token", "BRAIN_LISTEN_PORT": "1",
                "WORKER_BOOTSTRAP_TOKEN": "bootstrap-secret-token"})  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "airig.brain"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode not in (0, None), done.stdout
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    assert "Traceback" not in lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_the_brain_refuses_a_newer_store_in_one_line_and_exits(tmp_path):
    path = newer_store(tmp_path)
    before = digest(path)
    one_line(brain_cli(path), "newer airig", "revision '9999'", "update airig", "restore a backup")
    assert digest(path) == before


@pytest.mark.parametrize(
    "content", [b"not a database at all" * 100, b"SQLite format 3\0" + b"\xff" * 4000]
)
def test_a_damaged_store_file_is_one_line_and_left_as_it_was(tmp_path, content):
    path = tmp_path / "state" / "brain.db"
    path.parent.mkdir()
    path.write_bytes(content)
    line = one_line(brain_cli(path), str(path))
    assert "restore a backup" in line
    assert path.read_bytes() == content


def test_a_path_that_is_not_a_url_opens(tmp_path):
    """The store's path reaches SQLite as a path, never parsed as a URL."""
    path = tmp_path / "a b?c=d#e%20f" / "brain.db"
    load(STORES / "first_release.sql", path)
    Database(path).close()
    assert revision_of(path) == revisions.head()
    assert [p.name for p in tmp_path.iterdir()] == ["a b?c=d#e%20f"]  # no store beside it


# ------------------------------------------------------------------ a crash mid-way
class Crash(Exception):
    pass


def statements(monkeypatch: pytest.MonkeyPatch, fail_at: int | None) -> list[str]:
    """Every statement Alembic runs (a revision's operations, the version's updates),
    failing the ``fail_at``-th with what a full disk says."""
    seen: list[str] = []
    real = DefaultImpl._exec

    def counted(self, construct, *args, **kwargs):
        seen.append(str(construct))
        if len(seen) == fail_at:
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, construct, *args, **kwargs)

    monkeypatch.setattr(DefaultImpl, "_exec", counted)
    return seen


def test_a_failure_at_any_statement_leaves_the_last_finished_revision(tmp_path, monkeypatch):
    fixture = STORES / "first_release.sql"  # the most to do: every revision changes it
    want = fresh_shape(tmp_path)
    count = tmp_path / "count" / "brain.db"
    load(fixture, count)
    with monkeypatch.context() as patch:
        seen = statements(patch, None)
        Database(count).close()
    total = len(seen)
    assert total > 20  # the check below covers every statement of every revision
    references: dict[str | None, object] = {}
    for fail_at in range(1, total + 1):
        path = tmp_path / f"at{fail_at}" / "brain.db"
        load(fixture, path)
        with monkeypatch.context() as patch:
            statements(patch, fail_at)
            with pytest.raises(revisions.StoreVersionError, match="disk is full"):
                Database(path)
        stopped = revision_of(path)
        if stopped not in references:  # what Alembic alone makes of the fixture up to there
            reference = tmp_path / f"ref{stopped}.db"
            load(fixture, reference)
            if stopped is not None:
                upgrade_to(reference, stopped)
            with sqlite3.connect(reference) as conn:
                references[stopped] = shape(conn)
        with sqlite3.connect(path) as conn:
            assert shape(conn) == references[stopped], (fail_at, stopped)
        db = Database(path)  # the next start finishes the job
        try:
            with db.read() as conn:
                assert shape(conn) == want, fail_at
                assert (
                    conn.execute("SELECT count(*) FROM tokens WHERE id IS NULL").fetchone()[0] == 0
                )
        finally:
            db.close()
    assert set(references) == {None, *revisions.known()[:-1]}  # it stopped after each one


KILL = """
import os, signal, sys
from pathlib import Path
from alembic.ddl.impl import DefaultImpl
from airig.brain.store.db import Database
real, seen = DefaultImpl._exec, []
def counted(self, construct, *args, **kwargs):
    seen.append(1)
    if len(seen) == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, construct, *args, **kwargs)
DefaultImpl._exec = counted
Database(Path(sys.argv[1]))
"""


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_brain_killed_mid_migration_finishes_it_at_its_next_start(tmp_path, monkeypatch, where):
    """SIGKILL at the first, a middle or the last statement Alembic runs on the 5fda188 store
    (the last: the version's update of the last revision, before its commit)."""
    fixture = STORES / "release_5fda188.sql"
    count = tmp_path / "count" / "brain.db"
    load(fixture, count)
    with monkeypatch.context() as patch:
        seen = statements(patch, None)
        Database(count).close()
    kill_at = {"first": 1, "middle": len(seen) // 2, "last": len(seen)}[where]
    path = tmp_path / "state" / "brain.db"
    load(fixture, path)
    done = subprocess.run([sys.executable, "-c", KILL, str(path), str(kill_at)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert revision_of(path) in (None, *revisions.known()[:-1])
    if where == "last":
        assert revision_of(path) == revisions.known()[-2]
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL="")  # that file, on any AIRIG_TEST_STORE
    try:
        with brain.db.read() as conn:
            assert shape(conn) == fresh_shape(tmp_path)
            assert conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 2
    finally:
        brain.stop()
    assert revision_of(path) == revisions.head()


# ------------------------------------------------------------------ a read-only volume
@pytest.fixture
def read_only_copy(tmp_path: Path) -> Iterator[object]:
    """``read_only_copy(store)``: the store in a tmpfs folder remounted read-only (root only)."""
    mounted: list[Path] = []

    def make(store: Path) -> Path:
        folder = tmp_path / "ro"
        folder.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)],
                          capture_output=True, check=False).returncode != 0:  # fmt: skip
            pytest.skip("a tmpfs mount needs root (CAP_SYS_ADMIN)")
        mounted.append(folder)
        shutil.copy(store, folder / "brain.db")
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        return folder / "brain.db"

    yield make
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_an_old_store_on_a_read_only_volume_is_one_line(tmp_path, read_only_copy):
    old = tmp_path / "old.db"
    load(STORES / "release_5fda188.sql", old)
    path = read_only_copy(old)
    words = (f"cannot bring the brain's store {path} to revision", "readonly", "writable")
    line = one_line(brain_cli(path, tmp_path / "results"), *words)
    assert "next start goes on" in line
    assert digest(path) == digest(old)


def test_a_current_store_on_a_read_only_volume_is_one_line(tmp_path, read_only_copy):
    current = tmp_path / "current" / "brain.db"
    Database(current).close()
    with sqlite3.connect(current) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    path = read_only_copy(current)
    one_line(
        brain_cli(path, tmp_path / "results"), "cannot open the brain's state", "writable volume"
    )


# ------------------------------------------------------------------ what gets imported
PROBE = """
import runpy, sys
sys.argv = ["brain"] + sys.argv[1:]
try:
    runpy.run_module("airig.brain", run_name="__main__")
except SystemExit:
    pass
print(" ".join(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_the_healthcheck_imports_neither_sqlalchemy_nor_alembic(tmp_path):
    done = subprocess.run([sys.executable, "-c", PROBE, "--check"], cwd=tmp_path, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                               "BRAIN_LISTEN_PORT": "1"},
                          capture_output=True, text=True, check=False)  # fmt: skip
    imported = set(done.stdout.split())
    assert "airig" in imported, done.stderr[-2000:]
    assert imported & {"sqlalchemy", "alembic", "mako"} == set()


def test_a_start_on_a_current_store_does_not_import_alembic(tmp_path):
    path = tmp_path / "brain.db"
    Database(path).close()
    code = ("import sys; from pathlib import Path; from airig.brain.store.db import Database; "
            f"Database(Path({str(path)!r})).close(); print('alembic' in sys.modules)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    assert done.stdout.split() == ["False"]
    new = tmp_path / "new.db"  # and the check can fail: a new store needs it
    code = code.replace(repr(str(path)), repr(str(new)))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    assert done.stdout.split() == ["True"]


# ------------------------------------------------------------------ a new revision
def test_the_new_revision_command_writes_the_next_numbered_file(tmp_path, monkeypatch):
    copy = tmp_path / "migrations"
    shutil.copytree(revisions.MIGRATIONS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(revisions, "MIGRATIONS", copy)
    monkeypatch.setattr(runner, "MIGRATIONS", copy)
    from airig.brain.store.migrations.__main__ import main

    last = revisions.head()
    nxt = f"{int(last) + 1:04d}"
    assert main(["new", "tasks gain a note"]) == 0
    assert revisions.head() == nxt
    text = (copy / "versions" / f"{nxt}_tasks_gain_a_note.py").read_text()
    assert f"revision = '{nxt}'" in text
    assert f"down_revision = '{last}'" in text
    assert re.search(r"def upgrade\(\) -> None:\n(.*\n)*\s+raise NotImplementedError", text)
