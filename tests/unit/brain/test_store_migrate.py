"""``migrate-store``: a brain's SQLite store copied into PostgreSQL (issue 38).

On the throwaway cluster (``pg_url``: a fresh, empty database per test), a store a brain
made (a plan, a worker, a claimed and completed task: rows in tasks, deps, events,
workers, plans) must arrive whole: every row of every table, the values as they were
(JSON text byte for byte, REAL as the same float), the sequences past every id so the
next insert works. What must be refused, in one line, exit 2, with the target left with
no row: a target that holds rows (a second run), a file that is not a store, an
unreachable server (its password never said), a value PostgreSQL cannot hold. A crash or
a Ctrl-C in the middle of the copy leaves the target with no row.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pg_cluster import PASSWORD
from unit.brain_helpers import claim, do, make_brain, noop, submit

from airig.brain.store import schema, workers
from airig.brain.store.migrations import __main__ as cli
from airig.brain.store.migrations import migrate_store as move

TABLES = [t.name for t in schema.metadata.sorted_tables]


def brain_store(tmp: Path) -> Path:
    """A store a brain wrote: two plans, a worker, one task claimed and completed."""
    # BRAIN_DATABASE_URL="": a SQLite store even where the suite runs on PostgreSQL
    brain = make_brain(tmp, BRAIN_DATABASE_URL="")
    try:
        plan = submit(brain, [noop("a"), noop("b", ["a"]), noop("c", ["a", "b"])])
        submit(
            brain, [noop("x", payload={"echo": {"note": "é ünïcode \u2603", "n": 0.1}})], now=1001.5
        )
        brain.write(
            lambda conn, _outbox, now: workers.register(
                conn, "w1", "hash", json.dumps(["cpu"]), 0, "[]", "[]", now, "rig-a", None
            )
        )
        assert claim(brain, 1002.0) is not None
        do(brain, plan, "a", "start", 1003.0)
        do(brain, plan, "a", "complete", 1004.25, output={"text": "done", "n": [1, 2.5]})
    finally:
        brain.db.close()
    return brain.settings.db_path


def sqlite_rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        names = ", ".join(c.name for c in schema.metadata.tables[table].columns)
        return sorted(conn.execute(f"SELECT {names} FROM {table}"), key=repr)
    finally:
        conn.close()


def pg_rows(url: str, table: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(*schema.metadata.tables[table].columns))
            return sorted((tuple(row) for row in rows), key=repr)
    finally:
        engine.dispose()


def pg_counts(url: str) -> dict[str, int]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            present = set(inspector.get_table_names())
            return {
                t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
                for t in TABLES
                if t in present
            }
    finally:
        engine.dispose()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()  # the brain's own log lines, from making the store
    code = cli.main(["migrate-store", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_brains_store_arrives_whole(tmp_path: Path, pg_url: str, capsys) -> None:
    store = brain_store(tmp_path)
    before = digest(store)
    code, out, err = run_cli(capsys, "--from", str(store), "--to", pg_url)
    assert (code, err) == (0, ""), err
    for table in ("plans", "tasks", "deps", "events", "workers"):
        assert sqlite_rows(store, table), f"the brain wrote no {table} row: the test proves less"
    for table in TABLES:
        # every value as SQLite holds it: JSON text byte for byte, REAL as the same float
        assert pg_rows(pg_url, table) == sqlite_rows(store, table), table
        assert f"{table} " in out
    assert PASSWORD not in out
    assert "***" in out
    assert digest(store) == before  # read only: the store was at head already
    counts = pg_counts(pg_url)
    assert (counts["tasks"], counts["deps"], counts["workers"]) == (4, 3, 1)


def test_the_next_insert_follows_every_id_sqlite_gave(tmp_path: Path, pg_url: str) -> None:
    store = brain_store(tmp_path)
    conn = sqlite3.connect(store)
    with conn:  # the newest event deleted: SQLite's AUTOINCREMENT never gives its id again
        (newest,) = conn.execute("SELECT max(id) FROM events").fetchone()
        conn.execute("DELETE FROM events WHERE id = ?", (newest,))
    conn.close()
    moved = {m.table: m for m in move.migrate_store(store, pg_url, say=lambda _line: None)}
    assert moved["events"].sequence_at == newest
    assert moved["backups"].sequence_at == 0  # an empty table: the next id is 1
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as pg:
            event = pg.execute(
                schema.events.insert()
                .values(ts=2000.0, event_type="after", body_json="{}")
                .returning(schema.events.c.id)
            ).scalar_one()
            task = pg.execute(
                schema.tasks.insert()
                .values(
                    plan_id=pg.execute(sa.select(schema.plans.c.id).limit(1)).scalar_one(),
                    key="new",
                    name="new",
                    type="noop",
                    task_class="cpu",
                    payload_json="{}",
                    priority=0,
                    trusted=1,
                    sensitive=0,
                    timeout_s=60.0,
                    retry_count=0,
                    state="READY",
                    created_at=2000.0,
                )
                .returning(schema.tasks.c.id)
            ).scalar_one()
            backup = pg.execute(
                schema.backups.insert()
                .values(created_at=1.0, archive="a", bytes=1, sha256="s")
                .returning(schema.backups.c.id)
            ).scalar_one()
    finally:
        engine.dispose()
    assert event == newest + 1
    assert task == max(row[0] for row in sqlite_rows(store, "tasks")) + 1
    assert backup == 1


def test_a_second_run_is_refused_and_changes_nothing(tmp_path: Path, pg_url: str, capsys) -> None:
    store = brain_store(tmp_path)
    assert run_cli(capsys, "--from", str(store), "--to", pg_url)[0] == 0
    counts = pg_counts(pg_url)
    code, out, err = run_cli(capsys, "--from", str(store), "--to", pg_url)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "already holds rows in" in err and "tasks" in err
    assert PASSWORD not in err
    assert pg_counts(pg_url) == counts


def test_a_target_with_any_row_is_refused(tmp_path: Path, pg_url: str, capsys) -> None:
    """One row in the last table of the order (alerts sorts first, deps last) is enough."""
    store = brain_store(tmp_path)
    from airig.brain.store import migrations

    migrations.upgrade(url=pg_url)
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as pg:
            pg.execute(schema.alerts.insert().values(kind="k", subject="s", fired_at=1.0,
                                                     message="m"))  # fmt: skip
    finally:
        engine.dispose()
    code, _out, err = run_cli(capsys, "--from", str(store), "--to", pg_url)
    assert code == 2 and "already holds rows in alerts" in err
    assert {t: n for t, n in pg_counts(pg_url).items() if n} == {"alerts": 1}


@pytest.mark.parametrize(
    "content",
    [
        b"",  # an empty file
        b"hello, not a database\n",
        b"SQLite format 3\x00" + b"\xff" * 200,  # the header, then garbage
        "other",  # a real SQLite database of someone else's tables
        "missing",
        "folder",
    ],
)
def test_a_file_that_is_not_a_store_is_refused(
    tmp_path: Path, pg_url: str, capsys, content: bytes | str
) -> None:
    path = tmp_path / "brain.db"
    if content == "other":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
        conn.commit()
        conn.close()
    elif content == "folder":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    before = digest(path) if path.is_file() else None
    code, out, err = run_cli(capsys, "--from", str(path), "--to", pg_url)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert str(path) in err
    if before is not None:
        assert digest(path) == before  # no store's tables added to another program's file
    assert pg_counts(pg_url) == {}  # the target not even given the schema


@pytest.mark.parametrize(
    "url",
    [
        # a socket folder nobody listens in: the server cannot be reached
        "postgresql://airig:{pw}@/airig?host={tmp}/nowhere&port=5432",
        # a password the server refuses
        "",
    ],
)
def test_an_unreachable_or_refusing_server_is_one_line_without_the_password(
    tmp_path: Path, pg_url: str, capsys, url: str
) -> None:
    store = brain_store(tmp_path)
    before = digest(store)
    secret = "s3cret/pw@x"
    if url:
        target = url.format(pw="s3cret%2Fpw%40x", tmp=tmp_path)
    else:
        target = pg_url.replace(PASSWORD, "s3cret%2Fpw%40x")
    code, out, err = run_cli(capsys, "--from", str(store), "--to", target)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert secret not in err and "s3cret%2Fpw%40x" not in err and "s3cret" not in err
    assert "***" in err
    assert digest(store) == before  # the target is reached first: the file untouched
    assert pg_counts(pg_url) == {}


@pytest.mark.parametrize("url", ["postgresql://a:b@/x\x00", "postgresql://a:b@/" + "x" * 100_000,
                                 "mysql://a:hunter2@db/x", "not a url"])  # fmt: skip
def test_a_hostile_url_is_one_line(tmp_path: Path, capsys, url: str) -> None:
    store = brain_store(tmp_path)
    before = digest(store)
    code, _out, err = run_cli(capsys, "--from", str(store), "--to", url)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and len(err) < 1000
    assert "hunter2" not in err
    assert digest(store) == before


def test_no_url_at_all_is_a_usage_line(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("BRAIN_DATABASE_URL", raising=False)
    code, _out, err = run_cli(capsys, "--from", str(tmp_path / "brain.db"))
    assert code == 2 and "--to URL or BRAIN_DATABASE_URL" in err


def test_the_url_may_come_from_the_environment(
    tmp_path: Path, pg_url: str, capsys, monkeypatch
) -> None:
    store = brain_store(tmp_path)
    monkeypatch.setenv("BRAIN_DATABASE_URL", pg_url)
    assert run_cli(capsys, "--from", str(store))[0] == 0
    assert pg_counts(pg_url)["tasks"] == 4


def _fail_on_second_batch(monkeypatch, error: BaseException) -> list[int]:
    calls: list[int] = []
    real = move.insert_batch

    def insert(pg, table, values):
        calls.append(len(values))
        if len(calls) == 2:
            raise error
        real(pg, table, values)

    monkeypatch.setattr(move, "insert_batch", insert)
    return calls


def test_a_crash_mid_copy_leaves_the_target_empty(tmp_path: Path, pg_url: str, monkeypatch) -> None:
    store = brain_store(tmp_path)
    calls = _fail_on_second_batch(monkeypatch, RuntimeError("the process dies here"))
    with pytest.raises(RuntimeError, match="dies here"):
        move.migrate_store(store, pg_url, say=lambda _line: None, batch_rows=2)
    assert len(calls) == 2  # the first batch went in, in the transaction that rolled back
    counts = pg_counts(pg_url)
    assert set(counts) == set(TABLES)  # the schema is there (made before the copy) ...
    assert sum(counts.values()) == 0  # ... and not one row
    monkeypatch.undo()
    # the next run starts from nothing and finishes
    move.migrate_store(store, pg_url, say=lambda _line: None)
    assert pg_counts(pg_url)["events"] == len(sqlite_rows(store, "events"))


def test_ctrl_c_mid_copy_is_one_line_and_the_target_empty(
    tmp_path: Path, pg_url: str, monkeypatch, capsys
) -> None:
    store = brain_store(tmp_path)
    _fail_on_second_batch(monkeypatch, KeyboardInterrupt())
    monkeypatch.setattr(
        move, "migrate_store",
        lambda s, u, real=move.migrate_store: real(s, u, batch_rows=2),
    )  # fmt: skip
    code, _out, err = run_cli(capsys, "--from", str(store), "--to", pg_url)
    assert code == 130 and "nothing was written" in err
    assert sum(pg_counts(pg_url).values()) == 0


def test_a_value_postgresql_cannot_hold_is_refused_before_anything_commits(
    tmp_path: Path, pg_url: str, capsys
) -> None:
    """A worker's error text with a NUL (JSON's \\u0000 decoded) is fine on SQLite, not in
    PostgreSQL's text: one line naming the column, no row copied."""
    store = brain_store(tmp_path)
    conn = sqlite3.connect(store)
    with conn:
        conn.execute("UPDATE tasks SET error = ? WHERE key = 'c'", ("bad\x00byte",))
    conn.close()
    code, _out, err = run_cli(capsys, "--from", str(store), "--to", pg_url)
    assert code == 2 and "tasks.error holds a NUL character" in err
    assert len(err.strip().splitlines()) == 1
    assert sum(pg_counts(pg_url).values()) == 0


def test_a_checksum_difference_rolls_the_copy_back(
    tmp_path: Path, pg_url: str, monkeypatch, capsys
) -> None:
    """The verification is real: a batch whose state was changed on the way in is
    caught before the commit."""
    store = brain_store(tmp_path)
    real = move.insert_batch

    def tamper(pg, table, values):
        if table.name == "tasks":
            values = [dict(v, state="DONE") for v in values]
        real(pg, table, values)

    monkeypatch.setattr(move, "insert_batch", tamper)
    code, _out, err = run_cli(capsys, "--from", str(store), "--to", pg_url)
    assert code == 2 and "tasks: 4 rows read, 4 in" in err and "checksum" in err
    assert sum(pg_counts(pg_url).values()) == 0


def test_loose_sqlite_values_take_the_declared_type(tmp_path: Path, pg_url: str) -> None:
    """SQLite's loose typing: an integer stored in a REAL column, a number in a TEXT
    column, a whole float in an INTEGER column arrive as the schema's types."""
    store = brain_store(tmp_path)
    conn = sqlite3.connect(store)
    with conn:
        conn.execute("UPDATE tasks SET model = 7, fanout_index = 3.0 WHERE key = 'x'")
    conn.close()
    move.migrate_store(store, pg_url, say=lambda _line: None)
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as pg:
            model, index, created = pg.execute(
                sa.select(schema.tasks.c.model, schema.tasks.c.fanout_index,
                          schema.tasks.c.created_at).where(schema.tasks.c.key == "x")
            ).one()  # fmt: skip
    finally:
        engine.dispose()
    assert (model, index, created) == ("7", 3, 1001.5)
    assert isinstance(created, float)


def test_a_row_whose_parent_is_gone_is_refused_first(tmp_path: Path, pg_url: str, capsys) -> None:
    """PostgreSQL checks every foreign key: a dangling row is said before the copy, in one
    line naming it, not as a failure halfway through."""
    store = brain_store(tmp_path)
    conn = sqlite3.connect(store)  # foreign keys are off on a plain connection
    with conn:
        conn.execute("INSERT INTO deps (task_id, depends_on) VALUES (1, 999)")
    conn.close()
    code, out, err = run_cli(capsys, "--from", str(store), "--to", pg_url)
    assert code == 2 and "foreign key points at no row" in err and "deps" in err
    assert len(err.strip().splitlines()) == 1
    assert "copying" not in out
    assert sum(pg_counts(pg_url).values()) == 0


def test_a_store_a_newer_airig_made_is_refused_untouched(
    tmp_path: Path, pg_url: str, capsys
) -> None:
    store = brain_store(tmp_path)
    conn = sqlite3.connect(store)
    with conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    conn.close()
    before = digest(store)
    code, _out, err = run_cli(capsys, "--from", str(store), "--to", pg_url)
    assert code == 2 and "made by a newer airig" in err
    assert digest(store) == before
    assert pg_counts(pg_url) == {}
