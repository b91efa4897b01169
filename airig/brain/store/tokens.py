"""The ``tokens`` table: stored tokens, kept as hashes (``api/auth.py`` makes them).

Every function runs inside the caller's transaction (or read); none opens its own.
"""

from __future__ import annotations

import sqlite3


def insert(conn: sqlite3.Connection, token_hash: str, token_id: str, scope: str, name: str,
           now: float, trust: str | None) -> None:  # fmt: skip
    """Writes one new stored token: its hash, id, scope, name, creation time and trust."""
    conn.execute(
        """INSERT INTO tokens (token_hash, id, scope, name, created_at, trust)
           VALUES (?, ?, ?, ?, ?, ?)""",
        (token_hash, token_id, scope, name, now, trust),
    )


def by_hash(conn: sqlite3.Connection, digest: str) -> sqlite3.Row | None:
    """Reads the stored token with this hash (id, scope, name, revoked_at), or None."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT id, scope, name, revoked_at FROM tokens WHERE token_hash = ?", (digest,)
    ).fetchone()
    return row


def every(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Reads every stored token's id, scope, name, dates and trust, newest first (no hash)."""
    return conn.execute(
        """SELECT id, scope, name, created_at, revoked_at, trust FROM tokens
           ORDER BY created_at DESC, id"""
    ).fetchall()


def by_id(conn: sqlite3.Connection, token_id: str) -> sqlite3.Row | None:
    """Reads the whole row of the stored token with this id, or None."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM tokens WHERE id = ?", (token_id,)
    ).fetchone()
    return row


def revoke(conn: sqlite3.Connection, token_id: str, now: float) -> None:
    """Writes a stored token's revocation time."""
    conn.execute("UPDATE tokens SET revoked_at = ? WHERE id = ?", (now, token_id))


def owner_is_admin(conn: sqlite3.Connection, owner: str | None) -> bool:
    """Reads whether a plan's ``owner`` (``api/auth.owner_of``) is an admin: none recorded
    (a plan from before owners were, the admin's alone), the settings' admin token
    (``admin:admin``), or a stored token (``token:<id>``) of scope admin."""
    if owner is None:
        return True
    kind, _, rest = owner.partition(":")
    if kind == "token":
        row = by_id(conn, rest)
        return row is not None and row["scope"] == "admin"
    return kind == "admin"
