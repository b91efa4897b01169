"""What the first revisions (0001-0004) do: make only what a store lacks.

Before revisions, every brain made its tables "if not exists" and added the columns it
missed at each start (the ``migrate`` of issue 37), so a store from before versioning can
be at any point of that history, or between two points. These four revisions replay it
that way: a table, column or index that is there already is left as it is. A revision
after them runs on a store exactly at the one before, so it uses Alembic's ``op`` plainly.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op


def _inspect() -> sa.Inspector:
    return sa.inspect(op.get_bind())  # a new one each time: an Inspector caches what it read


def create_table(name: str, *columns: sa.Column[Any] | sa.Constraint, **kw: Any) -> bool:
    """The table when the store lacks it; True when it was made."""
    if _inspect().has_table(name):
        return False
    op.create_table(name, *columns, **kw)
    return True


def add_columns(table: str, *columns: sa.Column[Any]) -> None:
    present = {column["name"] for column in _inspect().get_columns(table)}
    for column in columns:
        if column.name not in present:
            op.add_column(table, column)


def create_index(name: str, table: str, columns: list[str], **kw: Any) -> None:
    if name not in {index["name"] for index in _inspect().get_indexes(table)}:
        op.create_index(name, table, columns, **kw)


def drop_index(name: str, table: str) -> None:
    if name in {index["name"] for index in _inspect().get_indexes(table)}:
        op.drop_index(name, table_name=table)
