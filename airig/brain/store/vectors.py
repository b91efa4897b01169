"""The search index: the vectors of `embed` tasks with an ``index``, in one SQLite file.

``<BRAIN_DATA_DIR>/index/search.sqlite``, apart from the brain's store: one ``vec0``
table of sqlite-vec per index (``vec_<id>``, cosine distance, the index's dimensions)
beside an ``entries`` table (where each text came from, a snippet, the plan and task that
embedded it, whether an untrusted rig produced it) and an ``indexes`` table (name, model,
dimensions). Only the brain writes it, when an embed task succeeds (``leases.complete``),
so workers of a joined rig, who do not share the data volume, fill it too.

The file is opened through apsw: its wheels bundle a SQLite that may load extensions,
which the standard library's sqlite3 cannot on a Python built without
``--enable-loadable-sqlite-extensions``. Each call opens its own connection (WAL, a
busy timeout): index writes are rare and searches short.

A task's rows are replaced, never added twice: rows are keyed by (index, plan, task), and
by (index, source document): a task that indexes a source replaces what another plan put
there for that source (a recipe run again on the same folder leaves each page once, not
twice). Tasks of one plan never replace each other's rows of a source (a plan may embed one
file in several tasks), and an untrusted writer replaces only untrusted rows.
The first insert fixes an index's model and dimensions; vectors of another model are
refused (``IndexRefused``), since distances between two models' vectors mean nothing.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import sqlite_vec

INDEX_FILE = Path("index") / "search.sqlite"
SNIPPET_CHARS = 300
BUSY_TIMEOUT_MS = 10_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS indexes (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    index_id INTEGER NOT NULL REFERENCES indexes(id),
    plan_id TEXT NOT NULL,
    task_key TEXT NOT NULL,
    source TEXT,
    locator TEXT,
    snippet TEXT NOT NULL,
    untrusted INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_by_task ON entries(index_id, plan_id, task_key);
CREATE INDEX IF NOT EXISTS entries_by_source ON entries(index_id, source);
"""

_schema_lock = threading.Lock()


class IndexUnavailable(Exception):
    """The index file cannot be opened, or sqlite-vec cannot be loaded into it."""


class IndexRefused(Exception):
    """An embed task's vectors cannot go into its index (another model, other dimensions,
    an output that does not pair texts with vectors). Not retryable."""

    def __init__(self, message: str, error_type: str = "index_refused") -> None:
        super().__init__(message)
        self.error_type = error_type


@dataclass(frozen=True)
class Entry:
    """One text to index: its vector and where it came from."""

    vector: list[float]
    snippet: str
    source: str | None = None
    locator: str | None = None


@dataclass(frozen=True)
class IndexInfo:
    name: str
    model: str
    dims: int
    entries: int


def index_path(data_dir: Path) -> Path:
    return data_dir / INDEX_FILE


def connect(path: Path, create: bool = True) -> apsw.Connection:
    """The index file with sqlite-vec loaded; ``IndexUnavailable`` (one line) if not."""
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        flags = apsw.SQLITE_OPEN_READWRITE | (apsw.SQLITE_OPEN_CREATE if create else 0)
        conn = apsw.Connection(str(path), flags=flags)
    except (OSError, apsw.Error) as exc:
        raise IndexUnavailable(f"cannot open the search index {path}: {exc}") from None
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)  # apsw's Connection.load_extension, as sqlite3's
        conn.enable_load_extension(False)
    except (apsw.Error, AttributeError) as exc:
        conn.close()
        raise IndexUnavailable(f"cannot load sqlite-vec into the search index: {exc}") from None
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    with _schema_lock:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(SCHEMA)
    return conn


def normalise_model(model: str) -> str:
    """Ollama names a model without a tag ``<name>:latest``."""
    return model if ":" in model.rsplit("/", 1)[-1] else f"{model}:latest"


def same_model(a: str, b: str) -> bool:
    return normalise_model(a) == normalise_model(b)


def _index_row(conn: apsw.Connection, name: str) -> tuple[int, str, int] | None:
    row: Any = conn.execute(
        "SELECT id, model, dims FROM indexes WHERE name = ?", (name,)
    ).fetchone()
    return (int(row[0]), str(row[1]), int(row[2])) if row else None


def mismatch(name: str, index_model: str, model: str) -> str:
    return (
        f"index {name!r} holds vectors of {index_model!r}; this task's come from {model!r}: "
        f"embed with {index_model!r}, or give the task another index name"
    )


def replace_task(
    path: Path, name: str, model: str, plan_id: str, task_key: str, entries: list[Entry],
    untrusted: bool, now: float,
) -> int:  # fmt: skip
    """Put one task's entries into index ``name``, in place of any it put there before
    and of those another plan put there for the same sources (untrusted: only the
    untrusted ones).

    Returns how many entries were written. ``IndexRefused`` for another model or other
    dimensions than the index's; ``IndexUnavailable`` when the file cannot be written.
    """
    dims = {len(entry.vector) for entry in entries}
    if len(dims) > 1 or 0 in dims:
        raise IndexRefused(
            f"the embeddings have differing or no dimensions {sorted(dims)}", "bad_output"
        )
    conn = connect(path)
    try:
        with conn:  # one transaction (a savepoint in apsw)
            row = _index_row(conn, name)
            if row is None:
                if not entries:
                    return 0
                dim = dims.pop()
                conn.execute(
                    "INSERT INTO indexes (name, model, dims, created) VALUES (?, ?, ?, ?)",
                    (name, model, dim, now),
                )
                row = (conn.last_insert_rowid(), model, dim)
                conn.execute(
                    f"CREATE VIRTUAL TABLE vec_{row[0]} USING "
                    f"vec0(embedding float[{dim}] distance_metric=cosine)"
                )
            index_id, index_model, index_dims = row
            if not same_model(index_model, model):
                raise IndexRefused(mismatch(name, index_model, model), "index_model_mismatch")
            if dims and dims != {index_dims}:
                raise IndexRefused(
                    f"index {name!r} holds {index_dims}-dimension vectors; this task's have "
                    f"{dims.pop()}: drop `dimensions` from the payload or use another index "
                    "name",
                    "index_model_mismatch",
                )
            old = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM entries WHERE index_id = ? AND plan_id = ? AND task_key = ?",
                    (index_id, plan_id, task_key),
                )
            ]
            for source in sorted({e.source for e in entries if e.source is not None}):
                old += [
                    r[0]
                    for r in conn.execute(
                        """SELECT id FROM entries WHERE index_id = ? AND source = ?
                           AND plan_id != ? AND (untrusted = 1 OR ? = 0)""",
                        (index_id, source, plan_id, int(untrusted)),
                    )
                ]
            for entry_id in old:
                conn.execute(f"DELETE FROM vec_{index_id} WHERE rowid = ?", (entry_id,))
                conn.execute("DELETE FROM entries WHERE id = ?", (entry_id,))
            for entry in entries:
                conn.execute(
                    """INSERT INTO entries (index_id, plan_id, task_key, source, locator,
                       snippet, untrusted, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
                    (index_id, plan_id, task_key, entry.source, entry.locator,
                     entry.snippet[:SNIPPET_CHARS], int(untrusted), now),
                )  # fmt: skip
                conn.execute(
                    f"INSERT INTO vec_{index_id} (rowid, embedding) VALUES (?, ?)",
                    (conn.last_insert_rowid(), sqlite_vec.serialize_float32(entry.vector)),
                )
        return len(entries)
    except apsw.Error as exc:
        raise IndexUnavailable(f"cannot write the search index {path}: {exc}") from None
    finally:
        conn.close()


def indexes(path: Path) -> list[IndexInfo]:
    """Every index with its model, dimensions and entry count; [] when there is no file."""
    if not path.exists():
        return []
    conn = connect(path, create=False)
    try:
        rows: list[Any] = conn.execute(
            """SELECT i.name, i.model, i.dims, COUNT(e.id) FROM indexes i
               LEFT JOIN entries e ON e.index_id = i.id GROUP BY i.id ORDER BY i.name"""
        ).fetchall()
    except apsw.Error as exc:
        raise IndexUnavailable(f"cannot read the search index {path}: {exc}") from None
    finally:
        conn.close()
    return [IndexInfo(str(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]


def tasks_with_entries(path: Path, wanted: list[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """Which of these (index name, plan id, task key) still hold entries (a reused embed
    task stands on them, plans/reuse.py); none without an index file. One connection,
    one indexed read each."""
    if not wanted or not path.exists():
        return set()
    conn = connect(path, create=False)
    try:
        return {
            (name, plan_id, key) for name, plan_id, key in wanted
            if conn.execute(
                """SELECT 1 FROM entries e JOIN indexes i ON i.id = e.index_id
                   WHERE i.name = ? AND e.plan_id = ? AND e.task_key = ? LIMIT 1""",
                (name, plan_id, key),
            ).fetchone() is not None
        }  # fmt: skip
    except apsw.Error as exc:
        raise IndexUnavailable(f"cannot read the search index {path}: {exc}") from None
    finally:
        conn.close()


def nearest(path: Path, name: str, vector: list[float], k: int) -> list[dict[str, Any]]:
    """The ``k`` entries of index ``name`` nearest ``vector`` (cosine), nearest first."""
    conn = connect(path, create=False)
    try:
        row = _index_row(conn, name)
        if row is None:
            return []
        index_id = row[0]
        rows: list[Any] = conn.execute(
            f"""SELECT e.source, e.locator, e.snippet, e.plan_id, e.task_key, e.untrusted,
                       v.distance
                FROM (SELECT rowid, distance FROM vec_{index_id}
                      WHERE embedding MATCH ? AND k = ?) v
                JOIN entries e ON e.id = v.rowid
                ORDER BY v.distance, e.id""",
            (sqlite_vec.serialize_float32(vector), k),
        ).fetchall()
    except apsw.Error as exc:
        raise IndexUnavailable(f"cannot search the index {name!r}: {exc}") from None
    finally:
        conn.close()
    return [
        {
            "score": round(1.0 - float(r[6]), 6),
            "distance": round(float(r[6]), 6),
            "source": r[0],
            "locator": r[1],
            "snippet": r[2],
            "plan_id": r[3],
            "task": r[4],
            "untrusted": bool(r[5]),
        }
        for r in rows
    ]


def entries_of(output: dict[str, Any]) -> list[Entry]:
    """The entries an embed task's output holds: ``documents`` paired with ``embeddings``
    in order (the executor keeps them so). ``IndexRefused`` when they do not pair up."""
    vectors = output.get("embeddings")
    documents = output.get("documents")
    if not isinstance(vectors, list) or not isinstance(documents, list):
        raise IndexRefused("the output has no 'embeddings' and 'documents' lists", "bad_output")
    if len(vectors) != len(documents):
        raise IndexRefused(
            f"the output has {len(vectors)} embeddings for {len(documents)} documents",
            "bad_output",
        )
    entries = []
    for vector, document in zip(vectors, documents, strict=True):
        if not isinstance(vector, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in vector
        ):
            raise IndexRefused("an embedding is not a list of numbers", "bad_output")
        if not isinstance(document, dict) or not isinstance(document.get("text"), str):
            raise IndexRefused("a document has no 'text'", "bad_output")
        entries.append(
            Entry(
                vector=[float(v) for v in vector],
                snippet=document["text"],
                source=_label(document.get("source")),
                locator=_label(document.get("locator")),
            )
        )
    return entries


def _label(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value)
