"""Retention: finished plans older than ``AIRIG_RETENTION_DAYS`` leave the store.

What goes: a plan every task of which is terminal (succeeded, failed, upstream-failed,
cancelled: a cancelled plan has no other kind) and whose last task finished before the
cutoff, with its result files, events, deps, tasks and rows of a ``goals`` table (when one
exists), the plan row last; and events that belong to no plan (alerts, the thermal guard)
older than the cutoff. Nothing else is touched: running plans, workers, tokens, alert
state, the verified-model inventory (not in this store) and any ``escalation*`` ledger.

Small transactions: each deletes at most ``BATCH`` rows (events, then deps, then tasks;
a plan that small goes in one), re-checks that the plan is still finished, and the pass
pauses between them, so a claim, which takes the same lock (``db.py``), waits at most one
short batch.

Files go before rows: a pass cut short (a crash, a stop) leaves a plan that is still
finished and still old, so the next pass completes it; rows first would leave result
files that nothing points at and no pass would find again.

The search index (``vectors.py``, a file of its own: no transaction spans it and the
store) follows the same order: a plan's entries go after its files and before its rows,
in transactions of at most ``vectors.DELETE_BATCH`` entries, none of them inside a store
transaction; those a task of another plan stands on (``reused_from``) stay. Then every
pass sweeps the index: entries older than the cutoff whose plan the store no longer
holds and on which no task stands go too. That sweep is what makes every commit point
safe: whatever a pass left (a crash between two batches, an index that could not be
written while the store's rows went, entries an older kit left behind, entries kept for
a reused task whose plan has gone since) the next pass finds and removes, and it never
touches a plan the store still holds. An index that cannot be written or read is one log
line per pass (``Pruned.index_error``); the store's retention goes on without it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from airig.brain.settings import BrainSettings
from airig.brain.store import dialect, vectors
from airig.brain.store.db import Database
from airig.brain.store.events import EventLog
from airig.brain.store.results import task_dir
from airig.common.protocol import TaskState as S

log = logging.getLogger("airig.brain.store.retention")

DAY_S = 86_400.0
BATCH = 500  # rows one transaction deletes, at most
SCAN = 50  # plans read per candidate query
IDS = 500  # plan ids one query of the sweep looks up (SQLite's variables: 32766 at most)
PAUSE_S = 0.001  # between transactions: waiting claims get the lock (Python locks are unfair)
SIZES_TTL_S = 60.0  # walking a large results volume is not for every dashboard poll
_TERMINAL = ", ".join(f"'{state}'" for state in sorted(S.TERMINAL))
# What a plan holds: its tasks, events and deps (by the plan index, the deps' key).
_ROWS = (
    "SELECT COUNT(*) FROM tasks WHERE plan_id = ?",
    "SELECT COUNT(*) FROM events WHERE plan_id = ?",
    "SELECT COUNT(*) FROM deps d JOIN tasks t ON t.id = d.task_id WHERE t.plan_id = ?",
)
_LIVE_TASK = f"SELECT 1 FROM tasks WHERE plan_id = ? AND state NOT IN ({_TERMINAL}) LIMIT 1"


@dataclass
class Pruned:
    """What one pass removed (or, dry, would remove)."""

    cutoff: float
    dry_run: bool
    plans: int = 0
    tasks: int = 0
    events: int = 0
    result_bytes: int = 0
    log_bytes: int = 0
    index_entries: int = 0  # search index entries (with their vectors)
    index_error: str | None = None  # why the index's were left for a later pass
    skipped: list[str] = field(default_factory=list)  # plans a foreign key kept

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finished_before(conn: sqlite3.Connection, plan_id: str, cutoff: float) -> bool:
    """No task is live and the last one finished before ``cutoff`` (no tasks: finished)."""
    if conn.execute(_LIVE_TASK, (plan_id,)).fetchone() is not None:
        return False
    last = conn.execute("SELECT MAX(finished_at) FROM tasks WHERE plan_id = ?", (plan_id,))
    finished = last.fetchone()[0]
    return finished is None or finished < cutoff


def candidates(db: Database, cutoff: float) -> list[str]:
    """Ids of the plans to remove, oldest first. A plan that finished before the cutoff
    was created before it: ``plans_created`` walks only those, ``SCAN`` per read."""
    found: list[str] = []
    after: tuple[float, str] = (float("-inf"), "")
    while True:
        with db.read() as conn:
            rows = conn.execute(
                """SELECT id, created_at FROM plans WHERE created_at < ?
                   AND (created_at, id) > (?, ?) ORDER BY created_at, id LIMIT ?""",
                (cutoff, *after, SCAN),
            ).fetchall()
            found += [r["id"] for r in rows if _finished_before(conn, r["id"], cutoff)]
        if len(rows) < SCAN:
            return found
        after = (rows[-1]["created_at"], rows[-1]["id"])
        time.sleep(PAUSE_S)


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path``; links are not followed."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def plan_results(results_dir: Path, plan_id: str) -> Path | None:
    """``<results>/<plan>`` through ``task_dir``'s check: no request text becomes a path."""
    try:
        return task_dir(results_dir, plan_id, "x").parent
    except ValueError:
        return None


def _goal_columns(conn: sqlite3.Connection) -> set[str]:
    """The columns of a ``goals`` table (the planner's), or none when there is none."""
    if dialect.is_pg(conn):  # no sqlite_master or PRAGMA: the catalog's view of it
        rows = conn.execute(
            """SELECT column_name FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'goals'"""
        )
        return {str(row[0]) for row in rows}
    table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'goals'"
    ).fetchone()
    if table is None:
        return set()
    return {row[1] for row in conn.execute("PRAGMA table_info(goals)")}


class PlanLive(Exception):
    """The plan is no longer finished (never expected: terminal states are final)."""


def _batch(db: Database, plan_id: str, delete: Callable[[sqlite3.Connection], int]) -> int:
    with db.tx() as conn:
        if conn.execute(_LIVE_TASK, (plan_id,)).fetchone() is not None:
            raise PlanLive(plan_id)
        removed = delete(conn)
    time.sleep(PAUSE_S)
    return removed


def _delete_events(conn: sqlite3.Connection, plan_id: str) -> int:
    return conn.execute(
        "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE plan_id = ? LIMIT ?)",
        (plan_id, BATCH),
    ).rowcount


def _delete_deps(conn: sqlite3.Connection, plan_id: str) -> int:
    """Deps of the plan's tasks (a task depends on tasks of its own plan only), by the
    table's key (PostgreSQL has no rowid)."""
    return conn.execute(
        """DELETE FROM deps WHERE (task_id, depends_on) IN (SELECT d.task_id, d.depends_on
           FROM deps d JOIN tasks t ON t.id = d.task_id WHERE t.plan_id = ? LIMIT ?)""",
        (plan_id, BATCH),
    ).rowcount


def _delete_tasks(conn: sqlite3.Connection, plan_id: str) -> int:
    """Tasks whose deps are gone (``_delete_deps`` first: foreign keys are on)."""
    return conn.execute(
        "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE plan_id = ? LIMIT ?)",
        (plan_id, BATCH),
    ).rowcount


def _delete_plan_row(conn: sqlite3.Connection, plan_id: str) -> int:
    columns = _goal_columns(conn)
    if "plan_id" in columns:  # a goal goes with its plan, or with its draft if it has no plan
        drafted = "OR (plan_id IS NULL AND drafting_plan_id = ?)"
        both = "drafting_plan_id" in columns
        conn.execute(
            f"DELETE FROM goals WHERE plan_id = ? {drafted if both else ''}",
            (plan_id, plan_id) if both else (plan_id,),
        )
    return conn.execute("DELETE FROM plans WHERE id = ?", (plan_id,)).rowcount


def _stood_on(conn: sqlite3.Connection, plan_id: str) -> set[str]:
    """Keys of the plan's tasks that a task of another plan was reused from: that task's
    search entries are these (``plans/reuse.py``), so they stay while it does. A range
    of ``reused_from`` ("<plan>/<key>"; '0' follows '/')."""
    rows = conn.execute(
        """SELECT DISTINCT reused_from FROM tasks
           WHERE reused_from >= ? AND reused_from < ? AND plan_id != ?""",
        (f"{plan_id}/", f"{plan_id}0", plan_id),
    )
    return {str(row[0])[len(plan_id) + 1 :] for row in rows}


def _in_index(into: Pruned, step: Callable[[], int]) -> None:
    """One step on the search index, unless the index failed earlier in this pass: a
    failure is kept for the pass's one log line, and the store's retention goes on."""
    if into.index_error is not None:
        return
    try:
        into.index_entries += step()
    except vectors.IndexUnavailable as exc:
        into.index_error = str(exc)


def drop_entries(db: Database, index: Path, plan_id: str, cutoff: float) -> int:
    """The plan's search index entries, but those a task of another plan stands on."""
    if not vectors.task_keys(index, plan_id):
        return 0
    with db.read() as conn:
        keep = _stood_on(conn, plan_id)
    return vectors.remove_entries(index, plan_id, cutoff, keep)


def sweep_index(
    db: Database, index: Path, cutoff: float, going: Collection[str] = (), dry_run: bool = False,
) -> int:  # fmt: skip
    """Entries created before ``cutoff`` of plans the store no longer holds (and, for a dry
    pass, of the plans it would remove: ``going``), but those a task still in the store
    (not ``going``) stands on. Reads of the store on read connections: no store writer is
    held. Returns how many entries went (dry: would)."""
    found = vectors.plans_with_entries(index)
    if not found:
        return 0
    held = sorted(found - set(going))
    for start in range(0, len(held), IDS):
        chunk = held[start : start + IDS]
        with db.read() as conn:
            rows = conn.execute(
                f"SELECT id FROM plans WHERE id IN ({', '.join('?' * len(chunk))})", chunk
            ).fetchall()
        found -= {row[0] for row in rows}
    if not found:
        return 0
    stood: dict[str, set[str]] = {}
    with db.read() as conn:  # one pass over tasks: reused ones are few, orphans may be many
        for row in conn.execute(
            "SELECT DISTINCT plan_id, reused_from FROM tasks WHERE reused_from IS NOT NULL"
        ):
            if row[0] not in going:
                origin, _, key = str(row[1]).partition("/")
                stood.setdefault(origin, set()).add(key)
    return sum(
        vectors.remove_entries(index, plan_id, cutoff, stood.get(plan_id, ()), dry_run)
        for plan_id in sorted(found)
    )


def remove_plan(
    db: Database, results_dir: Path, plan_id: str, into: Pruned, index: Path | None = None,
    cutoff: float = float("inf"),
) -> None:  # fmt: skip
    """Delete one finished plan in small transactions, counting into ``into``: its files,
    its entries in the search ``index`` (entries created before ``cutoff``), its rows."""
    with db.read() as conn:
        if conn.execute(_LIVE_TASK, (plan_id,)).fetchone() is not None:
            raise PlanLive(plan_id)
    folder = plan_results(results_dir, plan_id)
    if folder is not None and folder.is_dir():
        into.result_bytes += tree_bytes(folder)
        shutil.rmtree(folder, ignore_errors=True)
    if index is not None:
        _in_index(into, lambda: drop_entries(db, index, plan_id, cutoff))
    with db.read() as conn:
        rows = sum(conn.execute(sql, (plan_id,)).fetchone()[0] for sql in _ROWS)
    if rows <= BATCH:  # most plans: one transaction, the plan row with the rest
        counted: list[int] = []
        into.plans += _batch(db, plan_id, lambda conn: _delete_small(conn, plan_id, counted))
        into.events += counted[0]
        into.tasks += counted[1]
        return
    while (n := _batch(db, plan_id, lambda conn: _delete_events(conn, plan_id))) == BATCH:
        into.events += n
    into.events += n
    while _batch(db, plan_id, lambda conn: _delete_deps(conn, plan_id)) == BATCH:
        pass
    while (n := _batch(db, plan_id, lambda conn: _delete_tasks(conn, plan_id))) == BATCH:
        into.tasks += n
    into.tasks += n
    into.plans += _batch(db, plan_id, lambda conn: _delete_plan_row(conn, plan_id))


def _delete_small(conn: sqlite3.Connection, plan_id: str, counted: list[int]) -> int:
    """A whole plan of at most BATCH rows; (events, tasks) into ``counted``."""
    events = _delete_events(conn, plan_id)
    _delete_deps(conn, plan_id)
    tasks = _delete_tasks(conn, plan_id)
    plans = _delete_plan_row(conn, plan_id)
    counted[:] = [events, tasks]
    return plans


def count_plan(db: Database, results_dir: Path, plan_id: str, into: Pruned) -> None:
    """What ``remove_plan`` would remove, removing nothing."""
    with db.read() as conn:
        into.tasks += conn.execute(
            "SELECT COUNT(*) FROM tasks WHERE plan_id = ?", (plan_id,)
        ).fetchone()[0]
        into.events += conn.execute(
            "SELECT COUNT(*) FROM events WHERE plan_id = ?", (plan_id,)
        ).fetchone()[0]
    folder = plan_results(results_dir, plan_id)
    if folder is not None and folder.is_dir():
        into.result_bytes += tree_bytes(folder)
    into.plans += 1


def loose_events(db: Database, cutoff: float, into: Pruned) -> None:
    """Events of no plan (alerts, thermal guard) older than the cutoff."""
    if into.dry_run:
        with db.read() as conn:
            into.events += conn.execute(
                "SELECT COUNT(*) FROM events WHERE plan_id IS NULL AND ts < ?", (cutoff,)
            ).fetchone()[0]
        return
    while True:
        with db.tx() as conn:
            n = conn.execute(
                """DELETE FROM events WHERE id IN (SELECT id FROM events
                   WHERE plan_id IS NULL AND ts < ? LIMIT ?)""",
                (cutoff, BATCH),
            ).rowcount
        into.events += n
        if n < BATCH:
            return
        time.sleep(PAUSE_S)


def prune(
    db: Database, results_dir: Path, cutoff: float, dry_run: bool = False,
    index: Path | None = None,
) -> Pruned:  # fmt: skip
    """One pass over the store: every finished plan whose last task ended before
    ``cutoff``, and loose events older than it; then the search ``index``'s entries of
    plans no longer in the store (``sweep_index``)."""
    done = Pruned(cutoff=cutoff, dry_run=dry_run)
    going = candidates(db, cutoff)
    for plan_id in going:
        if dry_run:
            count_plan(db, results_dir, plan_id, done)
            continue
        try:
            remove_plan(db, results_dir, plan_id, done, index, cutoff)
        except PlanLive:
            continue
        except sqlite3.IntegrityError as exc:  # a table of another module still names it
            log.warning("plan %s kept: %s", plan_id, exc)
            done.skipped.append(plan_id)
    loose_events(db, cutoff, done)
    if index is not None:
        # a dry pass removed nothing: the plans it would remove count as gone
        gone = set(going) if dry_run else set()
        _in_index(done, lambda: sweep_index(db, index, cutoff, gone, dry_run))
        if done.index_error is not None:
            log.warning(
                "retention: search index entries of removed plans stay for a later pass: %s",
                done.index_error,
            )
    return done


@dataclass
class StoreSizes:
    """Bytes on disk of the brain's store."""

    db_bytes: int
    wal_bytes: int
    results_bytes: int
    logs: dict[str, int]
    measured_at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Retention:
    """The brain's retention: the periodic pass, the on-demand prune, the store's size."""

    def __init__(self, db: Database, settings: BrainSettings, events: EventLog) -> None:
        self.db = db
        self.settings = settings
        self.events = events
        self._lock = threading.Lock()  # one pass at a time (the timer and the admin route)
        self._sizes: StoreSizes | None = None
        self._sizes_lock = threading.Lock()
        self.last: Pruned | None = None
        # (plans, tasks, events, result bytes) of each pass, to /metrics (metrics.py)
        self.on_pruned: Callable[[int, int, int, int], None] | None = None

    @property
    def max_age_s(self) -> float:
        return self.settings.retention_days * DAY_S

    def run(self, older_than_s: float | None = None, dry_run: bool = False,
            now: float | None = None) -> Pruned:  # fmt: skip
        """Remove (or count) what is older than ``older_than_s`` (default: the retention)."""
        now = time.time() if now is None else now
        age = self.max_age_s if older_than_s is None else older_than_s
        index = vectors.index_path(self.settings.data_dir)
        with self._lock:
            done = prune(self.db, self.settings.results_dir, now - age, dry_run, index)
            if not dry_run:
                done.log_bytes = self.events.expire(now - age, now)
                self.last = done
                self._sizes = None  # measured again on the next read
                if self.on_pruned:
                    self.on_pruned(done.plans, done.tasks, done.events, done.result_bytes)
        if done.plans or done.events or done.index_entries:  # index_error: its own line
            log.info("retention: %s", {k: v for k, v in done.as_dict().items()
                                       if k != "index_error"})  # fmt: skip
        return done

    def tick(self) -> None:
        """The periodic pass: nothing while AIRIG_RETENTION_DAYS is 0 (keep forever)."""
        if self.settings.retention_days > 0:
            self.run()

    def sizes(self, fresh: bool = False) -> StoreSizes:
        with self._sizes_lock:
            known = self._sizes
            if fresh or known is None or time.time() - known.measured_at > SIZES_TTL_S:
                db_bytes, wal_bytes = self.db.file_bytes()
                known = self._sizes = StoreSizes(
                    db_bytes=db_bytes,
                    wal_bytes=wal_bytes,
                    results_bytes=tree_bytes(self.settings.results_dir),
                    logs=self.events.sizes(),
                    measured_at=time.time(),
                )
            return known
