"""The search index: the vectors of `embed` tasks with an ``index``, in one SQLite file.

``<BRAIN_DATA_DIR>/index/search.sqlite``, apart from the brain's store: one ``vec0``
table of sqlite-vec per index (``vec_<id>``, cosine distance, the index's dimensions)
beside an ``entries`` table (where each text came from, a snippet, the plan and task that
embedded it, the plan's owner, whether an untrusted rig produced it) and an ``indexes``
table (name, model, dimensions, owner). Only the brain writes it, when an embed task
succeeds (``leases.complete``), so workers of a joined rig, who do not share the data
volume, fill it too. Opening it safely, whatever lies at its path, is ``index_file.py``'s:
every failure of the file is one ``IndexUnavailable`` with the fix.

A task's rows are replaced, never added twice: rows are keyed by (index, plan, task), and
by (index, source document): a task that indexes a source replaces what another plan of
the same owner put there for that source (a recipe run again on the same folder leaves
each page once, not twice). Tasks of one plan never replace each other's rows of a source
(a plan may embed one file in several tasks), and an untrusted writer replaces only
untrusted rows.

Who may write and read (``Writer``):

- the first trusted insert fixes an index's model (the task's payload names it, not the
  worker's output) and dimensions; vectors of another model are refused
  (``IndexRefused``), since distances between two models' vectors mean nothing. Output
  of an untrusted rig or a tainted task never creates an index: its entries go only into
  one that exists, marked untrusted;
- an index belongs to the owner of the plan that created it: plans of another owner may
  not write into it (``index_owner_mismatch``: name another index), admin's plans may;
- a submitter's search and list see only the entries of its own plans; admin's see all.

A vector with no direction (all zero) or a non-finite number has no cosine distance to
anything: refused at completion, naming the document. Rows an older kit stored so answer
a NULL distance; a search skips them (and asks sqlite-vec for more neighbours instead).
Vectors are stored as unit vectors (the cosine distance does not change), so a large but
finite component never overflows float32.

Entries follow retention (``retention.py``): the entries a plan wrote go with the plan, in
transactions of at most ``DELETE_BATCH`` entries with their vectors (``remove_entries``),
except those a task of another plan stands on (a reused item's ``reused_from`` names the
task that wrote them). An entry and its vector are written and deleted in one
transaction, so a search answers exactly what ``entries`` holds. In this process one
writer of the file at a time (``_write_lock``): an embed completion writes the index
inside the store's write transaction, so it must wait for at most one short batch of
retention's, never for SQLite's busy handler to poll its way in between batches.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import sqlite_vec

from airig.brain.store.index_file import (
    INDEX_FILE,
    IndexUnavailable,
    connect,
    exists,
    index_path,
    unavailable,
)

__all__ = ["INDEX_FILE", "IndexUnavailable", "connect", "index_path"]

SNIPPET_CHARS = 300
# The most neighbours one sqlite-vec KNN query returns.
MAX_K = 4096
# Entries (each with its vector) one transaction of retention deletes, at most.
DELETE_BATCH = 500
PAUSE_S = 0.001  # between those transactions: a waiting writer (a completion) gets the lock
# The one writer of the index file in this process (Python's locks are unfair: the pause
# above is what lets a waiting completion in between two batches).
_write_lock = threading.Lock()


class IndexRefused(Exception):
    """An embed task's vectors cannot go into its index (another model, other dimensions,
    another owner's index, an untrusted output and no index yet, an output that does not
    pair texts with vectors, a vector with no direction). Not retryable."""

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
class Writer:
    """Whose task writes: its plan's ``owner`` (None: a plan from before owners were
    recorded, the admin's), whether that owner is an admin, whether its output is
    untrusted (an untrusted rig, or a task that ran on tainted input)."""

    owner: str | None = None
    admin: bool = True
    untrusted: bool = False


@dataclass(frozen=True)
class IndexInfo:
    name: str
    model: str
    dims: int
    entries: int


def normalise_model(model: str) -> str:
    """Ollama names a model without a tag ``<name>:latest``."""
    return model if ":" in model.rsplit("/", 1)[-1] else f"{model}:latest"


def same_model(a: str, b: str) -> bool:
    return normalise_model(a) == normalise_model(b)


def direction(vector: list[float]) -> list[float] | None:
    """``vector`` scaled to length 1, or None when it has no direction: all zero, or a
    component that is not a finite number (``math.hypot`` scales, so large finite ones
    do not overflow)."""
    try:
        norm = math.hypot(*vector)
    except (TypeError, OverflowError):
        return None
    if norm == 0 or not math.isfinite(norm):
        return None
    return [v / norm for v in vector]


def _index_row(conn: apsw.Connection, name: str) -> tuple[int, str, int, str | None] | None:
    row: Any = conn.execute(
        "SELECT id, model, dims, owner FROM indexes WHERE name = ?", (name,)
    ).fetchone()
    return (int(row[0]), str(row[1]), int(row[2]), row[3]) if row else None


def mismatch(name: str, index_model: str, model: str) -> str:
    return (
        f"index {name!r} holds vectors of {index_model!r}; this task's come from {model!r}: "
        f"embed with {index_model!r}, or give the task another index name"
    )


def replace_task(
    path: Path, name: str, model: str, plan_id: str, task_key: str, entries: list[Entry],
    writer: Writer, now: float,
) -> int:  # fmt: skip
    """Put one task's entries into index ``name``, in place of any it put there before
    and of those another plan of the same owner put there for the same sources
    (untrusted: only the untrusted ones).

    Returns how many entries were written. ``IndexRefused`` for another model or other
    dimensions than the index's, another owner's index, an untrusted writer and no index
    yet, or a vector with no direction; ``IndexUnavailable`` when the file cannot be
    written.
    """
    dims = {len(entry.vector) for entry in entries}
    if len(dims) > 1 or 0 in dims:
        raise IndexRefused(
            f"the embeddings have differing or no dimensions {sorted(dims)}", "bad_output"
        )
    units = [_unit(entry, n) for n, entry in enumerate(entries)]
    conn = connect(path)
    try:
        with _write_lock, conn:  # one transaction (a savepoint in apsw)
            row = _index_row(conn, name)
            if row is None:
                if not entries:
                    return 0
                if writer.untrusted:
                    raise IndexRefused(
                        f"index {name!r} does not exist yet, and this task's output is "
                        "untrusted (an untrusted rig, or tainted input): an untrusted output "
                        "never creates an index; run a trusted embed task into it first",
                        "index_untrusted",
                    )
                dim = dims.pop()
                conn.execute(
                    """INSERT INTO indexes (name, model, dims, created, owner)
                       VALUES (?, ?, ?, ?, ?)""",
                    (name, model, dim, now, writer.owner),
                )
                row = (conn.last_insert_rowid(), model, dim, writer.owner)
                conn.execute(
                    f"CREATE VIRTUAL TABLE vec_{row[0]} USING "
                    f"vec0(embedding float[{dim}] distance_metric=cosine)"
                )
            index_id, index_model, index_dims, index_owner = row
            if not writer.admin and index_owner != writer.owner:
                raise IndexRefused(
                    f"index {name!r} belongs to another owner's plans: give the task another "
                    "index name",
                    "index_owner_mismatch",
                )
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
            # Another owner's rows of a source stay (an admin's plan also replaces rows of
            # no owner: what plans stored before owners were recorded).
            same_owner = (writer.owner, int(writer.admin))
            for source in sorted({e.source for e in entries if e.source is not None}):
                old += [
                    r[0]
                    for r in conn.execute(
                        """SELECT id FROM entries WHERE index_id = ? AND source = ?
                           AND plan_id != ? AND (untrusted = 1 OR ? = 0)
                           AND (owner IS ? OR (owner IS NULL AND ? = 1))""",
                        (index_id, source, plan_id, int(writer.untrusted), *same_owner),
                    )
                ]
            for entry_id in old:
                conn.execute(f"DELETE FROM vec_{index_id} WHERE rowid = ?", (entry_id,))
                conn.execute("DELETE FROM entries WHERE id = ?", (entry_id,))
            for entry, unit in zip(entries, units, strict=True):
                conn.execute(
                    """INSERT INTO entries (index_id, plan_id, task_key, source, locator,
                       snippet, untrusted, created, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    (index_id, plan_id, task_key, entry.source, entry.locator,
                     entry.snippet[:SNIPPET_CHARS], int(writer.untrusted), now, writer.owner),
                )  # fmt: skip
                conn.execute(
                    f"INSERT INTO vec_{index_id} (rowid, embedding) VALUES (?, ?)",
                    (conn.last_insert_rowid(), sqlite_vec.serialize_float32(unit)),
                )
        return len(entries)
    except apsw.Error as exc:
        raise unavailable("write", path, exc) from None
    finally:
        conn.close()


def _unit(entry: Entry, n: int) -> list[float]:
    unit = direction(entry.vector)
    if unit is None:
        named = [repr(part) for part in (entry.source, entry.locator) if part]
        where = f"document {n + 1}" + (f" ({', '.join(named)})" if named else "")
        raise IndexRefused(
            f"the embedding of {where} has no direction (all zero, or a number that is not "
            "finite), so no distance to it means anything: check the embedding model's "
            "answer for that text",
            "bad_output",
        )
    return unit


def indexes(path: Path, owner: str | None = None, admin: bool = True) -> list[IndexInfo]:
    """Every index with its model, dimensions and entry count (admin), or the indexes of
    ``owner`` with its own entries; [] when there is no file."""
    if not exists(path):
        return []
    conn = connect(path, create=False)
    try:
        if admin:
            rows: list[Any] = conn.execute(
                """SELECT i.name, i.model, i.dims, COUNT(e.id) FROM indexes i
                   LEFT JOIN entries e ON e.index_id = i.id GROUP BY i.id ORDER BY i.name"""
            ).fetchall()
        else:
            rows = conn.execute(
                """SELECT i.name, i.model, i.dims, COUNT(e.id) FROM indexes i
                   LEFT JOIN entries e ON e.index_id = i.id AND e.owner IS ?
                   WHERE i.owner IS ? GROUP BY i.id ORDER BY i.name""",
                (owner, owner),
            ).fetchall()
        return [IndexInfo(str(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]
    except apsw.Error as exc:
        raise unavailable("read", path, exc) from None
    finally:
        conn.close()


def plans_with_entries(path: Path) -> set[str]:
    """Every plan id that holds entries in any index; none without an index file. One
    pass over ``entries_by_task`` per index (an index's entries in plan order)."""
    if not exists(path):
        return set()
    conn = connect(path, create=False)
    try:
        found: set[str] = set()
        for (index_id,) in conn.execute("SELECT id FROM indexes ORDER BY id").fetchall():
            found.update(
                str(row[0]) for row in conn.execute(
                    "SELECT DISTINCT plan_id FROM entries WHERE index_id = ?", (index_id,)
                )
            )  # fmt: skip
        return found
    except apsw.Error as exc:
        raise unavailable("read", path, exc) from None
    finally:
        conn.close()


def task_keys(path: Path, plan_id: str) -> set[str]:
    """The keys of the tasks of ``plan_id`` that hold entries; none without a file."""
    if not exists(path):
        return set()
    conn = connect(path, create=False)
    try:
        return {
            str(row[0]) for row in conn.execute(
                """SELECT DISTINCT e.task_key FROM indexes i
                   JOIN entries e ON e.index_id = i.id AND e.plan_id = ?""",
                (plan_id,),
            )
        }  # fmt: skip
    except apsw.Error as exc:
        raise unavailable("read", path, exc) from None
    finally:
        conn.close()


def remove_entries(
    path: Path, plan_id: str, before: float, keep: Collection[str] = (), dry_run: bool = False,
) -> int:  # fmt: skip
    """Delete the entries of plan ``plan_id`` created before ``before``, with their
    vectors, but those of the task keys in ``keep`` (tasks of other plans stand on them).

    Each transaction deletes at most ``DELETE_BATCH`` entries (one SELECT, one DELETE of
    a vector per entry, one DELETE of the entries) and the calls pause between them, so an
    embed completion waiting to write (inside the store's write transaction) waits for
    one batch at most. Every commit leaves whole entries (an entry and its vector go
    together): cut short anywhere, a later call deletes the rest. Returns how many went
    (``dry_run``: how many would, deleting nothing); ``IndexUnavailable`` when the file
    cannot be read or written. No file: 0."""
    if not exists(path):
        return 0
    conn = connect(path, create=False)
    removed = 0
    try:
        rows: list[Any] = conn.execute(
            """SELECT DISTINCT i.id, e.task_key FROM indexes i
               JOIN entries e ON e.index_id = i.id AND e.plan_id = ?
               ORDER BY i.id, e.task_key""",
            (plan_id,),
        ).fetchall()
        for index_id, key in rows:
            if key in keep:
                continue
            params = (int(index_id), plan_id, str(key), before)
            if dry_run:
                counted: Any = conn.execute(
                    f"SELECT COUNT(*) FROM entries WHERE {_OF_TASK}", params
                ).fetchone()
                removed += int(counted[0])
                continue
            while (n := _delete_batch(conn, int(index_id), params)) == DELETE_BATCH:
                removed += n
                time.sleep(PAUSE_S)
            removed += n
        return removed
    except apsw.Error as exc:
        raise unavailable("write", path, exc) from None
    finally:
        conn.close()


_OF_TASK = "index_id = ? AND plan_id = ? AND task_key = ? AND created < ?"


def _delete_batch(conn: apsw.Connection, index_id: int, params: tuple[Any, ...]) -> int:
    """One transaction: at most DELETE_BATCH entries of one task (``_OF_TASK``) and their
    vectors. IMMEDIATE: the file's write lock is taken before the read, so no other
    process's commit comes in between and turns the delete into SQLITE_BUSY."""
    with _write_lock:
        conn.execute("BEGIN IMMEDIATE")
        try:
            ids = [
                int(row[0]) for row in conn.execute(
                    f"SELECT id FROM entries WHERE {_OF_TASK} ORDER BY id LIMIT ?",
                    (*params, DELETE_BATCH),
                )
            ]  # fmt: skip
            if ids:
                conn.executemany(f"DELETE FROM vec_{index_id} WHERE rowid = ?", [(i,) for i in ids])
                marks = ", ".join("?" * len(ids))
                conn.execute(f"DELETE FROM entries WHERE id IN ({marks})", ids)
            conn.execute("COMMIT")
        finally:
            if conn.in_transaction:  # a failure before or at the commit: nothing of it stays
                conn.execute("ROLLBACK")
    return len(ids)


def tasks_with_entries(path: Path, wanted: list[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """Which of these (index name, plan id, task key) still hold entries (a reused embed
    task stands on them, plans/reuse.py); none without an index file. One connection,
    one indexed read each."""
    if not wanted or not exists(path):
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
        raise unavailable("read", path, exc) from None
    finally:
        conn.close()


def nearest(
    path: Path, name: str, vector: list[float], k: int, owner: str | None = None,
    admin: bool = True,
) -> list[dict[str, Any]]:  # fmt: skip
    """The ``k`` entries of index ``name`` nearest ``vector`` (cosine), nearest first:
    every entry (admin), or only those of ``owner``'s plans. Rows with no distance (a
    vector with no direction, stored by an older kit) are skipped."""
    query = direction(vector)
    if query is None:
        return []
    conn = connect(path, create=False)
    try:
        row = _index_row(conn, name)
        if row is None:
            return []
        index_id = row[0]
        # sqlite-vec filters the candidates itself (``rowid IN``), so a submitter's k
        # nearest are k of its own; a NULL distance takes one of the k places, hence the
        # second, larger ask when some came back.
        mine = "" if admin else (
            " AND rowid IN (SELECT id FROM entries WHERE index_id = ? AND owner IS ?)"
        )  # fmt: skip
        sql = f"""SELECT e.source, e.locator, e.snippet, e.plan_id, e.task_key, e.untrusted,
                         v.distance
                  FROM (SELECT rowid, distance FROM vec_{index_id}
                        WHERE embedding MATCH ? AND k = ?{mine}) v
                  JOIN entries e ON e.id = v.rowid
                  ORDER BY v.distance, e.id"""
        blob = sqlite_vec.serialize_float32(query)
        asked = k
        while True:
            params: tuple[Any, ...] = (blob, asked) + (() if admin else (index_id, owner))
            rows: list[Any] = conn.execute(sql, params).fetchall()
            found = [r for r in rows if r[6] is not None]
            if len(found) >= k or len(rows) < asked or asked >= MAX_K:
                break
            asked = min(MAX_K, asked * 2 + len(rows) - len(found))
    except apsw.Error as exc:
        raise unavailable("read", path, exc) from None
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
        for r in found[:k]
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
        try:
            floats = [float(v) for v in vector]
        except OverflowError:  # an integer past a float's range: refused by ``_unit``
            floats = [math.inf] * len(vector)
        entries.append(
            Entry(
                vector=floats,
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
