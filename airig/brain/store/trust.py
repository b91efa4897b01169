"""Who produced a task's data, and what that allows (PLANS.md, "Trust and taint").

A plan declares trust per task (``trust: untrusted`` taints the task and, through
templates, its readers); this module adds what only the run shows: which rig made an
output. Each join token carries a trust level chosen at `token create --join`:

- ``untrusted`` (the default): its rig's workers are never handed a ``sensitive`` task
  (the claim skips them), and everything they output is tainted;
- ``full``: its workers are treated as this machine's own.

A tainted output (``tasks.tainted_output``: made by an untrusted rig, or by a task that
ran untrusted) taints every task whose templates read it, at claim time: that task's
assignment says ``trusted: false`` (an llm task wraps its input as untrusted data), and
its own output is tainted in turn. A shell task with tainted inputs is failed for good
(``tainted_command``) and never handed to any worker.
"""

from __future__ import annotations

import json
import sqlite3

from airig.brain.store import dialect, results

# A join token's trust level (`token create --join --trust ...`); the first is the default.
JOIN_TRUST = ("untrusted", "full")
DEFAULT_JOIN_TRUST = JOIN_TRUST[0]


def worker_trusted(conn: sqlite3.Connection, worker_id: str) -> bool:
    """True for this machine's workers (the bootstrap token) and for a rig joined with a
    ``full`` token; False for an untrusted rig, and for a name no worker registered."""
    row = conn.execute(
        """SELECT w.registered_by, t.trust FROM workers w
           LEFT JOIN tokens t ON t.id = w.registered_by WHERE w.id = ?""",
        (worker_id,),
    ).fetchone()
    if row is None:
        return False
    return row["registered_by"] is None or row["trust"] == "full"


def tainted_sources(conn: sqlite3.Connection, task: sqlite3.Row) -> list[str]:
    """The upstream tasks whose tainted output this task's templates read, sorted."""
    if "{{" not in task["payload_json"]:  # no template: the common case, no parse
        return []
    keys = sorted(results.references(json.loads(task["payload_json"])))
    if not keys:
        return []
    rows = conn.execute(
        f"""SELECT key FROM tasks WHERE plan_id = ? AND tainted_output = 1
           AND key IN ({dialect.json_values(conn)}) ORDER BY key""",
        (task["plan_id"], dialect.json_list(keys)),
    ).fetchall()
    return [row["key"] for row in rows]


def tainted_command(sources: list[str]) -> str:
    """The error of a shell task that would read tainted output."""
    return (
        f"a shell task never runs with tainted input: it reads the output of {sources}, "
        "made by an untrusted rig or an untrusted task; mark that task `sensitive: true` "
        "to keep it on trusted workers, or join the rig with `--trust full`"
    )
