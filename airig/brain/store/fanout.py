"""Fan-out groups as stored (``plans/fanout.py`` expands them): their items' progress,
whether a group has ended, and its output, read from its item tasks.

A group is a task row of type ``group``: its payload holds the definition (template,
``output`` id, the items once known), its items are ordinary tasks whose
``fanout_group`` / ``fanout_index`` name it. Its output is never stored: it is read from
the items' output tasks, as they are stored (a large one in its file), whenever a
dependent's template or ``GET …/result`` asks for it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airig.brain.store import results
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
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM tasks WHERE plan_id = ? AND key = ? AND type = ?",
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


def group_output(conn: sqlite3.Connection, results_dir: Path, group: sqlite3.Row) -> dict:
    """The group's output, from its items' output tasks as they are stored."""
    listed = items(group, item_tasks(conn, group["plan_id"], group["key"]))
    out = []
    for item in listed:
        output = None
        if item["state"] == "succeeded":
            row = conn.execute(
                "SELECT output_json, output_file FROM tasks WHERE plan_id = ? AND key = ?",
                (group["plan_id"], item["output_key"]),
            ).fetchone()
            if row is not None:
                output = results.load_output(results_dir, row["output_json"], row["output_file"])
        out.append({"index": item["index"], "item": item["item"], "state": item["state"]
                    if item["state"] in ("succeeded", "failed") else "failed",
                    "output": output, "error": item["error"]})  # fmt: skip
    ok = sum(item["state"] == "succeeded" for item in out)
    return {"items": out, "total": len(out), "succeeded": ok, "failed": len(out) - ok}


def load_output(conn: sqlite3.Connection, results_dir: Path, row: sqlite3.Row) -> dict:
    """Any task's output: a group's read from its items, another's as stored."""
    if row["type"] == GROUP_TYPE:
        return group_output(conn, results_dir, row)
    return results.load_output(results_dir, row["output_json"], row["output_file"])


def group_output_bytes(conn: sqlite3.Connection, results_dir: Path, group: sqlite3.Row) -> int:
    return len(results.canonical_json(group_output(conn, results_dir, group)).encode())


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
        """SELECT SUM(fanout_group IS NULL) AS others, COUNT(*) AS n FROM tasks
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
        "SELECT * FROM tasks WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id",
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
