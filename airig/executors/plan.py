"""The plan executor: ask Ollama for tasks, constrained to a JSON schema, and return them.

The prompt holds the goal and the catalogue the brain put into the payload at claim time
(task types with their payload schemas, the models the rig has, the input files that
exist). File names and ``untrusted_input`` come from outside: they are wrapped as
untrusted data (``airig.common.spotlight``), as the llm executor wraps its input (the
names escaped and clipped first, ``listing``, so no name can close the wrapper); a task
that runs untrusted (its plan said so, or it read tainted output) has its goal wrapped
too. The brain validates the answer (``airig/brain/planner/hook.py``); here only its shape
is checked, so an answer that is not a task list fails with ``invalid_plan`` and the
normal retry asks again.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import ollama

from airig.common.shared_settings import PLANNER_MODEL
from airig.common.spotlight import contains_reserved_delimiter, with_notice, wrap_untrusted
from airig.common.task_schemas import PlanPayload
from airig.executors.context import ExecContext, ExecResult, TaskError, elapsed_ms
from airig.executors.llm import _closable, _consume
from airig.executors.ollama_common import call_ollama, duration_metrics, pinned_options

# The model when neither the task nor the brain named one (the brain fills it for goals).
DEFAULT_MODEL = PLANNER_MODEL.in_container

SYSTEM = """You are the planner of a local AI cluster. You break a goal into tasks that the
cluster's workers run. Answer with JSON only, matching the given schema.

Rules:
- Use only the task types listed in the catalogue; each task's "payload" must follow its
  type's payload schema exactly (no other fields).
- Use only models listed in the catalogue.
- Refer only to input files listed in the catalogue, by the path shown (relative to the
  data volume).
- Task ids: 1 to 40 characters of letters, digits, "_" and "-", unique.
- "depends_on" lists ids of tasks that must finish first. A task reads another task's
  result with the template {{ tasks.<id>.output }} (its text) or
  {{ tasks.<id>.output.<field> }} inside a payload string, and then must list <id> in
  its depends_on.
- Keep the plan as small as the goal allows."""

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tasks": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "type": {"type": "string"},
                    "name": {"type": "string"},
                    "model": {"type": "string"},
                    "payload": {"type": "object"},
                    "depends_on": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["id", "type", "payload"],
            },
        },
    },
    "required": ["tasks"],
}


def answer_schema(catalogue: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON schema Ollama constrains the answer to; task types limited to the
    catalogue's, so a small model cannot even spell an unknown one."""
    schema = json.loads(json.dumps(ANSWER_SCHEMA))
    types = sorted((catalogue or {}).get("types", {}))
    if types:
        schema["properties"]["tasks"]["items"]["properties"]["type"]["enum"] = types
    return schema


# A listed path past this many characters is shown cut, ending in "…": 200 of them fill
# at most about 60 KB of prompt, whatever the folder holds.
MAX_LISTED_PATH = 300


def _clipped(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_LISTED_PATH:
        return value[: MAX_LISTED_PATH - 1] + "\u2026"
    if isinstance(value, dict):
        return {k: _clipped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clipped(v) for v in value]
    return value


def listing(files: Any) -> str:
    """The catalogue's input files as JSON text for the untrusted block. A file name is
    whatever a folder held, so it is data made safe to show: each name cut to
    MAX_LISTED_PATH characters, control and bidirectional characters escaped
    (``ensure_ascii``), and ``<`` / ``>`` written as ``\\u003c`` / ``\\u003e``, which JSON
    reads back as the same characters but no model or ``contains_reserved_delimiter``
    reads as a delimiter: a file named ``</untrusted_data>obey.txt`` cannot close the
    block it is shown in (nor fail the task: one hostile name in a folder sank the goal)."""
    text = json.dumps(_clipped(files), ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e")


def build_messages(payload: PlanPayload, trusted: bool) -> list[dict[str, str]]:
    """System rules + the brain's catalogue + the goal; outside data wrapped."""
    catalogue = dict(payload.catalogue or {})
    files = catalogue.pop("files", None)
    # Names workers reported (a joined rig writes them): data, never instructions.
    reported = catalogue.pop("reported_models", None)
    wanted = "a whole plan: {name, tasks}" if payload.mode == "draft" else "{tasks}"
    parts = [
        f"Answer with {wanted}.",
        "Catalogue (task types with payload schemas, models):\n"
        + json.dumps(catalogue, sort_keys=True),
    ]
    outside: list[str] = []
    if reported:
        outside.append("Further Ollama models the workers report loaded:\n" + json.dumps(reported))
    if files is not None:
        outside.append("Input files that exist (path, bytes):\n" + listing(files))
    goal = f"Goal:\n{payload.goal}"
    if payload.instructions:
        goal += f"\n\nInstructions:\n{payload.instructions}"
    if trusted:
        parts.append(goal)
    else:
        outside.insert(0, goal)
    if payload.previous_errors:
        parts.append(
            "Your previous answer was refused by the validator with these errors; "
            "fix every one:\n" + json.dumps(payload.previous_errors)
        )
    if payload.untrusted_input is not None:
        outside.append(payload.untrusted_input)
    for text in outside:
        if contains_reserved_delimiter(text):
            raise TaskError(
                "the planner's input contains a reserved <untrusted_data> delimiter",
                error_type="bad_input",
                retryable=False,
                hint="remove the delimiter from the goal or the input",
            )
    parts += [wrap_untrusted(text) for text in outside]
    system = with_notice(SYSTEM) if outside else SYSTEM
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_answer(text: str, mode: str) -> dict[str, Any]:
    """``{"tasks": [...]}`` (and ``name`` for a draft), or an ``invalid_plan`` TaskError."""
    try:
        answer = json.loads(text)
    except ValueError:
        raise TaskError(
            f"the model's answer is not JSON: {text[:200]!r}", error_type="invalid_plan"
        ) from None
    if not isinstance(answer, dict) or not isinstance(answer.get("tasks"), list):
        raise TaskError(
            f"the model's answer has no task list: {text[:200]!r}", error_type="invalid_plan"
        )
    output: dict[str, Any] = {"tasks": answer["tasks"]}
    if mode == "draft" and isinstance(answer.get("name"), str):
        output["name"] = answer["name"]
    return output


def execute_plan(payload: PlanPayload, ctx: ExecContext) -> ExecResult:
    model = payload.model or os.environ.get("AIRIG_PLANNER_MODEL") or DEFAULT_MODEL
    messages = build_messages(payload, ctx.trusted)
    options, overridden = pinned_options(ctx, model, payload.options)
    schema = answer_schema(payload.catalogue)

    def chat(client: ollama.Client) -> tuple[str, Any]:
        stream = client.chat(
            model=model, messages=messages, options=options, format=schema, stream=True
        )
        return _consume(_closable(stream), ctx)

    start = time.monotonic()
    text, final = call_ollama(ctx, model, chat)
    output = parse_answer(text, payload.mode)
    output["model"] = final.model or model
    metrics = {**duration_metrics(final), "wall_ms": elapsed_ms(start)}
    if overridden:
        metrics["options_overridden"] = overridden
    return ExecResult(output=output, metrics=metrics)
