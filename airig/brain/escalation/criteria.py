"""When a task goes to the external tier (seed 003 §6.1), decided inside the caller's
transaction:

- ``escalate: always``: as soon as it is READY, before any worker can claim it;
- ``escalate: on_failure``: after ``ESCALATE_AFTER_FAILURES`` local application failures,
  or at its last one when its retry budget is smaller (``on_failure``, hooked into
  ``leases.fail``; a READY task that reached the count through timeouts is caught by
  ``divert``);
- ``escalate: on_failure`` and a prompt too long for the local model's window, estimated
  when it becomes READY (characters / 4 of the rendered payload's text against
  ``AIRIG_LOCAL_CONTEXT_TOKENS``), so it never runs locally.

A task escalate never sends never goes. With ``AIRIG_ESCALATION=off``, or for a sensitive
task that does not set ``allow_external``, nothing is sent: an ``always`` task fails with
that reason, an ``on_failure`` task fails as it would have, its reason saying why it was
not escalated, and a long prompt runs locally. The fourth criterion, the brain model's
verdict on a first failure (``AIRIG_ESCALATION_REVIEW``), is ``review.py``; this module
only holds such a task back from a second local attempt until the verdict is in.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from airig.brain.escalation import budget, ledger
from airig.brain.settings import BrainSettings
from airig.brain.store import escalations, states
from airig.brain.store.events import Outbox
from airig.brain.store.retry import TASK, RetryPolicy
from airig.common.protocol import TaskState as S
from airig.common.task_types import names_where

ESCALATE_AFTER_FAILURES = 2
OFF = "escalation is off (AIRIG_ESCALATION=off)"
SENSITIVE = "the task is sensitive and does not set allow_external"
SENSITIVE_UPSTREAM = "it depends on sensitive tasks and does not set allow_external"
# The WHERE of the partial index tasks_escalation_due (store/schema.py), word for word.
DUE_WHERE = escalations.DUE_WHERE
CONTEXT_TYPES = frozenset(names_where(prompt_payload=True))  # a model's prompt: llm
# The longest a first failure waits for the brain model's verdict before running again.
REVIEW_HOLD_S = 60.0


def blocked(conn: sqlite3.Connection, task: sqlite3.Row, settings: BrainSettings) -> str | None:
    """Why this task may not be sent, or None. Checked when it would be sent, whatever
    submission said: tasks a planner, the external tier or a fan-out added arrive later,
    and a handoff carries what every upstream task produced."""
    if not settings.escalation:
        return OFF
    if task["allow_external"]:
        return None
    if task["sensitive"]:
        return SENSITIVE
    if producers := sensitive_upstream(conn, task["id"]):
        return f"{SENSITIVE_UPSTREAM} ({', '.join(producers)})"
    return None


def sensitive_upstream(conn: sqlite3.Connection, task_id: int) -> list[str]:
    """Keys of the sensitive tasks ``task_id`` depends on, directly or through others."""
    return escalations.sensitive_upstream(conn, task_id)


def prompt_tokens(payload: Any) -> int:
    """Estimated tokens of every text in a rendered payload (what reaches the model)."""
    texts: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(payload)
    return budget.estimate_tokens("\n".join(texts))


def escalate(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, now: float, why: str,
    **columns: Any,
) -> sqlite3.Row:  # fmt: skip
    """Move ``task`` to ESCALATED and queue its call to the external tier."""
    moved = states.transition(
        conn, outbox, task, S.ESCALATED, now, "task_escalated",
        {"why": why, "error": columns.get("error")},
        reason=f"escalated ({why}): queued for the external tier", **columns,
    )  # fmt: skip
    ledger.enqueue(conn, moved, why, now)
    outbox.metric("escalation_calls", outcome="queued")
    return moved


def on_failure(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, now: float,
    policy: RetryPolicy, settings: BrainSettings, error_type: str, message: str,
    retryable: bool, result_hash: str,
) -> sqlite3.Row | None:  # fmt: skip
    """Handle a reported application failure of an ``on_failure`` task when it is due for
    escalation: the new row (ESCALATED, or FAILED when it may not be sent), else None and
    the caller applies the retry policy as usual."""
    if task["escalate"] != "on_failure":
        return None
    failures = task["task_errors"] + 1
    will_retry = policy.decide(TASK, failures, task["retry_count"], error_type, retryable)
    stop = blocked(conn, task, settings)
    if failures < ESCALATE_AFTER_FAILURES and will_retry:
        if failures == 1 and settings.escalation_review and not stop:
            return _held_for_review(conn, outbox, task, now, policy, error_type, message,
                                    retryable, result_hash)  # fmt: skip
        return None
    if stop and will_retry:
        return None  # not sent: local retries go on as for any task
    escalations.count_failure(conn, task["id"], failures, result_hash)
    task = states.require_task(conn, task["id"])
    why = f"failed {failures} time{'s' if failures > 1 else ''} locally"
    if stop:
        return states.fail_terminal(
            conn, outbox, task, now, error_type, message, f"{why}; not escalated: {stop}"
        )
    return escalate(conn, outbox, task, now, why, error_type=error_type, error=message)


def _held_for_review(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, now: float,
    policy: RetryPolicy, error_type: str, message: str, retryable: bool, result_hash: str,
) -> sqlite3.Row:  # fmt: skip
    """The usual retry, held back until the brain's model has judged the failure (or for
    ``REVIEW_HOLD_S`` at most): a second local attempt before the verdict would make the
    verdict moot. ``review.apply`` releases it when the verdict is to stay local."""
    waiting = states.retry_or_fail(
        conn, outbox, task, now, policy, TASK, error_type, message, retryable,
        result_hash=result_hash,
    )  # fmt: skip
    if waiting["state"] != S.RETRY_WAIT:
        return waiting
    escalations.hold_for_review(
        conn, task["id"], now + REVIEW_HOLD_S, "waiting for the brain's model to judge the failure"
    )
    return states.require_task(conn, task["id"])


def divert(
    conn: sqlite3.Connection, outbox: Outbox, now: float, settings: BrainSettings,
    render: Callable[[sqlite3.Row], dict[str, Any]],
) -> int:  # fmt: skip
    """READY tasks the criteria send before any local attempt (or after failures that
    were timeouts) become ESCALATED; how many. Runs at the start of every claim (once per
    transaction: a prefetching claim runs several)."""
    if outbox.memo.get("diverted_at") == now:
        return 0
    outbox.memo["diverted_at"] = now
    rows = escalations.due_to_divert(conn)
    moved = 0
    for task in rows:
        stop = blocked(conn, task, settings)
        if task["escalate"] == "always":
            if stop:
                states.fail_terminal(
                    conn, outbox, task, now, "not_escalated", f"escalate: always, but {stop}",
                    "not escalated",
                )  # fmt: skip
                continue
            why = "escalate: always"
        elif task["task_errors"] >= ESCALATE_AFTER_FAILURES:
            if stop:
                continue  # runs locally, as any task would
            why = f"failed {task['task_errors']} times locally"
        else:
            long = _too_long(conn, task, settings, render)
            if long is None or stop:
                continue  # a long prompt that may not leave runs locally
            why = long
        escalate(conn, outbox, task, now, why)
        moved += 1
    return moved


def _too_long(
    conn: sqlite3.Connection, task: sqlite3.Row, settings: BrainSettings,
    render: Callable[[sqlite3.Row], dict[str, Any]],
) -> str | None:  # fmt: skip
    """Estimate the prompt once (stored in ``context_tokens``); the reason when it is over
    the local window. A payload that cannot be rendered is left to the claim to fail."""
    tokens = 0
    if task["type"] in CONTEXT_TYPES:
        try:
            tokens = prompt_tokens(render(task))
        except (KeyError, OSError, ValueError, json.JSONDecodeError):
            tokens = 0
    escalations.set_context_tokens(conn, task["id"], tokens)
    window = settings.local_context_tokens
    if tokens > window:
        return f"prompt of ~{tokens} tokens is over the local window of {window}"
    return None
