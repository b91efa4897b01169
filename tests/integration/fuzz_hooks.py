"""Schemathesis hooks for tests/integration/test_api_fuzz.py (``SCHEMATHESIS_HOOKS``).

``positive_data_acceptance`` fails any schema-valid request the brain refuses. Two routes
may refuse one with 422 for what no JSON schema can say, and the fuzz run allows 422
there; this check then holds those refusals to exactly that:

- ``POST /v1/plans``: rules across tasks or fields (an unknown or repeated dependency,
  a cycle, a template naming a task outside ``depends_on``, a payload against its
  type's schema, taint, sensitivity, ``resource`` class with ``resource`` type). A JSON
  plan refused for a field the schema describes (an unknown ``type``, a ``task_class``,
  an id, a priority ...) fails the run: the schema should have said so. A payload is
  any JSON object to the schema, so a value the brain does not store (an integer past
  64 bits) is beyond it too; a YAML or Markdown plan is "a string" to the schema, so
  any refusal of one is.
  A fan-out group's glob (files on the data volume), its item values and its template's
  cross-task rules are beyond the schema as well; its one item source is in it.
- ``POST /v1/goals``: ``inputs_dir`` names no folder on the data volume (the brain's
  state), or one of its names is longer than 255 bytes (the pattern counts characters).
"""

from __future__ import annotations

import re
from typing import Any

import schemathesis

# Where a plan's refusal may point for a rule beyond the schema.
PLAN_RULES_BEYOND_THE_SCHEMA = ("depends_on", "payload", "trust", "escalate", "sensitive")
# What a plan body may hold, refused while it is read: a payload is any JSON object to the
# schema, bounded by the brain (PLANS.md, "Validation").
# (a group's template task's payload too: plan.tasks[4].tasks[0].payload; and a group's
# literal items, any JSON values to the schema: plan.tasks[3].for_each.items[12])
PAYLOAD_VALUE = re.compile(
    r"plan\.tasks\[\d+\](?:(?:\.tasks\[\d+\])?\.payload\b|\.for_each\.items\[)"
)
GOAL_STATE = (
    "is not a folder on the data volume",
    "leaves the data volume",
    "longer than 255 bytes",
)


def _beyond_the_schema(error: Any) -> bool:
    if not isinstance(error, dict):
        return False
    field, message = str(error.get("field")), str(error.get("message"))
    if field.split(".")[0] in PLAN_RULES_BEYOND_THE_SCHEMA:
        return True
    if field == "id" and message == "duplicate task id":
        return True
    # A fan-out group (PLANS.md, "Fan-out"): what its glob finds on the data volume (the
    # brain's state), item values that hold a template, its template tasks' rules (a key
    # <group>__<index>__<id> within 64 characters, dependencies inside the group, the
    # output naming one of them). The choice of one source is the schema's (oneOf).
    if field.startswith("for_each.") or field in ("output", "tasks"):
        return True
    if field.startswith("tasks.") and field.split(".")[-1] in PLAN_RULES_BEYOND_THE_SCHEMA:
        return True
    return field == "task_class" and "goes with type 'resource'" in message


@schemathesis.check
def refused_only_for_what_a_schema_cannot_say(ctx, response, case) -> bool | None:
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 422:
        return None
    route = (case.operation.method.upper(), case.operation.path)
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = None
    if route == ("POST", "/v1/plans"):
        if (case.media_type or "application/json") != "application/json":
            return None
        problem = detail if isinstance(detail, dict) else {}
        if PAYLOAD_VALUE.match(str(problem.get("message"))):
            return None  # a payload's values: 64-bit integers, 64 levels (PLANS.md)
        errors = problem.get("errors")
        if not errors or not all(_beyond_the_schema(e) for e in errors):
            raise AssertionError(f"a schema-valid plan was refused for a field: {detail}")
    elif route == ("POST", "/v1/goals") and not (
        isinstance(detail, str) and any(why in detail for why in GOAL_STATE)
    ):
        raise AssertionError(f"a schema-valid goal was refused: {detail}")
    return None
