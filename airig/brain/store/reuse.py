"""What a reused fan-out item stands on (``plans/reuse.py`` decides): the newest earlier
item of a fingerprint, the files a task wrote on the data volume (with their size and
mtime when it succeeded), and the cache of input files' sha256 by their stat.

Every function runs inside the caller's transaction (or read) but for ``file_stat``,
which reads the data volume only.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from airig.brain.store import results
from airig.common.task_types import TASK_TYPES

# Rows of input_hashes kept: the newest seen, so a volume of many folders over the years
# keeps a bounded table (a file whose row went is hashed again, nothing worse).
MAX_INPUT_HASHES = 100_000


# ---- what a task wrote on the data volume ------------------------------------------------


def written_paths(task_type: str, output: Any) -> list[str]:
    """The data-volume files a task of this type says it wrote (its output's own words),
    under the table's ``data_files`` key: a note its ``path``, pages and frames each
    image's ``path``. Other types write none there (their files, if any, are the results
    volume's, ``files``)."""
    spec = TASK_TYPES.get(task_type)
    if spec is None or spec.data_files is None or not isinstance(output, dict):
        return []
    value = output.get(spec.data_files)
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        return []
    return [e["path"] for e in value
            if isinstance(e, dict) and isinstance(e.get("path"), str)]  # fmt: skip


def file_stat(data_dir: Path, relative: str) -> list[int] | None:
    """[size, mtime_ns] of a regular file under the data volume, or None: missing, not a
    file, or a path that is absolute, climbs out or resolves (a link) outside it."""
    pure = PurePosixPath(relative)
    if not relative or pure.is_absolute() or ".." in pure.parts or "\x00" in relative:
        return None
    try:
        root = data_dir.resolve()
        path = (root / relative).resolve()
        if not path.is_relative_to(root):
            return None
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(found.st_mode):
        return None
    return [found.st_size, found.st_mtime_ns]


def record_written(
    conn: sqlite3.Connection, task: sqlite3.Row, output: Any, data_dir: Path
) -> None:
    """A fingerprinted task succeeded: the files it wrote, as they are now. One that is
    not on this volume (a joined rig's worker writes on its own) records nothing, and the
    item is then never reused. ``output`` as the report holds it: built into objects only
    for a type whose output names data files (an embed's vectors stay text)."""
    spec = TASK_TYPES.get(task["type"])
    if spec is None or spec.data_files is None:
        return
    paths = written_paths(task["type"], results.value_of(output))
    if not paths:
        return
    stats = {path: file_stat(data_dir, path) for path in paths}
    value = None if any(s is None for s in stats.values()) else json.dumps(stats)
    conn.execute("UPDATE tasks SET written_json = ? WHERE id = ?", (value, task["id"]))


def unchanged(data_dir: Path, written_json: str | None, paths: list[str]) -> bool:
    """Every file of ``paths`` is on the volume with the size and mtime recorded when its
    task succeeded: not deleted, not rewritten since (by a later run with another recipe,
    or by hand)."""
    if not paths:
        return True
    if not written_json:
        return False
    recorded = json.loads(written_json)
    return all(file_stat(data_dir, path) == recorded.get(path) for path in paths)


# ---- earlier items ------------------------------------------------------------------------


def newest_item(conn: sqlite3.Connection, fingerprint: str, owner: str | None) -> list[sqlite3.Row]:
    """The task rows of the newest earlier item with this fingerprint in a plan of the
    same owner (None: admin's), whatever their state; [] when there is none. Both reads
    go through the fingerprint index: a folder of n items costs n of them, never a scan
    of a group's tasks per item."""
    newest = conn.execute(
        """SELECT t.plan_id, t.fanout_group, t.fanout_index FROM tasks t
           JOIN plans p ON p.id = t.plan_id
           WHERE t.fingerprint = ? AND p.owner IS NOT DISTINCT FROM ? ORDER BY t.id DESC LIMIT 1""",
        (fingerprint, owner),
    ).fetchone()
    if newest is None:
        return []
    return conn.execute(
        """SELECT * FROM tasks WHERE fingerprint = ? AND plan_id = ? AND fanout_group = ?
           AND fanout_index = ? ORDER BY id""",
        (fingerprint, newest["plan_id"], newest["fanout_group"], newest["fanout_index"]),
    ).fetchall()


# ---- the input hash cache -----------------------------------------------------------------


def cached_hashes(conn: sqlite3.Connection, paths: list[str]) -> dict[str, sqlite3.Row]:
    """The cache rows of these paths (one primary-key read each)."""
    found = {}
    for path in paths:
        row = conn.execute("SELECT * FROM input_hashes WHERE path = ?", (path,)).fetchone()
        if row is not None:
            found[path] = row
    return found


def remember_hashes(
    conn: sqlite3.Connection, rows: list[tuple[str, int, int, int, int, str]], now: float
) -> None:
    """Store (path, size, mtime_ns, ctime_ns, inode, sha256) rows, seen now; the oldest
    seen go past MAX_INPUT_HASHES."""
    conn.executemany(
        """INSERT INTO input_hashes (path, size, mtime_ns, ctime_ns, inode, sha256, seen_at)
           VALUES (?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns,
               ctime_ns = excluded.ctime_ns, inode = excluded.inode, sha256 = excluded.sha256,
               seen_at = excluded.seen_at""",
        [(*row, now) for row in rows],
    )
    (count,) = conn.execute("SELECT COUNT(*) FROM input_hashes").fetchone()
    if count > MAX_INPUT_HASHES:
        conn.execute(
            """DELETE FROM input_hashes WHERE path IN (SELECT path FROM input_hashes
               ORDER BY seen_at LIMIT ?)""",
            (count - MAX_INPUT_HASHES,),
        )


def touch_hashes(conn: sqlite3.Connection, paths: list[str], now: float) -> None:
    """Cache rows read again: seen now (kept the longest)."""
    conn.executemany(
        "UPDATE input_hashes SET seen_at = ? WHERE path = ?", [(now, p) for p in paths]
    )
