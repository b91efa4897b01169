"""The brain model's verdict on a failed result (the fourth criterion, seed 003 §6.1).

With ``AIRIG_ESCALATION_REVIEW=on``, the first local application failure of an
``escalate: on_failure`` task is shown to the brain's model (``AIRIG_PLANNER_MODEL``,
through the Ollama at ``BRAIN_OLLAMA_URL``): the task as the plan wrote it and the
attempt's error, wrapped as untrusted data. It answers ``{"escalate": true|false,
"why": "..."}``. ``true`` sends the task to the external tier now instead of after its
second failure, if it has not been claimed again meanwhile; ``false``, no answer or an
unreadable one leave it to the usual rule. Each task is judged once (``tasks.reviewed``),
the call is made by the escalation thread outside any transaction, and the verdict is a
``task_reviewed`` event either way.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import ollama

from airig.brain.escalation import criteria, handoff
from airig.brain.settings import BrainSettings
from airig.brain.store import escalations, states
from airig.brain.store.events import Outbox, record
from airig.common.protocol import TaskState as S
from airig.common.spotlight import with_notice

REVIEW_TIMEOUT_S = 120.0
SYSTEM = with_notice(
    "You are the planner of a cluster of small local AI models. A task failed once on a "
    "local worker. Decide whether a larger external model should take it over now "
    "(escalate: true: the task needs reasoning, knowledge or context a small local model "
    "lacks) or whether another local attempt may well succeed (escalate: false: a "
    'transient error, a timeout, a flaky tool). Answer with one JSON object: {"escalate": '
    'true or false, "why": "one short sentence"}.'
)


@dataclass
class Verdict:
    escalate: bool
    why: str


class Reviewer(Protocol):
    def judge(self, system: str, prompt: str) -> Verdict | None: ...


class OllamaReviewer:
    """The brain's model through Ollama's chat API (the ``ollama`` library), JSON mode."""

    def __init__(self, url: str, model: str, timeout_s: float = REVIEW_TIMEOUT_S) -> None:
        self.model = model
        self._client = ollama.Client(host=url, timeout=timeout_s)

    def judge(self, system: str, prompt: str) -> Verdict | None:
        try:
            answer = self._client.chat(
                model=self.model, format="json", options={"temperature": 0},
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": prompt}],
            )  # fmt: skip
        except (ollama.ResponseError, httpx.HTTPError, OSError):
            return None  # no verdict: the usual rule decides
        return parse(answer.message.content or "")


def parse(text: str) -> Verdict | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("escalate"), bool):
        return None
    return Verdict(value["escalate"], str(value.get("why") or "")[:300])


def anything_due(conn: sqlite3.Connection) -> bool:
    return escalations.any_review_due(conn)


def take_due(conn: sqlite3.Connection, limit: int = 5) -> list[tuple[int, str]]:
    """Tasks to judge, marked judged now (once each): [(task id, prompt)]."""
    due = []
    for task in escalations.take_review_due(conn, limit):
        try:
            due.append((task["id"], prompt(conn, task)))
        except handoff.HandoffRefused:
            continue  # text that could forge a delimiter is not shown to the model
    return due


def prompt(conn: sqlite3.Connection, task: sqlite3.Row) -> str:
    payload = json.dumps(json.loads(task["payload_json"]), indent=1, ensure_ascii=False)
    tried = handoff.attempts(conn, task["id"])
    errors = "\n".join(
        handoff.wrapped(handoff.clip(a["error"], handoff.MAX_ERROR_CHARS), "the error")
        for a in tried
    )
    return (
        f"Task {task['key']} (type {task['type']}, model {task['model'] or 'none'}).\n"
        f"Payload:\n{handoff.wrapped(payload, 'the payload')}\n"
        f"The local attempt failed with:\n{errors or '(no message)'}"
    )


def apply(
    conn: sqlite3.Connection, outbox: Outbox, now: float, *, task_id: int,
    verdict: Verdict | None, settings: BrainSettings, model: str,
) -> bool:  # fmt: skip
    """Record the verdict; escalate the task when it says so and still can. True if it did."""
    task = states.get_task(conn, task_id)
    if task is None:
        return False
    body: dict[str, Any] = {"reviewer": model, "verdict": None}
    if verdict is not None:
        body.update(verdict=verdict.escalate, why=verdict.why)
    record(conn, outbox, "task_reviewed", task, now, **body)
    stays = verdict is None or not verdict.escalate or criteria.blocked(conn, task, settings)
    if stays or verdict is None or task["state"] not in (S.RETRY_WAIT, S.READY):
        if task["state"] == S.RETRY_WAIT:  # held for the verdict: free to retry now
            escalations.release_review_hold(conn, task_id, now)
        return False
    criteria.escalate(conn, outbox, task, now, f"the brain's model judged it: {verdict.why}")
    return True
