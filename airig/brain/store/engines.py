"""Which engine holds the brain's store: the SQLite file (``db.Database``, the default) or
PostgreSQL (``pg.PgDatabase``, when ``BRAIN_DATABASE_URL`` names one). Both keep one
contract (``tx``, ``read``, ``writer``, ``lookup``, ``file_bytes``, ``close``), so nothing
above the store asks which it got."""

from __future__ import annotations

from pathlib import Path

from airig.brain.store.db import Database


def open_store(
    path: Path, url: str = "", *, start_empty: bool = False, writers: int = 1
) -> Database:
    """The store at ``url`` when given (psycopg imported only then), else the file at
    ``path``; made or upgraded to this code's schema before it is handed out. An empty
    PostgreSQL store beside a SQLite file at ``path`` that holds plans is refused unless
    ``start_empty`` (``left_behind.py``: `migrate-store` was forgotten). ``writers``: on
    PostgreSQL, the shared durable batches run at once (``pg_writers.py``)."""
    if url:
        # here only: the PostgreSQL path's imports (SQLAlchemy, psycopg)
        from airig.brain.store import left_behind
        from airig.brain.store.pg import PgDatabase

        store = PgDatabase(url, writers=writers)
        try:
            left_behind.check(store, path, start_empty)
        except BaseException:
            store.close()
            raise
        return store
    return Database(path)
