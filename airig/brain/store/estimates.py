"""The ``estimates`` table: what the brain learned from finished attempts, per (task type,
model, GPU) (``scheduling/estimates.py`` computes the figures; ``GET /v1/estimates`` reads
them as stored).

Each row holds the figures and the bounded window of recent observations they were computed
from (``window_json``), so a restart, a backup or a second brain on the same PostgreSQL
store goes on from the same history. The table itself is bounded: at most ``MAX_KEYS``
rows, the row updated longest ago dropped first.

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from airig.brain.store import dialect

# Rows kept: (task types) x (models) x (GPU models) of a real fleet is a few hundred; a
# worker or a plan that invents names cannot grow the table past this.
MAX_KEYS = 2000

FIGURES = (
    "samples", "failures", "updated_at", "run_p50_s", "run_p90_s", "load_p50_s",
    "load_p90_s", "vram_peak_mb", "tokens_per_s", "failure_rate",
)  # fmt: skip
_COLUMNS = ("task_type", "model", "gpu", *FIGURES)
# pg_try_advisory_xact_lock's first key (an int4) for "one estimates row being saved"; the
# second is the row's key hashed by the server.
SAVE_LOCK = 0x61697265  # "aire"


def every(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Reads every row's key and figures (not its window), by key."""
    return conn.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM estimates ORDER BY task_type, model, gpu"
    ).fetchall()


def window(conn: sqlite3.Connection, task_type: str, model: str, gpu: str) -> sqlite3.Row | None:
    """Reads one row's window of observations (JSON text) and counts, None without one."""
    row: sqlite3.Row | None = conn.execute(
        """SELECT window_json, samples, failures FROM estimates
           WHERE task_type = ? AND model = ? AND gpu = ?""",
        (task_type, model, gpu),
    ).fetchone()
    return row


def save(
    conn: sqlite3.Connection, key: tuple[str, str, str], figures: Mapping[str, Any],
    window_json: str,
) -> None:  # fmt: skip
    """Writes one row's figures and window, new or updated; a new row past ``MAX_KEYS``
    drops the row updated longest ago."""
    if dialect.locks_rows(conn):
        # Brains completing side by side (PostgreSQL, pg.py): every completion of one
        # (type, model, GPU) writes this one row, and a transaction holding it until its
        # commit while it waits for another row made deadlocks between two brains'
        # batches. A save that finds the row's key taken by another transaction is left
        # out: one observation fewer in a bounded window, never a wait.
        got = conn.execute(
            "SELECT pg_try_advisory_xact_lock((?)::int4, hashtext(?))",
            (SAVE_LOCK, "\x1f".join(key)),
        ).fetchone()[0]
        if not got:
            return
    names = ", ".join(_COLUMNS)
    marks = ", ".join("?" for _ in (*_COLUMNS, "window_json"))
    updates = ", ".join(f"{name} = excluded.{name}" for name in (*FIGURES, "window_json"))
    conn.execute(
        f"""INSERT INTO estimates ({names}, window_json) VALUES ({marks})
            ON CONFLICT (task_type, model, gpu) DO UPDATE SET {updates}""",
        (*key, *(figures[name] for name in FIGURES), window_json),
    )
    if figures["samples"] == 1:  # a new key (or one dropped and back): bound the table
        _bound(conn)


def _bound(conn: sqlite3.Connection) -> None:
    (count,) = conn.execute("SELECT COUNT(*) FROM estimates").fetchone()
    if count > MAX_KEYS:
        conn.execute(
            """DELETE FROM estimates WHERE (task_type, model, gpu) IN (
                   SELECT task_type, model, gpu FROM estimates
                   ORDER BY updated_at, task_type, model, gpu LIMIT ?)""",
            (count - MAX_KEYS,),
        )


def gpus_json(conn: sqlite3.Connection, worker_id: str) -> str | None:
    """Reads a worker's last reported GPUs (JSON text), None for an unknown worker."""
    row = conn.execute("SELECT gpus_json FROM workers WHERE id = ?", (worker_id,)).fetchone()
    return None if row is None else str(row[0])


def mark_waiting(
    conn: sqlite3.Connection, task_class: str, model: str, reason: str, prefix: str
) -> int:
    """Sets ``reason`` on the READY tasks of (``task_class``, ``model``) that say nothing
    else (another reason, such as a service down, stays); how many changed."""
    return conn.execute(
        """UPDATE tasks SET reason = ? WHERE state = 'READY' AND task_class = ?
               AND model = ? AND (reason IS NULL OR substr(reason, 1, ?) = ?)
               AND reason IS DISTINCT FROM ?""",
        (reason, task_class, model, len(prefix), prefix, reason),
    ).rowcount


def clear_waiting(conn: sqlite3.Connection, task_class: str, model: str, prefix: str) -> int:
    """Clears the ``reason`` starting with ``prefix`` of the READY tasks of (``task_class``,
    ``model``); how many changed."""
    return conn.execute(
        """UPDATE tasks SET reason = NULL WHERE state = 'READY' AND task_class = ?
               AND model = ? AND substr(reason, 1, ?) = ?""",
        (task_class, model, len(prefix), prefix),
    ).rowcount
