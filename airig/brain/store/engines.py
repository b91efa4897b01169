"""Which engine holds the brain's store: the SQLite file (``db.Database``, the default) or
PostgreSQL (``pg.PgDatabase``, when ``BRAIN_DATABASE_URL`` names one). Both keep one
contract (``tx``, ``read``, ``writer``, ``lookup``, ``file_bytes``, ``close``), so nothing
above the store asks which it got."""

from __future__ import annotations

from pathlib import Path

from airig.brain.store.db import Database


def open_store(path: Path, url: str = "") -> Database:
    """The store at ``url`` when given (psycopg imported only then), else the file at
    ``path``; made or upgraded to this code's schema before it is handed out."""
    if url:
        from airig.brain.store.pg import PgDatabase

        return PgDatabase(url)
    return Database(path)
