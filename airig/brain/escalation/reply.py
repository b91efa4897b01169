"""What comes back from the external tier, and what the brain makes of it.

An answer becomes the task's result (tainted: it came from outside; its metrics name the
provider and model). A breakdown becomes subtasks of the task's plan through the same
door as a `plan` task's (``planner/grow.py`` ``add_subtasks``, origin ``external``:
validated, no shell task, tainted, caps), and the escalated task succeeds at once as
their container: its unfinished dependents wait for the subtasks (``add_subtasks`` makes
them), so nothing downstream runs on half the work, and the task itself does not hold a
state while local work it no longer does goes on. Anything else is unusable.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from airig.brain.planner import fanout
from airig.brain.planner.grow import add_subtasks
from airig.brain.settings import BrainSettings
from airig.brain.store import escalations, payloads, results, states
from airig.brain.store.events import Outbox
from airig.common.jsonsafe import UnsafeJson, check_json_value
from airig.common.protocol import TaskState as S


@dataclass
class Parsed:
    kind: str  # "answer" | "subtasks" | "invalid"
    value: Any = None
    problem: str = ""


def _unfenced(text: str) -> str:
    """The JSON inside a Markdown code fence, which models add even when told not to."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        stripped = stripped.rsplit("```", 1)[0]
    return stripped.strip()


def parse(text: str) -> Parsed:
    try:
        value = json.loads(_unfenced(text))
        check_json_value(value)
    except (ValueError, UnsafeJson) as exc:
        return Parsed("invalid", problem=f"it is not one JSON object ({str(exc)[:120]})")
    if not isinstance(value, dict):
        return Parsed("invalid", problem="it is JSON, but not an object")
    if ("answer" in value) == ("subtasks" in value):
        return Parsed("invalid", problem='it must hold exactly one of "answer" and "subtasks"')
    if "answer" in value:
        answer = value["answer"]
        if answer is None or answer == "" or answer == {}:
            return Parsed("invalid", problem="the answer is empty")
        output = answer if isinstance(answer, dict) else {"text": answer}
        if not isinstance(answer, dict | str):
            output = {"value": answer}
        return Parsed("answer", output)
    subtasks = value["subtasks"]
    if not isinstance(subtasks, list) or not subtasks:
        return Parsed("invalid", problem='"subtasks" must be a non-empty list of tasks')
    return Parsed("subtasks", subtasks)


def _succeed(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, output: dict[str, Any],
    call: dict[str, Any], now: float, settings: BrainSettings, reason: str,
) -> sqlite3.Row:  # fmt: skip
    output_json, output_file = results.store_output(
        settings.results_dir, task["plan_id"], task["key"], output, settings.result_inline_bytes
    )
    metrics = {"tier": "external", **call}
    done = states.transition(
        conn, outbox, task, S.SUCCEEDED, now, "task_completed",
        {"tier": "external", "provider": call.get("provider"), "model_external": call.get("model")},
        output_json=output_json, output_file=output_file,
        result_hash=results.result_hash(output, []), files_json="[]",
        metrics_json=json.dumps(metrics), error=None, error_type=None, reason=reason,
        tainted_output=1,
    )  # fmt: skip
    for ready in states.release_dependents(conn, outbox, done, now):
        payloads.refuse_oversized(conn, outbox, ready, now, settings)
    fanout.start_groups(conn, outbox, done, now, settings, output)  # a `from` group on it
    return done


def answer(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, output: dict[str, Any],
    call: dict[str, Any], now: float, settings: BrainSettings,
) -> sqlite3.Row:  # fmt: skip
    where = f"{call.get('provider')}/{call.get('model')}"
    return _succeed(
        conn, outbox, task, output, call, now, settings, f"answered by the external tier ({where})"
    )


def breakdown(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, subtasks: list[Any],
    call: dict[str, Any], now: float, settings: BrainSettings,
) -> sqlite3.Row:  # fmt: skip
    """Add the subtasks (``GrowthRefused`` when they are refused: nothing is added), then
    succeed the task as their container."""
    ids = add_subtasks(conn, outbox, settings, task, subtasks, "external", now, True)
    keys = escalations.task_keys(conn, ids)
    output = {"subtasks": keys, "text": f"broken down by the external tier into {len(keys)} tasks"}
    where = f"{call.get('provider')}/{call.get('model')}"
    return _succeed(
        conn, outbox, task, output, call, now, settings,
        f"broken down by the external tier ({where}) into {len(keys)} subtasks",
    )  # fmt: skip
