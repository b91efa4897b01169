"""Fan-out groups as stored (``plans/fanout.py`` expands them): their items' progress,
whether a group has ended, and its output, read from its item tasks.

A group is a task row of type ``group``: its payload holds the definition (template,
``output`` id, the items once known), its items are ordinary tasks whose
``fanout_group`` / ``fanout_index`` name it. Its output is never stored: it is read from
the items' output tasks, as they are stored (a large one in its file), whenever a
dependent's template or ``GET …/result`` asks for it. Its size is measured from the
stored sizes (``describe``), never by building it: 120 items of 1 MB made 430 MB to
measure; ``GET …/result`` writes it item by item (``result_chunks``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from airig.brain.store import dialect, results
from airig.common.protocol import TaskState as S

GROUP_TYPE = "group"
SEPARATOR = "__"
_UNFINISHED = tuple(sorted(set(S.ALL) - S.TERMINAL))
_STARTED = {S.LEASED, S.RUNNING, S.SUCCEEDED, S.ESCALATED, S.RETRY_WAIT}


def definition(group: sqlite3.Row) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(group["payload_json"])
    return value


def group_of(conn: sqlite3.Connection, task: sqlite3.Row) -> sqlite3.Row | None:
    """The group row an item task belongs to, or None."""
    if task["fanout_group"] is None:
        return None
    # PostgreSQL: locked, so two items ending at once in two brains end their group once
    # (the second reads the items after the first's commit: states._item_ended)
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM tasks WHERE plan_id = ? AND key = ? AND type = ?" + dialect.for_update(conn),
        (task["plan_id"], task["fanout_group"], GROUP_TYPE),
    ).fetchone()
    return row


def dead_upstream(conn: sqlite3.Connection, group: sqlite3.Row) -> sqlite3.Row | None:
    """A task the group waits for that ended without succeeding, or None."""
    row: sqlite3.Row | None = conn.execute(
        """SELECT u.* FROM deps d JOIN tasks u ON u.id = d.depends_on
           WHERE d.task_id = ? AND u.state IN ('FAILED', 'UPSTREAM_FAILED', 'CANCELLED')
           ORDER BY u.id LIMIT 1""",
        (group["id"],),
    ).fetchone()
    return row


def has_unfinished_items(conn: sqlite3.Connection, plan_id: str, group_key: str) -> bool:
    """Whether any task of the group's items has not ended (an index range, not a scan)."""
    marks = ", ".join("?" for _ in _UNFINISHED)
    row = conn.execute(
        f"""SELECT 1 FROM tasks WHERE plan_id = ? AND fanout_group = ? AND state IN ({marks})
            LIMIT 1""",
        (plan_id, group_key, *_UNFINISHED),
    ).fetchone()
    return row is not None


def item_tasks(conn: sqlite3.Connection, plan_id: str, group_key: str) -> list[sqlite3.Row]:
    """The group's item tasks (no outputs), by item then id."""
    return conn.execute(
        """SELECT id, key, fanout_index, state, error, trusted, tainted_output, reused_from
           FROM tasks WHERE plan_id = ? AND fanout_group = ? ORDER BY fanout_index, id""",
        (plan_id, group_key),
    ).fetchall()


def output_key(group_key: str, index: int, output: str) -> str:
    return f"{group_key}{SEPARATOR}{index}{SEPARATOR}{output}"


def _item_state(states: list[str]) -> str:
    if all(state == S.SUCCEEDED for state in states):
        return "succeeded"
    if all(state in S.TERMINAL for state in states):
        return "failed"
    return "running" if any(state in _STARTED for state in states) else "pending"


def reused_plan(tasks: list[sqlite3.Row]) -> str | None:
    """The plan whose run of this item was reused (its tasks name the task that ran,
    ``<plan>/<key>``), or None: it ran in this plan."""
    origin = next((t["reused_from"] for t in tasks if t["reused_from"]), None)
    return str(origin).partition("/")[0] if origin else None


def items(group: sqlite3.Row, rows: list[sqlite3.Row]) -> list[dict[str, Any]]:
    """Each item: index, its values, state (pending|running|succeeded|failed), first error,
    its output task's key, and the plan it was reused from (None: it runs here)."""
    spec = definition(group)
    values = spec.get("items") or []
    by_index: dict[int, list[sqlite3.Row]] = {}
    for row in rows:
        by_index.setdefault(row["fanout_index"], []).append(row)
    out = []
    for index in sorted(by_index):
        tasks = by_index[index]
        errors = [t["error"] for t in tasks if t["error"] and t["state"] != S.SUCCEEDED]
        out.append({
            "index": index,
            "item": values[index] if index < len(values) else {"index": index},
            "state": _item_state([t["state"] for t in tasks]),
            "error": errors[0] if errors else None,
            "output_key": output_key(group["key"], index, str(spec.get("output"))),
            "reused_from": reused_plan(tasks),
        })  # fmt: skip
    return out


def label(item: dict[str, Any]) -> str:
    for name in ("name", "value", "path", "id", "title"):
        value = item.get(name)
        if value not in (None, ""):
            return str(value)[:200]
    return str(item.get("index"))


def ending(group: sqlite3.Row, rows: list[sqlite3.Row]) -> tuple[int, int, bool, str | None]:
    """(items, items that fully succeeded, any output tainted, the first item error)."""
    listed = items(group, rows)
    outputs = {item["output_key"] for item in listed}
    tainted = any(r["tainted_output"] or not r["trusted"] for r in rows if r["key"] in outputs)
    ok = sum(item["state"] == "succeeded" for item in listed)
    first = next((f"item {i['index']}: {i['error']}" for i in listed if i["error"]), None)
    return len(listed), ok, tainted, first


@dataclass
class Entry:
    """One item of a group's output as its canonical JSON will read, without the item's
    output: ``head`` + the output's stored text (``null`` when none) + ``tail``. The
    stored text is the output's canonical JSON already (``results.store_output``), so
    the entry's size is known from the store without loading anything."""

    head: str
    tail: str
    task_id: int | None  # the item's output task, None: its output is null
    output_file: str | None
    size: int  # bytes of the output's stored text

    @property
    def json_bytes(self) -> int:
        return len(self.head) + self.size + len(self.tail)


@dataclass
class GroupOutput:
    """A group's output, described from the store: its entries and counts."""

    entries: list[Entry]
    succeeded: int

    @property
    def head(self) -> str:
        return f'{{"failed":{len(self.entries) - self.succeeded},"items":['

    @property
    def tail(self) -> str:
        return f'],"succeeded":{self.succeeded},"total":{len(self.entries)}}}'

    @property
    def items_bytes(self) -> int:
        """Bytes of the ``items`` list's canonical JSON."""
        return 2 + sum(e.json_bytes for e in self.entries) + max(len(self.entries) - 1, 0)

    @property
    def json_bytes(self) -> int:
        """Bytes of the whole output's canonical JSON (``group_output``, as
        ``results.canonical_json`` writes it), ASCII: characters are bytes."""
        return len(self.head) + self.items_bytes - 2 + len(self.tail)


def describe(conn: sqlite3.Connection, results_dir: Path, group: sqlite3.Row) -> GroupOutput:
    """The group's output from its items' rows and their outputs' stored sizes (a large
    output's file size): nothing loaded. OSError when an output's file is gone."""
    listed = items(group, item_tasks(conn, group["plan_id"], group["key"]))
    stored = {
        row["key"]: row
        for row in conn.execute(
            """SELECT id, key, length(output_json) AS n, output_file FROM tasks
               WHERE plan_id = ? AND fanout_group = ? AND state = 'SUCCEEDED'""",
            (group["plan_id"], group["key"]),
        )
    }
    entries, ok = [], 0
    for item in listed:
        state = item["state"] if item["state"] in ("succeeded", "failed") else "failed"
        ok += state == "succeeded"
        head = results.canonical_json(
            {"error": item["error"], "index": item["index"], "item": item["item"]}
        )  # the keys sort before "output", and "state" after it
        entry = Entry(head[:-1] + ',"output":', f',"state":"{state}"}}', None, None, 4)
        row = stored.get(item["output_key"]) if state == "succeeded" else None
        if row is not None:
            entry.task_id, entry.output_file = int(row["id"]), row["output_file"]
            if row["n"] is not None:  # canonical JSON is ASCII: characters are bytes
                entry.size = int(row["n"])
            elif row["output_file"]:
                entry.size = (results_dir / row["output_file"]).stat().st_size
            else:
                entry.size = 2  # no output stored: {}
        entries.append(entry)
    return GroupOutput(entries, ok)


def _stored_text(conn: sqlite3.Connection, results_dir: Path, entry: Entry) -> str:
    if entry.task_id is None:
        return "null"
    row = conn.execute(
        "SELECT output_json, output_file FROM tasks WHERE id = ?", (entry.task_id,)
    ).fetchone()
    if row is None:
        return "null"
    if row["output_json"] is not None:
        return str(row["output_json"])
    if row["output_file"]:
        return (results_dir / row["output_file"]).read_text(encoding="utf-8")
    return "{}"


def group_output(
    conn: sqlite3.Connection, results_dir: Path, group: sqlite3.Row, max_bytes: int | None = None
) -> dict:
    """The group's output, from its items' output tasks as they are stored. With
    ``max_bytes``, outputs stop being loaded once those loaded pass it: the rest are
    null and ``outputs_omitted`` counts them (a handoff shows a few KB of it)."""
    described = describe(conn, results_dir, group)
    out, loaded, omitted = [], 0, 0
    for entry in described.entries:
        text = "null"
        if max_bytes is not None and loaded >= max_bytes and entry.task_id is not None:
            omitted += 1
        else:
            text = _stored_text(conn, results_dir, entry)
            loaded += len(text)
        out.append(json.loads(entry.head + text + entry.tail))
    ok = described.succeeded
    whole = {"items": out, "total": len(out), "succeeded": ok, "failed": len(out) - ok}
    return {**whole, "outputs_omitted": omitted} if omitted else whole


def load_output(
    conn: sqlite3.Connection, results_dir: Path, row: sqlite3.Row, max_bytes: int | None = None
) -> dict:
    """Any task's output: a group's read from its items (``max_bytes``: see
    ``group_output``), another's as stored."""
    if row["type"] == GROUP_TYPE:
        return group_output(conn, results_dir, row, max_bytes)
    return results.load_output(results_dir, row["output_json"], row["output_file"])


def group_output_bytes(conn: sqlite3.Connection, results_dir: Path, group: sqlite3.Row) -> int:
    """Bytes of the group's output as JSON, from the stored sizes (nothing loaded)."""
    return describe(conn, results_dir, group).json_bytes


# What one read of a result file hands an answer at most.
CHUNK = 256 * 1024


def _file_chunks(handle: BinaryIO) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def result_chunks(
    reader: Callable[[], AbstractContextManager[sqlite3.Connection]], results_dir: Path,
    row: sqlite3.Row,
) -> Iterator[bytes]:  # fmt: skip
    """``GET …/result``'s answer, ``{"output": …, "files": […]}``, written piece by piece
    from the stored texts: a group's items one at a time (each from its own read, so no
    transaction stays open while the client reads), a large output from its file in
    chunks. Nothing is parsed; what it holds at once is one inline output or one chunk.
    What can fail is read before the first piece (a task's file gone: OSError, the
    answer not begun); an item's file gone in the meantime reads ``null``."""
    described, handle = None, None
    if row["type"] == GROUP_TYPE:
        with reader() as conn:
            described = describe(conn, results_dir, row)
    elif row["output_json"] is None and row["output_file"]:
        handle = (results_dir / row["output_file"]).open("rb")
    yield b'{"output":'
    if described is not None:
        yield described.head.encode()
        for n, entry in enumerate(described.entries):
            yield (("," if n else "") + entry.head).encode()
            if entry.output_file:
                try:
                    item_file = (results_dir / entry.output_file).open("rb")
                except OSError:
                    item_file = None
                yield from _file_chunks(item_file) if item_file else iter([b"null"])
            else:
                with reader() as conn:
                    text = _stored_text(conn, results_dir, entry)
                yield text.encode()
            yield entry.tail.encode()
        yield described.tail.encode()
    elif handle is not None:
        yield from _file_chunks(handle)
    else:
        yield b"{}" if row["output_json"] is None else str(row["output_json"]).encode()
    yield f',"files":{results.canonical_json(json.loads(row["files_json"]))}}}'.encode()


def plan_fanouts(conn: sqlite3.Connection, plan_id: str) -> list[dict[str, Any]]:
    """Each group of a plan with its items' progress, for the plan view."""
    groups = conn.execute(
        "SELECT * FROM tasks WHERE plan_id = ? AND type = ? ORDER BY id", (plan_id, GROUP_TYPE)
    ).fetchall()
    views = []
    for group in groups:
        listed = items(group, item_tasks(conn, plan_id, group["key"]))
        count = {s: 0 for s in ("pending", "running", "succeeded", "failed")}
        sources: dict[str, int] = {}
        for item in listed:
            count[item["state"]] += 1
            if item["reused_from"]:
                sources[item["reused_from"]] = sources.get(item["reused_from"], 0) + 1
        views.append({
            "id": group["key"], "name": group["name"], "state": group["state"],
            "total": len(listed), "done": count["succeeded"], "running": count["running"],
            "failed": count["failed"], "pending": count["pending"],
            # items unchanged since an earlier plan, not run again (plans/reuse.py)
            "reused": sum(sources.values()), "reused_from": sources,
            "items": [{"index": i["index"], "label": label(i["item"]), "state": i["state"],
                       "error": i["error"], "reused_from": i["reused_from"]} for i in listed],
        })  # fmt: skip
    return views


def only_items_failed(conn: sqlite3.Connection, plan_id: str) -> bool:
    """Every task of the plan that did not succeed is a fan-out item (its group went on):
    a finished plan is then ``partial``, not ``failed``."""
    row = conn.execute(
        """SELECT SUM(CASE WHEN fanout_group IS NULL THEN 1 ELSE 0 END) AS others,
                  COUNT(*) AS n FROM tasks
           WHERE plan_id = ? AND state != 'SUCCEEDED'""",
        (plan_id,),
    ).fetchone()
    return bool(row["n"]) and not row["others"]


def unexpanded_groups(conn: sqlite3.Connection, upstream: sqlite3.Row) -> list[sqlite3.Row]:
    """``from`` groups waiting on ``upstream`` whose every dependency has succeeded and that
    hold no item yet: what ``planner/fanout.py`` expands now."""
    return conn.execute(
        """SELECT t.* FROM tasks t JOIN deps d ON d.task_id = t.id
           WHERE d.depends_on = ? AND t.type = ? AND t.state = 'PENDING'
           AND NOT EXISTS (SELECT 1 FROM deps d2 JOIN tasks u ON u.id = d2.depends_on
                           WHERE d2.task_id = t.id AND u.state != 'SUCCEEDED')
           AND NOT EXISTS (SELECT 1 FROM tasks i WHERE i.plan_id = t.plan_id
                           AND i.fanout_group = t.key)""",
        (upstream["id"], GROUP_TYPE),
    ).fetchall()


def set_members(
    conn: sqlite3.Connection, plan_id: str, members: dict[str, tuple[str, int]]
) -> None:
    conn.executemany(
        "UPDATE tasks SET fanout_group = ?, fanout_index = ? WHERE plan_id = ? AND key = ?",
        [(group, index, plan_id, key) for key, (group, index) in members.items()],
    )


def set_definition(conn: sqlite3.Connection, group: sqlite3.Row, spec: dict[str, Any]) -> None:
    conn.execute("UPDATE tasks SET payload_json = ? WHERE id = ?", (json.dumps(spec), group["id"]))


def cancel_targets(conn: sqlite3.Connection, group: sqlite3.Row) -> list[sqlite3.Row]:
    """A cancelled group's unfinished item tasks."""
    marks = ", ".join("?" for _ in _UNFINISHED)
    return conn.execute(
        f"""SELECT * FROM tasks WHERE plan_id = ? AND fanout_group = ? AND state IN ({marks})
            ORDER BY id""",
        (group["plan_id"], group["key"], *_UNFINISHED),
    ).fetchall()


def task_by_key(conn: sqlite3.Connection, plan_id: str, key: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM tasks WHERE plan_id = ? AND key = ?", (plan_id, key)
    ).fetchone()
    return row


def task_count(conn: sqlite3.Connection, plan_id: str) -> int:
    (count,) = conn.execute("SELECT COUNT(*) FROM tasks WHERE plan_id = ?", (plan_id,)).fetchone()
    return int(count)


def rows_by_ids(conn: sqlite3.Connection, ids: list[int]) -> list[sqlite3.Row]:
    return conn.execute(
        f"SELECT * FROM tasks WHERE id IN ({dialect.json_values(conn, cast='bigint')}) ORDER BY id",
        (json.dumps(ids),),
    ).fetchall()


@contextmanager
def savepoint(conn: sqlite3.Connection, name: str) -> Iterator[None]:
    """Within the caller's transaction: all of the block's writes or none of them."""
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        conn.execute(f"ROLLBACK TO {name}")
        conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")
