"""Unchanged fan-out items are not run again (PLANS.md, "Fan-out", "Unchanged items").

Each item of a ``glob`` group gets a fingerprint at submission: the sha256 of its input
file's content and of its rendered template tasks (type, model, payload after
``{{ item }}``; the item's task keys written back as the template ids, so an item whose
index moved, a file added before it, keeps its fingerprint). When the newest earlier item
of that fingerprint, in a plan of the same owner, fully succeeded and what it left is still
there, the item's tasks are stored SUCCEEDED with that run's outputs (its results files
linked under the new plan), ``reused_from`` naming the task that ran, and no worker is
offered them. What must still be there: each file on the data volume the item's tasks
wrote, with the size and mtime it had when its task succeeded (``store/reuse.py``: not
deleted, not rewritten by a later run of another recipe), the search index entries of its
embed tasks, and its results files. Else the item runs. ``rerun`` (the plan's field,
``submit --rerun``) runs every item, and records their fingerprints for the next time.

Not fingerprinted, so always run: items of ``items`` and ``from`` groups (no file to
hash), of a group that waits for another task (its items may read that task's output), of
a template holding a ``shell`` or ``plan`` task (their effects are not in their output),
and an input that cannot be read now (it fails when it runs, as before).

The input's sha256 is cached by (path, size, mtime_ns, ctime_ns, inode), so an unchanged
file is not read again. A file replaced (a new inode) or rewritten in place, even with its
mtime set back (the ctime moves, and no user can set it), misses the cache. A file whose
times are less than RACY_NS old is hashed but not cached, as git treats a "racily clean"
index entry: a rewrite within the filesystem clock's tick could leave its times equal.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airig.brain.plans.models import PlanSpec, TaskSpec
from airig.brain.store import fanout, results, states, vectors
from airig.brain.store import reuse as store
from airig.brain.store.db import Database
from airig.brain.store.events import Outbox, record
from airig.common.protocol import TaskState as S
from airig.common.task_types import names_where

NEVER_REUSED = frozenset(names_where(reusable=False))  # shell, plan
RACY_NS = 2_000_000_000
CHUNK = 1 << 20
VERSION = "airig-item-1"  # a new way of fingerprinting: a new version, no false match


@dataclass(frozen=True)
class Carried:
    """What a reused task is stored with, from the task that ran."""

    origin: str  # "<plan>/<key>" of the task that ran
    output_json: str | None
    output_file: str | None
    files: list[str]
    written_json: str | None
    result_hash: str | None
    tainted: int

    @property
    def origin_plan(self) -> str:
        return self.origin.partition("/")[0]

    def columns(self) -> tuple[Any, ...]:
        """``reused_from`` to ``tainted_output`` of ``store/plans.py`` TASK_COLUMNS."""
        reason = f"unchanged since plan {self.origin_plan}: not run again"
        files = json.dumps(self.files)
        return (self.origin, reason, self.output_json, self.output_file, files,
                self.written_json, self.result_hash, self.tainted)  # fmt: skip


@dataclass
class Reuse:
    """A plan's glob items: their fingerprints (by item task key) and the tasks of the
    unchanged ones, with how many items of each group came from which plan."""

    fingerprints: dict[str, str] = field(default_factory=dict)
    carried: dict[str, Carried] = field(default_factory=dict)
    groups: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass
class _Item:
    group: str
    index: int
    path: str
    specs: list[TaskSpec]
    fingerprint: str = ""

    @property
    def prefix(self) -> str:
        return fanout.output_key(self.group, self.index, "")

    def local(self, key: str) -> str:
        return key.removeprefix(self.prefix)


@dataclass
class _Kept:
    local: str
    row: sqlite3.Row
    origin: str
    needs_index: tuple[str, str, str] | None


# ---- fingerprints --------------------------------------------------------------------


def _items(plan: PlanSpec) -> list[_Item]:
    """The items of the plan's groups that may be reused, each with its tasks."""
    groups: dict[str, dict[int, dict[str, Any]]] = {}
    for spec in plan.tasks:
        if spec.type != fanout.GROUP_TYPE:
            continue
        source, template = spec.payload.get("for_each") or {}, spec.payload.get("tasks") or []
        # a zim group's items are files too: its entries, extracted by content (plans/zim.py)
        if not {"glob", "zim"} & set(source) or spec.payload.get("depends_on"):
            continue
        if any(isinstance(t, dict) and t.get("type") in NEVER_REUSED for t in template):
            continue
        values = spec.payload.get("items") or []
        groups[spec.id] = {int(v["index"]): v for v in values if isinstance(v, dict)}
    found: dict[tuple[str, int], _Item] = {}
    for spec in plan.tasks:
        member = plan.members.get(spec.id)
        if member is None or member[0] not in groups:
            continue
        value = groups[member[0]].get(member[1]) or {}
        if isinstance(value.get("path"), str):
            item = found.setdefault(member, _Item(member[0], member[1], value["path"], []))
            item.specs.append(spec)
    return list(found.values())


def _localised(value: Any, item: _Item) -> Any:
    """``value`` with every ``{{ tasks.<item task key>.output }}`` back to the template id."""
    if isinstance(value, str):

        def swap(match: Any) -> str:
            text, base = match.group(0), match.start(0)
            start, end = match.span(1)
            return text[: start - base] + item.local(match.group(1)) + text[end - base :]

        return results.TEMPLATE.sub(swap, value)
    if isinstance(value, dict):
        return {k: _localised(v, item) for k, v in value.items()}
    if isinstance(value, list):
        return [_localised(v, item) for v in value]
    return value


def recipe_hash(item: _Item) -> str:
    """The item's template tasks as rendered for it: what its run did, but for the input."""
    tasks = sorted(
        ({"id": item.local(spec.id), "type": spec.type, "model": spec.model,
          "payload": _localised(spec.payload, item),
          "depends_on": sorted(item.local(d) for d in spec.depends_on)}
         for spec in item.specs),
        key=lambda task: str(task["id"]),
    )  # fmt: skip
    return hashlib.sha256(results.canonical_json(tasks).encode()).hexdigest()


def _stat_key(found: os.stat_result) -> tuple[int, int, int, int]:
    return (found.st_size, found.st_mtime_ns, found.st_ctime_ns, found.st_ino)


def input_sha256(
    data_dir: Path, relative: str, cached: sqlite3.Row | None, now_ns: int
) -> tuple[str, tuple[int, int, int, int] | None, bool] | None:
    """(sha256, the stat key to cache or None, whether the cache answered), or None for a
    file that is gone, not a regular file, outside the volume, or changed while read."""
    root = data_dir.resolve()
    try:
        real = (root / relative).resolve()
        if not real.is_relative_to(root):
            return None
        # O_NONBLOCK: a FIFO put in the file's place since the glob must not hang the submit
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except (OSError, ValueError):
        return None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return None
        key = _stat_key(before)
        if (
            cached is not None
            and (cached["size"], cached["mtime_ns"], cached["ctime_ns"], cached["inode"]) == key
        ):
            return str(cached["sha256"]), key, True
        digest = file_sha256(fd)
        if _stat_key(os.fstat(fd)) != key:
            return None
    except OSError:
        return None
    finally:
        os.close(fd)
    racy = now_ns - max(before.st_mtime_ns, before.st_ctime_ns) < RACY_NS
    return digest, (None if racy else key), False


def file_sha256(fd: int) -> str:
    """The sha256 of an open file, read in chunks: a video of gigabytes is never in memory."""
    digest = hashlib.sha256()
    while chunk := os.read(fd, CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _input_hashes(db: Database, data_dir: Path, paths: list[str]) -> dict[str, str]:
    """Each readable input's sha256: from the cache when its stat is unchanged, else read
    (outside any transaction), and the cache brought up to date."""
    with db.read() as conn:
        cached = store.cached_hashes(conn, paths)
    hashes: dict[str, str] = {}
    fresh: list[tuple[str, int, int, int, int, str]] = []
    seen: list[str] = []
    now_ns = time.time_ns()
    for path in paths:
        found = input_sha256(data_dir, path, cached.get(path), now_ns)
        if found is None:
            continue
        digest, key, hit = found
        hashes[path] = digest
        if hit:
            seen.append(path)
        elif key is not None:
            fresh.append((path, *key, digest))
    if fresh or seen:
        with db.tx(durable=False) as conn:  # a cache: losing it to a power cut costs a read
            store.remember_hashes(conn, fresh, now_ns / 1e9)
            store.touch_hashes(conn, seen, now_ns / 1e9)
    return hashes


# ---- what an earlier run left ----------------------------------------------------------


def _candidate(item: _Item, rows: list[sqlite3.Row]) -> list[sqlite3.Row] | None:
    """The earlier item's rows when every one of its tasks succeeded and they are this
    item's template tasks; None otherwise (it failed, runs, or had another template)."""
    if not rows:
        return None
    prefix = fanout.output_key(rows[0]["fanout_group"], rows[0]["fanout_index"], "")
    theirs = sorted(str(row["key"]).removeprefix(prefix) for row in rows)
    ours = sorted(item.local(spec.id) for spec in item.specs)
    if theirs != ours or any(row["state"] != S.SUCCEEDED for row in rows):
        return None
    return rows


def _kept(rows: list[sqlite3.Row], data_dir: Path, results_dir: Path) -> list[_Kept] | None:
    """Each task of the earlier item, when the files it wrote on the data volume are as
    it left them; None when one is not."""
    prefix = fanout.output_key(rows[0]["fanout_group"], rows[0]["fanout_index"], "")
    kept = []
    for row in rows:
        try:
            output = results.load_output(results_dir, row["output_json"], row["output_file"])
        except (OSError, ValueError):
            return None
        wrote = store.written_paths(row["type"], output)
        if not store.unchanged(data_dir, row["written_json"], wrote):
            return None
        origin = row["reused_from"] or f"{row['plan_id']}/{row['key']}"
        needs = None
        if row["type"] == "embed" and isinstance(output, dict) and output.get("documents"):
            name = json.loads(row["payload_json"]).get("index")
            if isinstance(name, str):
                plan_id, _, key = origin.partition("/")
                needs = (name, plan_id, key)
        kept.append(_Kept(str(row["key"]).removeprefix(prefix), row, origin, needs))
    return kept


def _link(results_dir: Path, relative: str, plan_id: str, key: str, made: list[Path]) -> str:
    """A results file of the earlier task under the new task's folder (a hard link: no copy
    of its bytes, and it outlives the earlier plan's pruning); its relative path."""
    root = results_dir.resolve()
    source = (root / relative).resolve()
    if not source.is_relative_to(root) or not source.is_file():
        raise FileNotFoundError(relative)
    target = results.task_dir(root, plan_id, key) / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another filesystem, or links not allowed: a copy
        shutil.copyfile(source, target)
    made.append(target)
    return str(target.relative_to(root))


def _carry(
    item: _Item, kept: list[_Kept], results_dir: Path, plan_id: str
) -> dict[str, Carried] | None:
    made: list[Path] = []
    carried = {}
    try:
        for task in kept:
            key, row = item.prefix + task.local, task.row
            output_file = row["output_file"] and _link(
                results_dir, row["output_file"], plan_id, key, made
            )
            files = [_link(results_dir, name, plan_id, key, made)
                     for name in json.loads(row["files_json"])]  # fmt: skip
            carried[key] = Carried(
                task.origin, row["output_json"], output_file or None, files,
                row["written_json"], row["result_hash"], int(row["tainted_output"]),
            )  # fmt: skip
    except (OSError, ValueError):
        for path in made:
            path.unlink(missing_ok=True)
        return None
    return carried


def plan_reuse(
    db: Database, plan: PlanSpec, *, data_dir: Path, results_dir: Path, owner: str | None,
    plan_id: str, rerun: bool = False,
) -> Reuse:  # fmt: skip
    """The fingerprints of the plan's glob items and, unless ``rerun``, the tasks of those
    an earlier run left intact. Reads the data volume and the store, links results files
    under ``plan_id``; call it before the plan's transaction (``discard`` if the plan is
    not stored)."""
    reuse = Reuse()
    items = _items(plan)
    if not items:
        return reuse
    hashes = _input_hashes(db, data_dir, sorted({item.path for item in items}))
    for item in items:
        digest = hashes.get(item.path)
        if digest is None:
            continue
        joined = results.canonical_json([VERSION, digest, recipe_hash(item)])
        item.fingerprint = hashlib.sha256(joined.encode()).hexdigest()
        reuse.fingerprints.update(dict.fromkeys((s.id for s in item.specs), item.fingerprint))
    if rerun:
        return reuse
    chosen = []
    with db.read() as conn:
        for item in items:
            if item.fingerprint:
                rows = _candidate(item, store.newest_item(conn, item.fingerprint, owner))
                if rows is not None:
                    chosen.append((item, rows))
    checked = [(item, kept) for item, rows in chosen
               if (kept := _kept(rows, data_dir, results_dir)) is not None]  # fmt: skip
    wanted = sorted({task.needs_index for _, kept in checked for task in kept if task.needs_index})
    try:
        indexed = vectors.tasks_with_entries(vectors.index_path(data_dir), wanted)
    except vectors.IndexUnavailable:
        indexed = set()
    for item, kept in checked:
        if any(task.needs_index and task.needs_index not in indexed for task in kept):
            continue
        carried = _carry(item, kept, results_dir, plan_id)
        if carried is None:
            continue
        reuse.carried.update(carried)
        sources = reuse.groups.setdefault(item.group, {})
        origin = next(iter(carried.values())).origin_plan
        sources[origin] = sources.get(origin, 0) + 1
    return reuse


def discard(results_dir: Path, plan_id: str) -> None:
    """The files ``plan_reuse`` linked for a plan that was not stored."""
    try:
        folder = results.task_dir(results_dir, plan_id, "x").parent
    except ValueError:
        return
    shutil.rmtree(folder, ignore_errors=True)


def settle(
    conn: sqlite3.Connection, outbox: Outbox, plan_id: str, reuse: Reuse, now: float
) -> None:
    """In the plan's transaction, after its insert: an ``items_reused`` event on each group
    with reused items, and a group all of whose items were reused ends now, its dependents
    released (a CSV over all items then runs on the carried outputs)."""
    for key, sources in reuse.groups.items():
        group = fanout.task_by_key(conn, plan_id, key)
        if group is None:
            continue
        record(conn, outbox, "items_reused", group, now, items=sum(sources.values()),
               reused_from=sources)  # fmt: skip
        if not fanout.has_unfinished_items(conn, plan_id, key):
            states.finish_group(conn, outbox, group, now)
