"""What the brain does with a `plan` task's answer, inside the completion's transaction.

``leases.complete`` calls ``accept`` before it marks the task SUCCEEDED, so the grown
tasks are in the graph (and the parent's dependents wait for them) before any dependent
could be released. An answer the validator refuses fails the attempt as an application
error (``invalid_plan``, retryable): the task's retry asks the model again, with the
errors put into its payload (``previous_errors``) so the model sees what to fix.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, cast

from airig.brain.planner import goals
from airig.brain.planner.grow import add_subtasks
from airig.brain.plans.validate import PlanInvalid
from airig.brain.settings import BrainSettings
from airig.brain.store import growth, states
from airig.brain.store.events import Outbox
from airig.brain.store.retry import TASK, RetryPolicy
from airig.common.spotlight import contains_reserved_delimiter

# Errors carried into the retry's payload (and its prompt): enough to fix a draft.
MAX_ERRORS_SHOWN = 50


def _shown(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The errors as the model will read them. They quote its own answer, which may echo
    untrusted input: an error holding a reserved delimiter is replaced, never shown."""
    shown = []
    for error in errors[:MAX_ERRORS_SHOWN]:
        if contains_reserved_delimiter(json.dumps(error)):
            error = {"task": None, "field": "?", "message": "(an error quoting a reserved "
                     "delimiter was left out)"}  # fmt: skip
        shown.append(error)
    return shown


def _summary(errors: list[dict[str, Any]]) -> str:
    parts = [f"{e.get('task') or 'plan'}.{e.get('field')}: {e.get('message')}" for e in errors]
    more = f" (and {len(parts) - 5} more)" if len(parts) > 5 else ""
    text = "the model's plan was refused: " + "; ".join(parts[:5]) + more
    # The errors quote the model's answer (an id it proposed, as it spelled it): a control
    # character there is written escaped, so the task's error is one readable line and a
    # NUL, which PostgreSQL's text refuses, never fails the completion that stores it.
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def accept(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, output: dict[str, Any],
    now: float, settings: BrainSettings, tainted: bool, result_hash: str,
) -> sqlite3.Row | None:  # fmt: skip
    """None when the answer was taken (tasks added, or a draft awaits approval); else the
    task's row after its failed attempt (RETRY_WAIT, or FAILED once retries are used up)."""
    payload = json.loads(task["payload_json"])
    try:
        if payload.get("mode") == "draft":
            goals.draft_done(conn, task, output, settings, now, tainted)
        else:
            # as the worker sent it: add_subtasks refuses anything but a list of tasks
            proposed = cast(list[dict[str, Any]], output.get("tasks"))
            add_subtasks(conn, outbox, settings, task, proposed, "plan", now, tainted)
        return None
    except PlanInvalid as exc:
        errors = _shown(exc.errors)
    payload["previous_errors"] = errors
    growth.set_payload(conn, task["id"], json.dumps(payload))
    policy = RetryPolicy(
        initial_s=settings.retry_initial_s, cap_s=settings.retry_cap_s,
        infra_budget=settings.infra_retries,
    )  # fmt: skip
    fresh = states.require_task(conn, task["id"])
    return states.retry_or_fail(
        conn, outbox, fresh, now, policy, TASK, "invalid_plan", _summary(errors),
        result_hash=result_hash,
    )  # fmt: skip
