"""The ``workers`` table: registration, heartbeats, the name a worker holds, the list.

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import sqlite3

from airig.brain.store import dialect


def holder(conn: sqlite3.Connection, name: str) -> sqlite3.Row | None:
    """Reads who holds a worker name: its token hash, last heartbeat, rig, and that rig's
    join token (``token_id`` NULL when the token is gone, ``revoked_at`` when revoked)."""
    row: sqlite3.Row | None = conn.execute(
        """SELECT w.token_hash, w.last_heartbeat, w.registered_by, w.host, t.revoked_at,
               t.id AS token_id
           FROM workers w LEFT JOIN tokens t ON t.id = w.registered_by WHERE w.id = ?""",
        (name,),
    ).fetchone()
    return row


def register(conn: sqlite3.Connection, name: str, token_hash: str, classes_json: str,
             gpu_index: int | None, gpus_json: str, models_json: str, now: float,
             host: str, registered_by: str | None) -> None:  # fmt: skip
    """Writes a worker's row, new or registered again (its token, classes, GPUs, rig)."""
    conn.execute(
        """INSERT INTO workers (id, token_hash, classes_json, gpu_index, gpus_json,
               models_json, registered_at, last_heartbeat, host, registered_by)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT(id) DO UPDATE SET token_hash = excluded.token_hash,
               classes_json = excluded.classes_json, gpu_index = excluded.gpu_index,
               gpus_json = excluded.gpus_json, models_json = excluded.models_json,
               registered_at = excluded.registered_at,
               last_heartbeat = excluded.last_heartbeat, host = excluded.host,
               registered_by = excluded.registered_by""",
        (
            name, token_hash, classes_json, gpu_index, gpus_json, models_json, now, now, host,
            registered_by,
        ),
    )  # fmt: skip


def heartbeat(
    conn: sqlite3.Connection, name: str, now: float, gpus_json: str, models_json: str
) -> None:
    """Writes a worker's last heartbeat, GPU telemetry and resident models."""
    conn.execute(
        """UPDATE workers SET last_heartbeat = ?, gpus_json = ?, models_json = ?
           WHERE id = ?""",
        (now, gpus_json, models_json, name),
    )


# the heartbeat of a worker that stopped cleanly: its name is free at once, and no alert
# or finding calls it silent
RETIRED = 0.0


def retire(conn: sqlite3.Connection, name: str, token_hash: str) -> None:
    """Writes a stopped worker's heartbeat to RETIRED and its token hash to one nobody holds."""
    conn.execute(
        "UPDATE workers SET last_heartbeat = ?, token_hash = ? WHERE id = ?",
        (RETIRED, token_hash, name),
    )


def last_heartbeat(conn: sqlite3.Connection, name: str) -> float | None:
    """Reads a worker's last heartbeat; None when no worker has this name."""
    row = conn.execute("SELECT last_heartbeat FROM workers WHERE id = ?", (name,)).fetchone()
    return None if row is None else float(row["last_heartbeat"])


def forget(conn: sqlite3.Connection, name: str) -> None:
    """Deletes a worker's row (and with it its token)."""
    conn.execute("DELETE FROM workers WHERE id = ?", (name,))


def every(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Reads every worker's row, by name."""
    return conn.execute("SELECT * FROM workers ORDER BY id").fetchall()


def by_token_hash(conn: sqlite3.Connection, digest: str) -> str | None:
    """Reads the name of the worker whose token has this hash, or None."""
    row = conn.execute("SELECT id FROM workers WHERE token_hash = ?", (digest,)).fetchone()
    return None if row is None else str(row["id"])


def classes_json(conn: sqlite3.Connection, name: str) -> str | None:
    """Reads a worker's task classes (a JSON list), or None when it is not registered."""
    row = conn.execute("SELECT classes_json FROM workers WHERE id = ?", (name,)).fetchone()
    return None if row is None else str(row["classes_json"])


def is_local(conn: sqlite3.Connection, name: str) -> bool:
    """Reads whether a worker is this machine's (registered with the bootstrap token, not
    a join token); False for a name no worker registered."""
    row = conn.execute("SELECT registered_by FROM workers WHERE id = ?", (name,)).fetchone()
    return row is not None and row["registered_by"] is None


def registered_with(conn: sqlite3.Connection, token_id: str) -> list[str]:
    """Reads the names of the workers that registered with this join token, by name."""
    rows = conn.execute(
        "SELECT id FROM workers WHERE registered_by = ? ORDER BY id", (token_id,)
    ).fetchall()
    return [str(row["id"]) for row in rows]


def models_heard_since(conn: sqlite3.Connection, since: float) -> list[sqlite3.Row]:
    """The resident models (``models_json``) of workers heard from since ``since``."""
    return conn.execute(
        "SELECT models_json FROM workers WHERE last_heartbeat >= ?", (since,)
    ).fetchall()


def model_holders(conn: sqlite3.Connection, worker_id: str, since: float) -> dict[str, int]:
    """Per model, how many workers but ``worker_id`` heard from since ``since`` hold it."""
    # Counted by SQLite (json_each): every claim reads every live worker's list, and
    # decoding them in Python cost a sixth of the brain's CPU at 500 workers
    # (benchmarks/fleet.py); the same counts, each listed model once per listing.
    rows = conn.execute(
        f"""SELECT m.value AS model, COUNT(*) AS n
           FROM workers w, {dialect.json_rows(conn, "w.models_json", "m")}
           WHERE w.id != ? AND w.last_heartbeat >= ? GROUP BY m.value""",
        (worker_id, since),
    ).fetchall()
    return {row["model"]: row["n"] for row in rows}


def claimed(conn: sqlite3.Connection, worker_id: str, now: float) -> None:
    """The worker leased a task at ``now`` (``last_claim_at``)."""
    conn.execute("UPDATE workers SET last_claim_at = ? WHERE id = ?", (now, worker_id))
