"""The store's schema on PostgreSQL (``BRAIN_DATABASE_URL``, issue 38): made and upgraded.

A new database (no table) gets ``schema.metadata``'s tables in one transaction, stamped at
the newest revision, as a new SQLite store does: revisions 0001-0004 are SQLite's history
before versioning and never run here (``revisions.LAST_SQLITE_ONLY``). A store stamped
before this code's newest revision runs the ones after, each in one transaction (DDL is
transactional on PostgreSQL: a process killed between two revisions, or in one, leaves the
last one that committed). A newer store is refused with SQLite's line; so is a database
that holds tables but no brain store, and one stamped inside SQLite's history. Two
processes upgrading one database at once take turns (an advisory lock): the second finds
the work done.

The URL is input and holds a password: it is checked before any driver sees it (length,
control characters, scheme), and every line names it with the password masked (``***``),
the driver's own words scrubbed of it too. Only ``postgresql`` URLs are taken; they run
on psycopg 3 (``postgresql+psycopg``). The brain runs this at start (``pg.PgDatabase``);
``python -m airig.brain.store.migrations upgrade`` runs it alone.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import quote

import sqlalchemy as sa
from alembic import command
from alembic.migration import MigrationContext
from sqlalchemy.pool import NullPool

from airig.brain.store import schema
from airig.brain.store.migrations.revisions import (
    LAST_SQLITE_ONLY,
    StoreVersionError,
    head,
    known,
    newer,
)
from airig.brain.store.migrations.runner import config, scripts
from airig.common.errors import ConfigError

log = logging.getLogger("airig.brain.store.migrations")
DRIVER = "postgresql+psycopg"
SCHEMES = {"postgresql", "postgres", DRIVER}
MAX_URL = 4096  # a real URL is far shorter; a longer one is refused before it is parsed
CONNECT_TIMEOUT_S = 10  # a host that drops packets is one line after this, not a hang
URL_HINT = (
    "BRAIN_DATABASE_URL must be postgresql://USER:PASSWORD@HOST:PORT/DATABASE "
    "(or ...@/DATABASE?host=/socket/folder), or unset for the SQLite store"
)
# pg_advisory_lock's key for "the store's schema is being changed": any fixed 64-bit number
# (the one airig's other locks, later, must not reuse)
UPGRADE_LOCK = 0x61697269675F3338  # "airig_38"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def parse(url: str) -> sa.URL:
    """The URL as SQLAlchemy's, on psycopg; ``ConfigError`` (one line, never the URL's
    text: it may be the password) for anything else."""
    if len(url) > MAX_URL:
        raise ConfigError(
            f"BRAIN_DATABASE_URL is {len(url)} characters long, over {MAX_URL}", URL_HINT
        )
    bad = _CONTROL.search(url)
    if bad:
        raise ConfigError(
            f"BRAIN_DATABASE_URL holds a control character ({bad.group()!r} at {bad.start()})",
            URL_HINT,
        )
    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        raise ConfigError("BRAIN_DATABASE_URL is not a database URL", URL_HINT) from None
    if parsed.drivername not in SCHEMES:
        raise ConfigError(
            f"BRAIN_DATABASE_URL's scheme {parsed.drivername[:40]!r} is not PostgreSQL's "
            f"({', '.join(sorted(SCHEMES))})",
            URL_HINT,
        )
    if parsed.port is not None and not 0 < parsed.port < 65536:
        # refused here: libpq would first resolve the host, for a port it then refuses
        raise ConfigError(f"BRAIN_DATABASE_URL's port {parsed.port} is not 1-65535", URL_HINT)
    return parsed.set(drivername=DRIVER)


def masked(parsed: sa.URL) -> str:
    """The URL to name in a line: its password ``***``."""
    return parsed.render_as_string(hide_password=True)


def _scrubbed(text: str, parsed: sa.URL) -> str:
    """The driver's words on one line, without the password in any spelling."""
    password = parsed.password
    if password:
        secret = str(password)
        for spelling in {secret, quote(secret, safe=""), quote(secret)}:
            text = text.replace(spelling, "***")
    return " ".join(text.split())[:400]


def _revision(conn: sa.Connection) -> tuple[str | None, list[str]]:
    """The store's revision (None: not stamped) and its tables, in one read."""
    tables = sa.inspect(conn).get_table_names()
    current = None
    if "alembic_version" in tables:
        row = conn.execute(sa.text("SELECT version_num FROM alembic_version")).first()
        current = None if row is None else str(row[0])
    conn.rollback()  # the read's transaction; what follows begins its own
    return current, tables


def upgrade(url: str) -> None:
    """Make or upgrade the store the URL names; ``ConfigError`` for a URL that is not one,
    ``StoreVersionError`` for a store this code cannot run or a server it cannot reach."""
    parsed = parse(url)
    where = masked(parsed)
    try:
        import psycopg  # noqa: F401  (SQLAlchemy's dialect imports it; missing: one line here)
    except ImportError:
        raise ConfigError(
            "BRAIN_DATABASE_URL needs the psycopg driver, which is not installed",
            "install airig's server extra (pip install 'airig[server]')",
        ) from None
    connect_args = (
        {} if "connect_timeout" in parsed.query else {"connect_timeout": CONNECT_TIMEOUT_S}
    )
    try:
        made = sa.create_engine(parsed, poolclass=NullPool, connect_args=connect_args)
    except (sa.exc.ArgumentError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"BRAIN_DATABASE_URL {where}: {_scrubbed(str(exc), parsed)}", URL_HINT
        ) from None
    try:
        with made.connect() as conn:
            # Brains sharing the database start together: one upgrades at a time, the next
            # reads what it left (a session lock, released when this connection closes).
            conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": UPGRADE_LOCK})
            conn.commit()
            current, tables = _revision(conn)
            if current == head():
                return
            if current is not None and current not in known():
                raise newer(where, current)
            if current is None and tables:
                raise StoreVersionError(
                    f"the database {where} holds tables ({', '.join(sorted(tables)[:5])[:200]}) "
                    "but no brain store revision",
                    "BRAIN_DATABASE_URL must name an empty database or a brain's store",
                )
            if current is not None and current < LAST_SQLITE_ONLY:
                raise StoreVersionError(
                    f"the brain's store {where} is at revision {current}, one of SQLite's "
                    f"history (up to {LAST_SQLITE_ONLY}) that PostgreSQL never runs",
                    "BRAIN_DATABASE_URL must name an empty database or a store airig made",
                )
            if current is None:
                with conn.begin():  # a new store: all of it or none of it
                    schema.metadata.create_all(conn)
                    MigrationContext.configure(conn).stamp(scripts(), "head")
                log.info("brain store made", extra={"store": where, "revision": head()})
            else:
                command.upgrade(config(conn), "head")
                log.info(
                    "brain store upgraded", extra={"store": where, "from": current, "to": head()}
                )
    # What the server or the network said (unreachable, a refused password, a database
    # that does not exist, a revision the server refused); a bug of the code keeps its
    # traceback.
    except sa.exc.DBAPIError as exc:
        cause = _scrubbed(str(exc.orig or exc), parsed)
        raise StoreVersionError(
            f"cannot bring the brain's store {where} to revision {head()}: {cause}",
            "check BRAIN_DATABASE_URL (server, user, password, database) and that the "
            "server is up; the store stays at the last revision that finished",
        ) from None
    finally:
        made.dispose()
