"""Run the store's migrations: make a new store, upgrade an older one (``migrations.upgrade``
calls this only when the store is not at this code's revision).

A new store (no table at all) is made from ``schema.metadata`` in one transaction and
stamped at the newest revision, as Alembic's cookbook does ("building an up to date
database from scratch"): the tables made the way they are declared, not replayed. Any
other store runs the revisions it lacks, each in one transaction. A store made before
revisions existed (tables, no ``alembic_version``) runs them all: the first four are the
history before versioning and each makes only what the store lacks (``legacy.py``), so a
store from any older brain ends at the same schema.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.pool import NullPool

from airig.brain.store import schema
from airig.brain.store.migrations.revisions import MIGRATIONS, StoreVersionError, store_revision

log = logging.getLogger("airig.brain.store.migrations")
HINT = (
    "the store stays at the last revision that finished and the next start goes on from there; "
    "make BRAIN_DB's volume writable (and not full) by the brain's user, or restore a backup"
)


def config(connection: sa.Connection | None = None) -> Config:
    """Alembic's configuration, in code: no alembic.ini on anyone's side."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def scripts() -> ScriptDirectory:
    """The revisions (read once a process: a test run makes thousands of stores)."""
    return ScriptDirectory.from_config(config())


def engine(path: Path) -> sa.Engine:
    """SQLAlchemy on the store's file, with transactions that hold DDL.

    Python's sqlite3 opens a transaction before INSERT/UPDATE/DELETE only: a revision's
    new column or table would commit on its own, and a revision killed halfway would stay
    half done. So the driver leaves BEGIN to SQLAlchemy, which says it (SQLAlchemy's
    documented recipe, "Serializable isolation / Savepoints / Transactional DDL");
    IMMEDIATE takes the write lock first, as ``Database.tx`` does.
    """
    # URL.create: a path is not parsed as a URL (a folder named "a?b" stays one)
    made = sa.create_engine(sa.URL.create("sqlite", database=str(path)), poolclass=NullPool)

    @sa.event.listens_for(made, "connect")
    def _connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @sa.event.listens_for(made, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return made


def upgrade(path: Path) -> None:
    """Bring the store at ``path`` to the newest revision; ``StoreVersionError`` (one line,
    the store left at the last revision that committed) when it cannot be written."""
    head = scripts().get_current_head()
    before = store_revision(path) if path.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    made = engine(path)
    try:
        with made.connect() as conn:
            tables = sa.inspect(conn).get_table_names()
            conn.rollback()  # the inspection's read; what follows begins its own transactions
            if not tables:
                with conn.begin():  # a new store: all of it or none of it
                    schema.metadata.create_all(conn)
                    MigrationContext.configure(conn).stamp(scripts(), "head")
            else:
                command.upgrade(config(conn), "head")
                log.info(
                    "brain store upgraded",
                    extra={"store": str(path), "from": before or "before revisions", "to": head},
                )
    # What the store or its volume refused (a read-only or full disk, a damaged file); an
    # error of the code itself (a revision's bug) keeps its traceback.
    except (sa.exc.DBAPIError, sqlite3.Error, OSError) as exc:
        cause = getattr(exc, "orig", None) or exc
        raise StoreVersionError(
            f"cannot bring the brain's store {path} to revision {head}: {cause}", HINT
        ) from exc
    finally:
        made.dispose()
