"""Routing advice (issue 40 §3): from the history, the tasks that failed or escalated on
one model and then succeeded on another model or on the external tier, grouped by type,
plan and a coarse prompt size, as suggested rules with their evidence.

Advice only: nothing here changes a plan or a setting; applying a rule is the user's edit
(the model a plan names, or its ``escalate``). What counts as evidence, and why a task
never moves to a larger local model by itself, is ``store/routing.py``'s docstring.

A rule stands on at least ``min_evidence`` tasks, never on one anecdote. Its examples are
task ids (``<plan id>/<task key>``) only: nothing of a task's payload, prompt, error or
output is quoted, so a sensitive task is named and never shown. Names from plans (the
plan's, the model's) are returned as data, as stored; in the rule's one sentence they
are quoted as JSON strings, so a newline or markup in a name stays inside its quotes.
"""

from __future__ import annotations

import json
import sqlite3
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from airig.brain.store import routing as stored
from airig.common.task_types import names_where

PROMPT_TYPES = frozenset(names_where(prompt_payload=True))  # what criteria.prompt_tokens reads
DEFAULT_MIN_EVIDENCE = 3
EXTERNAL = "external"


@dataclass
class Rule:
    type: str
    plan: str | None
    bucket: int
    from_model: str
    use: str
    tasks: int
    failed: int
    escalated: int
    examples: list[str] = field(default_factory=list)

    def view(self) -> dict[str, Any]:
        over, under = shape(self.bucket)
        return {
            "rule": self.sentence(),
            "type": self.type,
            "plan": self.plan,
            "prompt_tokens_over": over,
            "prompt_tokens_under": under,
            "from_model": self.from_model,
            "use": self.use,
            "evidence": {
                "tasks": self.tasks,
                "failed_then_succeeded": self.failed,
                "escalated_then_succeeded": self.escalated,
                "examples": self.examples,
            },
        }

    def sentence(self) -> str:
        plan = f" of plan {_quoted(self.plan)}" if self.plan is not None else ""
        over, under = shape(self.bucket)
        prompts = ""
        if over is not None and under is not None:
            prompts = f" with prompts of {over}-{under} tokens"
        elif over is not None:
            prompts = f" with prompts over {over} tokens"
        elif under is not None:
            prompts = f" with prompts under {under} tokens"
        use = "the external tier" if self.use == EXTERNAL else _quoted(self.use)
        return (
            f"{self.type} tasks{plan}{prompts}: use {use} instead of {_quoted(self.from_model)}"
            f" ({self.tasks} tasks failed or escalated on {_quoted(self.from_model)}"
            f" and then succeeded on {use})"
        )


def _quoted(name: str | None) -> str:
    """A stored name as one JSON string on one line: its control characters escaped, and
    what JSON leaves raw but a terminal or ``splitlines`` reads as a line break or a
    reordering (U+0085, U+2028, U+2029, the bidirectional controls) escaped too."""
    text = json.dumps(name, ensure_ascii=False)
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) in _UNSEEN else c for c in text)


_UNSEEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})  # control, format, surrogate, line breaks


def shape(bucket: int) -> tuple[int | None, int | None]:
    """A bucket's (over, under) token bounds; (None, None) for a type with no prompt."""
    if bucket < 0:
        return None, None
    edges = (0, *stored.EDGES)
    over = edges[bucket] or None
    under = stored.EDGES[bucket] if bucket < len(stored.EDGES) else None
    return over, under


def advice(
    conn: sqlite3.Connection, now: float, since_s: float, min_evidence: int
) -> list[dict[str, Any]]:
    """The rules of the history since ``now - since_s``, most evidence first."""
    cutoff = now - since_s
    rules: list[Rule] = []
    for external in (True, False):
        per_plan = _rules(conn, cutoff, min_evidence, external, by_plan=True)
        across = _rules(conn, cutoff, min_evidence, external, by_plan=False)
        rules += per_plan + _spanning(across, per_plan)
    rules.sort(key=lambda r: (-r.tasks, r.type, r.plan or "", r.bucket, r.from_model, r.use))
    return [rule.view() for rule in rules[: stored.MAX_GROUPS]]


def _rules(
    conn: sqlite3.Connection, cutoff: float, min_evidence: int, external: bool, by_plan: bool
) -> list[Rule]:
    found: dict[int, Rule] = {}
    rows = stored.evidence(
        conn, cutoff, min_evidence, sorted(PROMPT_TYPES), external=external, by_plan=by_plan
    )
    for row in rows:
        rule = found.get(row["g"])
        if rule is None:
            rule = found[row["g"]] = Rule(
                type=row["type"], plan=row["plan_name"], bucket=int(row["bucket"]),
                from_model=row["from_model"], use=row["use_model"], tasks=int(row["n"]),
                failed=int(row["n_failed"]), escalated=int(row["n_escalated"]),
            )  # fmt: skip
        rule.examples.append(f"{row['plan_id']}/{row['key']}")
    return list(found.values())


def _spanning(across: list[Rule], per_plan: list[Rule]) -> list[Rule]:
    """The rules over every plan that say more than one plan's rule: their evidence spans
    plans (more tasks than the largest single plan's rule of the same key), else they
    repeat it."""
    largest: dict[tuple[str, int, str, str], int] = {}
    for rule in per_plan:
        key = (rule.type, rule.bucket, rule.from_model, rule.use)
        largest[key] = max(largest.get(key, 0), rule.tasks)
    return [
        rule for rule in across
        if rule.tasks > largest.get((rule.type, rule.bucket, rule.from_model, rule.use), 0)
    ]  # fmt: skip
