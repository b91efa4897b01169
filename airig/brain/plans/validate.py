"""Plan validation: every error of every task at once, or a plan that can be stored.

Checks: task fields (id, class, priority range, ...), known type, payload schema per type
(from ``airig.common.task_types``), size limits (413), duplicate and unknown ids, cycles,
templates that name a task outside ``depends_on``, and taint: a task reading an untrusted
task's output through a template is untrusted too, and an untrusted shell task is
refused (a command never comes from untrusted data). Sensitivity follows the data the same
way: a task reading a sensitive task's output is made sensitive (reported as a fix).

A missing ``task_class`` is inferred as the seed cluster did and reported as a fix.
"""

from __future__ import annotations

import graphlib
import json
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from airig.brain.plans.models import PlanSpec, TaskSpec
from airig.brain.store import results
from airig.common import write_paths
from airig.common.protocol import TASK_CLASSES
from airig.common.task_types import (
    COMFYUI,
    DEFAULT_CLASS_FOR_TYPE,
    OLLAMA,
    PAYLOAD_SCHEMAS,
    TASK_TYPES,
    service_of,
)

# The seed's keyword rules, checked in this order.
CLASS_KEYWORDS = (
    ("script", ("whisper", "transcrib", "embed", "cuda", "gpu")),
    ("llm", ("ollama", "generate", "llm")),
)
SHELL_INPUTS_ARE_THE_BRAINS = (
    "filled by the brain from the command's templates ({{ tasks.<id>.output }} reaches the "
    'command as "${AIRIG_INPUT_<n>}"); put fixed values in env'
)
# Errors listed in one refusal: a megabyte of bad dependencies would otherwise answer
# with tens of megabytes of errors. The rest are counted in a last entry.
MAX_REPORTED_ERRORS = 200


@dataclass(frozen=True)
class Limits:
    max_tasks: int = 5000
    max_payload_bytes: int = 262_144
    # What a plan may hold once its fan-out groups are expanded (AIRIG_PLAN_MAX_TASKS, the
    # cap a growing plan has too); ``max_tasks`` bounds the tasks its body lists.
    plan_max_tasks: int = 200


@dataclass
class PlanInvalid(Exception):
    """The plan was refused; ``errors`` names the task and field of each problem."""

    errors: list[dict[str, Any]]
    too_large: bool = False
    fixes: list[dict[str, str]] = field(default_factory=list)


def infer_class(raw: dict[str, Any]) -> tuple[str, str]:
    """(task_class, why) for a task without one."""
    task_type = str(raw.get("type", ""))
    # most types only make sense in one class; shell and noop tasks are classed by content
    if task_type in TASK_TYPES and not TASK_TYPES[task_type].class_by_content:
        return DEFAULT_CLASS_FOR_TYPE[task_type], f"type {task_type!r}"
    payload = raw.get("payload") or {}
    text = " ".join(
        str(part) for part in (raw.get("name", ""), raw.get("id", ""), json.dumps(payload))
    ).lower()
    for task_class, keywords in CLASS_KEYWORDS:
        for keyword in keywords:
            if keyword in text:
                return task_class, f"keyword {keyword!r}"
    return "cpu", "no GPU or LLM keyword"


def _error(task: str | None, where: str, message: str) -> dict[str, Any]:
    return {"task": task, "field": where, "message": message}


def placement_model(task_type: str, payload: dict[str, Any], model: str | None) -> str | None:
    """The model the residency policy places this task by, or None.

    A GPU worker's own Ollama holds per-GPU state the brain can plan (load, evict, keep
    resident), and so does its own Whisper on gpu-nvidia (`whisper-gpuN`, issue 34 §3):
    a transcription is placed by its Whisper model, which every worker that transcribes
    reports loaded in its Whisper (its own, or the shared one, whose loaded model then
    counts on each of its workers). ComfyUI is one shared server: its models are no
    reason to prefer or swap a worker; placing by them would only delay image tasks until
    max-wait. Ollama names are made canonical ("llama3.2" -> "llama3.2:latest"), the
    form `/api/ps` reports, or every claim would look like a swap.
    """
    service = service_of(task_type, payload)  # the table's model_service
    if not model or service == COMFYUI:
        return None
    if service != OLLAMA:
        return model  # e.g. noop, which tests and benchmarks use to stand for any model
    from airig.common.errors import AirigError
    from airig.common.ollama_names import OllamaName

    try:
        return OllamaName.parse(model).display
    except AirigError:
        return model  # the payload check reports a bad name; placement keeps it as given


def _check_payload(spec: TaskSpec, errors: list[dict[str, Any]]) -> None:
    schema = PAYLOAD_SCHEMAS.get(spec.type)
    if schema is None:
        known = ", ".join(sorted(PAYLOAD_SCHEMAS))
        errors.append(_error(spec.id, "type", f"unknown type {spec.type!r} (known: {known})"))
        return
    if spec.model and "model" in schema.model_fields and "model" not in spec.payload:
        spec.payload["model"] = spec.model
    if not spec.model and isinstance(spec.payload.get("model"), str):
        spec.model = spec.payload["model"]
    spec.model = placement_model(spec.type, spec.payload, spec.model)
    if spec.type == "shell" and "inputs" in spec.payload:
        errors.append(_error(spec.id, "payload.inputs", SHELL_INPUTS_ARE_THE_BRAINS))
    try:
        schema.model_validate(spec.payload)
    except ValidationError as exc:
        for item in exc.errors():
            where = ".".join(str(part) for part in ("payload", *item["loc"]))
            errors.append(_error(spec.id, where, item["msg"]))
    unfit = write_paths.folder_problem(spec.type, spec.payload)  # can never fit: refused now
    if unfit is not None:
        errors.append(_error(spec.id, f"payload.{unfit[0]}", unfit[1]))


def _check_task(
    raw: Any, limits: Limits, fixes: list[dict[str, str]], errors: list[dict[str, Any]]
) -> tuple[TaskSpec | None, bool]:
    """The parsed task (or None) and whether it broke a size limit."""
    if not isinstance(raw, dict):
        errors.append(_error(None, "tasks", f"a task must be a mapping, got {raw!r:.60}"))
        return None, False
    task_id = str(raw.get("id", "?"))[:80]
    size = len(json.dumps(raw.get("payload", {}), default=str).encode())
    if size > limits.max_payload_bytes:
        errors.append(
            _error(task_id, "payload", f"{size} bytes; the limit is {limits.max_payload_bytes}")
        )
        return None, True
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as exc:
        for item in exc.errors():
            errors.append(_error(task_id, ".".join(map(str, item["loc"])), item["msg"]))
        return None, False
    spec.name = spec.name or spec.id
    if spec.task_class is None:
        spec.task_class, why = infer_class(raw)
        fixes.append(
            {"task": spec.id, "field": "task_class", "fix": f"inferred {spec.task_class!r}",
             "reason": why}
        )  # fmt: skip
    elif spec.task_class not in TASK_CLASSES:
        errors.append(
            _error(spec.id, "task_class", f"{spec.task_class!r} is not one of {TASK_CLASSES}")
        )
    if (spec.task_class == "resource") != (spec.type == "resource"):
        errors.append(_error(spec.id, "task_class", "class 'resource' goes with type 'resource'"))
    _check_payload(spec, errors)
    for column in ("name", "model"):  # the payload's model included: it becomes the task's
        _check_no_nul(spec.id, column, getattr(spec, column), errors)
    return spec, False


def _check_no_nul(task: str | None, field: str, value: Any, errors: list[dict[str, Any]]) -> None:
    """A name stored as a column of its own holds no NUL: PostgreSQL's text refuses one
    (a 500 for the whole plan), SQLite's reads would cut the name there. Payload values
    may: the payload is stored as JSON text, where a NUL is written escaped."""
    if isinstance(value, str) and "\x00" in value:
        errors.append(_error(task, field, "holds a NUL character (\\u0000); remove it"))


def _names(kind: str, names: list[str]) -> str:
    """``kind 'a'`` or ``kinds ['a', 'b'] and 3 more``: one error for any number of names."""
    if len(names) == 1:
        return f"{kind} {names[0]!r:.80}"
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return f"{kind}s {[name[:80] for name in names[:5]]}{more}"


def _check_depends_on(spec: TaskSpec, seen: set[str], errors: list) -> None:
    """A dependency listed twice (the dependency table holds each edge once, and a repeat
    is most likely a typo for another id), on itself, or on no task of the plan."""
    twice = [dep for dep, n in Counter(spec.depends_on).items() if n > 1]
    if twice:
        errors.append(_error(spec.id, "depends_on", _names("listed twice: task", twice)))
    if spec.id in spec.depends_on:
        errors.append(_error(spec.id, "depends_on", "a task cannot depend on itself"))
    unknown = [dep for dep in dict.fromkeys(spec.depends_on) if dep not in seen]
    if unknown:
        errors.append(_error(spec.id, "depends_on", _names("unknown task", unknown)))


def _check_graph(
    specs: list[TaskSpec], raw_ids: list[str], errors: list[dict[str, Any]]
) -> list[str]:
    """Dependency errors; the task ids in topological order when the graph is sound.

    ``raw_ids`` holds every submitted id, so a task that failed its own checks does not
    also make its dependents report an unknown dependency.
    """
    seen: set[str] = set()
    for task_id in raw_ids:
        if task_id in seen:
            errors.append(_error(task_id, "id", "duplicate task id"))
        seen.add(task_id)
    graph: dict[str, set[str]] = {}
    for spec in specs:
        _check_depends_on(spec, seen, errors)
        outside = sorted(results.references(spec.payload) - set(spec.depends_on))
        if outside:
            names = _names("task", outside)
            errors.append(_error(spec.id, "payload", f"template names {names}, not in depends_on"))
        graph[spec.id] = {d for d in spec.depends_on if d in seen and d != spec.id}
    for task_id in seen - set(graph):
        graph[task_id] = set()
    try:
        return list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        cycle = " -> ".join(exc.args[1])
        errors.append(_error(exc.args[1][0], "depends_on", f"dependency cycle: {cycle}"))
        return []


# Tasks whose output a task takes in besides what its templates name: a fan-out group's
# row reads its items' output tasks (``plans/fanout.py``). Taint and sensitivity follow them.
Reads = Mapping[str, Collection[str]]


def _sources(spec: TaskSpec, reads: Reads) -> set[str]:
    """The tasks whose output ``spec`` takes in: its templates', and its ``reads``."""
    return results.references(spec.payload) | set(reads.get(spec.id, ()))


def _check_taint(
    specs: dict[str, TaskSpec], order: list[str], errors: list, reads: Reads
) -> set[str]:
    tainted: set[str] = set()
    for task_id in order:
        spec = specs.get(task_id)
        if spec is None:
            continue
        sources = _sources(spec, reads) & tainted
        if spec.trust == "untrusted" or sources:
            tainted.add(task_id)
            if spec.type == "shell":
                why = "it is untrusted" if spec.trust == "untrusted" else f"it reads {sources}"
                errors.append(
                    _error(task_id, "trust", f"a shell task never runs tainted input ({why})")
                )
    return tainted


def _propagate_sensitive(
    specs: dict[str, TaskSpec], order: list[str], fixes: list, reads: Reads
) -> None:
    """A task whose templates read a sensitive task's output holds that data in its own
    payload: it is sensitive too (no untrusted rig gets it, no training sample keeps it)."""
    sensitive: set[str] = set()
    for task_id in order:
        spec = specs.get(task_id)
        if spec is None:
            continue
        sources = sorted(_sources(spec, reads) & sensitive)
        if sources and not spec.sensitive:
            spec.sensitive = True
            fixes.append(
                {"task": spec.id, "field": "sensitive", "fix": "set true",
                 "reason": f"reads the output of sensitive {_names('task', sources)}"}
            )  # fmt: skip
        if spec.sensitive:
            sensitive.add(task_id)


def _check_external(specs: list[TaskSpec], errors: list) -> None:
    """A sensitive task's data never leaves the machine unless the task that would send it
    says so (checked after sensitivity has followed the data). The rule is about what is
    *sent*: a handoff carries the outputs of the tasks the escalating one depends on, so a
    sensitive producer anywhere upstream (through depends_on, template or not) needs
    allow_external on the escalating task as much as its own sensitivity does."""
    by_id = {s.id: s for s in specs}
    for spec in specs:
        if spec.escalate == "never" or spec.allow_external:
            continue
        if spec.sensitive:
            errors.append(_error(spec.id, "escalate", (
                f"a sensitive task is never sent to the external tier (escalate: "
                f"{spec.escalate}); set allow_external: true to send it, or escalate: never"
            )))  # fmt: skip
        elif producers := sensitive_upstream(spec.id, by_id):
            errors.append(_error(spec.id, "escalate", (
                f"escalate: {spec.escalate} would send what sensitive "
                f"{_names('task', producers)} produced; set allow_external: true on this "
                "task to allow that, or escalate: never"
            )))  # fmt: skip


def sensitive_upstream(task_id: str, specs: dict[str, TaskSpec]) -> list[str]:
    """The sensitive tasks ``task_id`` depends on, directly or through others."""
    seen: set[str] = set()
    todo = list(specs[task_id].depends_on) if task_id in specs else []
    while todo:
        dep = todo.pop()
        if dep in seen or dep not in specs:
            continue
        seen.add(dep)
        todo.extend(specs[dep].depends_on)
    return sorted(d for d in seen if specs[d].sensitive)


def validate_plan(
    data: dict[str, Any], limits: Limits, max_errors: int = MAX_REPORTED_ERRORS,
    *, reads: Reads | None = None,
) -> tuple[PlanSpec, set[str]]:  # fmt: skip
    """The plan and its tainted task ids, or PlanInvalid with every error (the first
    ``max_errors`` of them). ``reads``: the outputs a task takes in besides its templates'
    (a fan-out group's row: its items'), which taint and sensitivity follow too; each
    task ordered after those it reads (they are among its ``depends_on``)."""
    reads = reads or {}
    raw_tasks = data.get("tasks") or []
    if len(raw_tasks) > limits.max_tasks:
        error = _error(None, "tasks", f"{len(raw_tasks)} tasks; the limit is {limits.max_tasks}")
        raise PlanInvalid([error], too_large=True)
    errors: list[dict[str, Any]] = []
    fixes: list[dict[str, str]] = []
    extra = set(data) - {"name", "tasks", "description", "rerun"}
    if extra:
        errors.append(_error(None, "plan", f"unknown plan fields: {sorted(extra)}"))
    rerun = data.get("rerun", False)
    if not isinstance(rerun, bool):
        errors.append(_error(None, "rerun", f"rerun is true or false, got {rerun!r:.60}"))
    specs, too_large = [], False
    for raw in raw_tasks:
        spec, oversized = _check_task(raw, limits, fixes, errors)
        too_large |= oversized
        if spec is not None:
            specs.append(spec)
    raw_ids = [str(raw["id"]) for raw in raw_tasks if isinstance(raw, dict) and "id" in raw]
    order = _check_graph(specs, raw_ids, errors)
    tainted = _check_taint({s.id: s for s in specs}, order, errors, reads) if order else set()
    _propagate_sensitive({s.id: s for s in specs}, order, fixes, reads)
    _check_external(specs, errors)
    name = data.get("name") or "plan"
    if not isinstance(name, str | int | float) or isinstance(name, bool):
        errors.append(_error(None, "name", f"the plan name must be text, got {name!r:.60}"))
    _check_no_nul(None, "name", name, errors)
    if errors:
        raise PlanInvalid(bounded(errors, max_errors), too_large=too_large, fixes=fixes)
    plan = PlanSpec(name=str(name)[:200], tasks=specs, fixes=fixes, rerun=rerun is True)
    return plan, tainted


def bounded(errors: list[dict[str, Any]], limit: int = MAX_REPORTED_ERRORS) -> list[dict[str, Any]]:
    if len(errors) <= limit:
        return errors
    more = len(errors) - limit
    return [*errors[:limit], _error(None, "plan", f"and {more} more errors")]
