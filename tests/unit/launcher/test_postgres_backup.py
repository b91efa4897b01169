"""`backup`, `restore` and `doctor` with the brain's store on PostgreSQL (issue 38).

The postgres container is a stand-in whose ``exec_run`` runs the real clients (pg_dump,
pg_restore, psql, pg_isready, as the launcher spells them) against the throwaway cluster
(tests/pg_cluster.py), ``-d brain`` being this test's database and the service's volume a
folder here; the rest of the engine is test_backup_data's and test_restore_data's fakes.
So the flags `backup` and `restore` pass are checked by PostgreSQL itself: a dump that
round-trips, a ``pg_restore --clean`` into the fresh database a restore gets, and the
archive recorded in its ``backups`` table whatever its name.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from test_backup_data import Engine, members, settings_for, tar_chunks
from test_restore_data import Writer
from test_restore_prepare import FakeDocker

from airig.launcher.compose import postgres
from airig.launcher.compose.container import SERVICE_LABEL
from airig.launcher.lifecycle import pg_store
from airig.launcher.lifecycle.backup import take
from airig.launcher.lifecycle.backup_archive import (
    PG_DUMP_MEMBER,
    ArchiveWriter,
    BackupError,
    Manifest,
    archive_name,
    check_name,
    describe,
)
from airig.launcher.lifecycle.restore import (
    PENDING,
    RESTORED_MARKER,
    apply_pending,
    prepare,
)
from airig.launcher.views.doctor import postgres_check

PG_ENV = b"AIRIG_PROJECT_PREFIX=airig\nBRAIN_ADMIN_TOKEN=secret-0123456789\n" \
         b"AIRIG_BRAIN_STORE=postgres\nPOSTGRES_PASSWORD=pw-0123456789\n"  # fmt: skip
SCHEMA = """
CREATE TABLE plans (id BIGINT PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE tasks (id BIGINT PRIMARY KEY, plan_id BIGINT REFERENCES plans, payload TEXT);
CREATE TABLE backups (id BIGSERIAL PRIMARY KEY, created_at DOUBLE PRECISION NOT NULL,
    archive TEXT NOT NULL, bytes BIGINT NOT NULL, sha256 TEXT NOT NULL,
    models INTEGER NOT NULL DEFAULT 0);
INSERT INTO plans VALUES (1, 'video-notes'), (2, 'photos');
INSERT INTO tasks VALUES (1, 1, 'a'), (2, 1, 'b'), (3, 2, 'it''s "quoted" $x');
"""


class Postgres:
    """The postgres container of 01-infra, as the launcher reaches it (docker SDK calls)."""

    name = "airig-infra-postgres-1"
    labels = {SERVICE_LABEL: "postgres"}

    def __init__(self, cluster, database: str, volume: Path, health: str = "healthy") -> None:
        self.cluster, self.database, self.volume = cluster, database, volume
        volume.mkdir(parents=True, exist_ok=True)
        self.attrs = {"Name": f"/{self.name}", "Config": {"Labels": self.labels},
                      "State": {"Status": "running", "Health": {"Status": health}}}  # fmt: skip
        self.ran: list[list[str]] = []
        self.put: list[tarfile.TarInfo] = []

    def host(self, path: str) -> Path:
        assert path.startswith(postgres.DUMP_DIR + "/"), path
        return self.volume / path[len(postgres.DUMP_DIR) + 1 :]

    def exec_run(self, command: list[str]) -> tuple[int, bytes]:
        self.ran.append(list(command))
        if command[:2] == ["rm", "-f"]:
            for path in command[2:]:
                self.host(path).unlink(missing_ok=True)
            return 0, b""
        assert command[0] in ("pg_dump", "pg_restore", "psql", "pg_isready"), command
        args = [self.host(a) if a.startswith(postgres.DUMP_DIR + "/") else a for a in command]
        args = [self.database if a == postgres.DATABASE else a for a in map(str, args)]
        if "-h" in args:  # pg_isready over TCP in the container: the socket here
            args[args.index("-h") + 1] = str(self.cluster.folder)
        else:
            args += ["-h", str(self.cluster.folder), "-p", "5432"]
        from pg_cluster import PASSWORD

        done = subprocess.run(args, capture_output=True, timeout=120,
                              env={"PGPASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"})  # fmt: skip
        return done.returncode, done.stdout + done.stderr

    def get_archive(self, path: str):
        return tar_chunks(self.host(path)), {"size": self.host(path).stat().st_size}

    def put_archive(self, path: str, data) -> bool:
        assert path == postgres.DUMP_DIR
        raw = data if isinstance(data, bytes) else data.read()
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            for info in tar:
                self.put.append(info)
                extracted = tar.extractfile(info)
                assert extracted is not None
                (self.volume / info.name).write_bytes(extracted.read())
        return True


class PgEngine(Engine):
    """test_backup_data's engine, with 01-infra's postgres container beside the brain."""

    def __init__(self, root: Path, database: Postgres | None) -> None:
        super().__init__(root)
        self.database = database
        self.brain_ran: list[list[str]] = []
        run = self.brain.exec_run

        def recorded(command: list[str]) -> tuple[int, bytes]:
            self.brain_ran.append(command)
            return run(command)

        setattr(self.brain, "exec_run", recorded)  # noqa: B010 - mypy: no method assignment

    def containers(self, **filters: str) -> list:
        project = filters["label"].split("=", 1)[1]
        if project == "airig-infra":
            return [self.database] if self.database is not None else []
        return [self.brain]


class RestoreEngine(Writer):
    """test_restore_data's volume writer, with the postgres service running."""

    def __init__(self, database: Postgres | None) -> None:
        super().__init__()
        self.database = database

    def containers(self, **filters: str) -> list:
        return [self.database] if self.database is not None else []


def dbname(url: str) -> str:
    return url.split("@/", 1)[1].split("?", 1)[0]


def dsn(cluster, database: str) -> str:
    return cluster.dsn(database)


@pytest.fixture
def store(pg_cluster, pg_url):
    """The brain's database with a few rows, on the throwaway cluster."""
    with psycopg.connect(dsn(pg_cluster, dbname(pg_url)), autocommit=True) as conn:
        conn.execute(SCHEMA)
    return SimpleNamespace(cluster=pg_cluster, name=dbname(pg_url))


def pg_settings(root: Path, store: str = "postgres") -> SimpleNamespace:
    settings = settings_for(root)
    settings.env_file.write_bytes(PG_ENV if store == "postgres" else b"BRAIN_ADMIN_TOKEN=s-0123\n")
    settings.brain_store, settings.joined = store, False
    return settings


def backup(tmp_path: Path, engine: Any, settings: Any) -> tuple:
    said: list[str] = []
    result = take(settings, engine, tmp_path / "backups", False, None, lambda body: None,
                  said.append)  # fmt: skip
    return result, said


# ------------------------------------------------------------------ backup
def test_a_backup_holds_pg_dump_of_the_database_and_no_sqlite_snapshot(tmp_path, store):
    database = Postgres(store.cluster, store.name, tmp_path / "pg-volume")
    engine = PgEngine(tmp_path, database)
    result, said = backup(tmp_path, engine, pg_settings(tmp_path))
    files = members(result.path)
    assert files[PG_DUMP_MEMBER].startswith(pg_store.DUMP_HEADER)
    assert "volumes/brain-state/brain.db" not in files
    assert not [c for c in engine.brain_ran if "--snapshot" in c]  # it reads the SQLite file
    assert result.manifest.store["engine"] == "postgresql"
    assert (result.manifest.store["plans"], result.manifest.store["tasks"]) == (2, 3)
    assert (
        "store" in describe(result.manifest)[0]
        and "(2 plans, 3 tasks)" in describe(result.manifest)[0]
    )
    assert [c[:2] for c in database.ran if c[0] == "pg_dump"] == [["pg_dump", "-Fc"]]
    assert list(database.volume.iterdir()) == []  # the dump went with the archive
    assert any("pg_dump" in line for line in said), said
    assert "pw-0123456789" not in " ".join(said)


def test_an_sqlite_kit_takes_its_snapshot_and_never_runs_pg_dump(tmp_path, store):
    database = Postgres(store.cluster, store.name, tmp_path / "pg-volume")
    engine = PgEngine(tmp_path, database)  # a container left from an earlier postgres run
    result, _ = backup(tmp_path, engine, pg_settings(tmp_path, "sqlite"))
    files = members(result.path)
    assert files["volumes/brain-state/brain.db"].startswith(b"SQLite format 3")
    assert PG_DUMP_MEMBER not in files and database.ran == []


def test_a_stopped_database_is_one_line_before_anything_is_written(tmp_path):
    engine = PgEngine(tmp_path, None)
    with pytest.raises(BackupError, match="the postgres service is not running") as refused:
        backup(tmp_path, engine, pg_settings(tmp_path))
    assert "up" in refused.value.hint
    assert engine.brain_ran == [] and list((tmp_path / "backups").iterdir()) == []


def test_a_failed_pg_dump_leaves_no_archive(tmp_path, store):
    database = Postgres(store.cluster, "no_such_database", tmp_path / "pg-volume")
    with pytest.raises(BackupError, match="pg_dump failed in the postgres container: .*"
                                          "no_such_database"):  # fmt: skip
        backup(tmp_path, PgEngine(tmp_path, database), pg_settings(tmp_path))
    assert list((tmp_path / "backups").iterdir()) == []
    assert list(database.volume.iterdir()) == []


# ------------------------------------------------------------------ restore
def archive_with(folder: Path, env: bytes, store: dict[str, bytes], name: str = "") -> Path:
    path = folder / (name or archive_name(time.time()))
    writer = ArchiveWriter(path)
    writer.add_bytes("env/.env", env)
    for member, data in store.items():
        writer.add_bytes(member, data)
    writer.add_bytes("volumes/results/p/out.json", b"{}")
    writer.finish(Manifest(created_at=1_800_000_000.5, airig_version="0.1.0",
                           project_prefix="airig", files=[], models_included=True))  # fmt: skip
    return path


def test_a_backup_restores_into_the_fresh_database_of_the_next_up(tmp_path, store):
    database = Postgres(store.cluster, store.name, tmp_path / "pg-volume")
    result, _ = backup(tmp_path, PgEngine(tmp_path / "rig", database), pg_settings(tmp_path))
    # a name no SQL text may hold: it reaches the backups table only as psql's variable
    hostile = result.path.with_name("airig-backup-x'); DROP TABLE plans; --.tar.gz")
    result.path.rename(hostile)
    root = tmp_path / "clone"
    root.mkdir()
    engine = FakeDocker(volumes=["airig-brain-state", "airig-results", "airig-brain-postgres"])
    with pytest.raises(BackupError, match="airig-brain-postgres"):  # its data: --yes first
        prepare(root, hostile, False, engine, print)
    prepare(root, hostile, True, engine, print)
    assert "airig-brain-postgres" in engine.removed  # `up` starts a fresh cluster
    # `up`: 01-infra is up and healthy, a fresh database; the dump goes in before the brain
    fresh = dbname(store.cluster.database())
    target = Postgres(store.cluster, fresh, tmp_path / "fresh-volume")
    said: list[str] = []
    settings = SimpleNamespace(state_dir=root / ".airig", project_prefix="airig", image="i:t")
    writer = RestoreEngine(target)
    assert apply_pending(settings, writer, said.append)
    # the brain's cue that its store was restored: the backup's leases released at its start
    marker, owner = writer.files("brain-state")[RESTORED_MARKER]
    assert json.loads(marker)["archive"] == hostile.name and owner == 10001
    with psycopg.connect(dsn(store.cluster, fresh)) as conn:
        assert conn.execute("SELECT count(*) FROM plans").fetchone() == (2,)
        assert conn.execute("SELECT payload FROM tasks WHERE id = 3").fetchone() == (
            'it\'s "quoted" $x',
        )
        recorded = conn.execute("SELECT created_at, archive, bytes, models FROM backups").fetchall()
    assert recorded == [(result.manifest.created_at, hostile.name, hostile.stat().st_size, 0)]
    restore_calls = [c for c in target.ran if c[0] == "pg_restore"]
    assert len(restore_calls) == 1 and "--clean" in restore_calls[0]
    assert [c[0] for c in target.ran if c[0] != "rm"][:1] == ["pg_isready"]
    assert {(i.uid, i.mode) for i in target.put} == {(pg_store.POSTGRES_UID, 0o600)}
    assert list(target.volume.iterdir()) == []  # dump and record's SQL removed
    assert not (root / ".airig" / PENDING).exists()
    assert any("pg_restore" in line for line in said), said


def test_a_restore_waits_for_a_database_that_answers(tmp_path, store):
    dump = {PG_DUMP_MEMBER: b"PGDMP not really"}
    archive = archive_with(tmp_path, PG_ENV, dump)
    root = tmp_path / "clone"
    root.mkdir()
    prepare(root, archive, True, FakeDocker(), print)
    settings = SimpleNamespace(state_dir=root / ".airig", project_prefix="airig", image="i:t")
    with pytest.raises(BackupError, match="postgres service is not running") as failed:
        apply_pending(settings, RestoreEngine(None), print)
    assert "AIRIG_BRAIN_STORE=postgres" in failed.value.hint
    gone = SimpleNamespace(folder=tmp_path / "no-server-here")
    with pytest.raises(BackupError, match="not ready for the restore"):
        apply_pending(settings, RestoreEngine(Postgres(gone, "x", tmp_path / "v1")), print)
    # a server that refuses the dump: one line, the restore left for the next `up`
    bad = Postgres(store.cluster, store.name, tmp_path / "v2")
    with pytest.raises(BackupError, match="pg_restore failed in the postgres container"):
        apply_pending(settings, RestoreEngine(bad), print)
    assert (root / ".airig" / PENDING).exists() and list(bad.volume.iterdir()) == []


@pytest.mark.parametrize("env, files, why", [
    (b"AIRIG_BRAIN_STORE=sqlite\n", {PG_DUMP_MEMBER: b"PGDMP"},
     "holds a PostgreSQL dump but its .env says AIRIG_BRAIN_STORE=sqlite"),
    (b"BRAIN_ADMIN_TOKEN=x\n", {PG_DUMP_MEMBER: b"PGDMP"},
     "holds a PostgreSQL dump but its .env says AIRIG_BRAIN_STORE=sqlite"),
    (PG_ENV, {"volumes/brain-state/brain.db": b"SQLite format 3\x00"},
     "holds an SQLite store but its .env says AIRIG_BRAIN_STORE=postgres"),
    (PG_ENV, {PG_DUMP_MEMBER: b"SQLite format 3\x00"}, "is not a pg_dump archive"),
    (PG_ENV, {PG_DUMP_MEMBER: b""}, "is not a pg_dump archive"),
    (PG_ENV, {PG_DUMP_MEMBER: b"PGDMP", "volumes/brain-state/brain.db": b"SQLite format 3\x00"},
     "both an SQLite store and a PostgreSQL dump"),
    (PG_ENV, {}, "holds no volumes/brain-state/brain.db"),
])  # fmt: skip
def test_an_archive_whose_store_does_not_fit_changes_nothing(tmp_path, env, files, why):
    archive = archive_with(tmp_path, env, files)
    root = tmp_path / "clone"
    root.mkdir()
    (root / ".env").write_bytes(b"BRAIN_ADMIN_TOKEN=the-old-one\n")
    engine = FakeDocker(volumes=["airig-brain-postgres"])
    with pytest.raises(BackupError, match=why.replace("(", r"\(").replace(".", r"\.")):
        prepare(root, archive, True, engine, print)
    assert engine.removed == [] and sorted(p.name for p in root.iterdir()) == [".env"]


@pytest.mark.parametrize("name", [
    "volumes/brain-state/brain.dump.sql", "volumes/brain-state/pg/brain.dump",
    "volumes/brain-postgres/brain.dump", "volumes/brain-postgres/pgdata/PG_VERSION",
])  # fmt: skip
def test_only_the_dump_itself_may_stand_beside_the_store(tmp_path, name):
    with pytest.raises(BackupError, match="is not an airig backup"):
        check_name(name, tmp_path / "a.tar.gz")
    check_name(PG_DUMP_MEMBER, tmp_path / "a.tar.gz")


# ------------------------------------------------------------------ doctor
class Engine1:
    def __init__(self, found) -> None:
        self.found = found

    def containers(self, **filters: str) -> list:
        return [self.found] if self.found is not None else []


def test_doctor_says_whether_the_database_answers(tmp_path, store):
    settings = SimpleNamespace(project_prefix="airig")
    ok = postgres_check(settings, Engine1(Postgres(store.cluster, store.name, tmp_path / "v")))
    assert ok.ok and "accepting connections" in ok.detail, ok
    missing = postgres_check(settings, Engine1(None))
    assert not missing.ok and "not running" in missing.detail and "up" in missing.fix
    sick = Postgres(store.cluster, store.name, tmp_path / "v", health="unhealthy")
    found = postgres_check(settings, Engine1(sick))
    assert not found.ok and found.detail == "airig-infra-postgres-1 is unhealthy"
    assert sick.ran == []  # the healthcheck's verdict first
    silent = Postgres(SimpleNamespace(folder=tmp_path / "none"), "x", tmp_path / "w")
    down = postgres_check(settings, Engine1(silent))
    assert not down.ok and down.detail.startswith("pg_isready in airig-infra-postgres-1: ")
    for check in (ok, missing, found, down):
        assert "pw-0123456789" not in json.dumps(check.to_dict())
