"""Growing a running plan: tasks a `plan` task (or the external tier) proposes join its graph.

``add_subtasks`` is the one way in, for both origins. The proposed tasks go through the
same validator as a hand-written plan (``plans/validate.py``), after their ids are put
under the parent's (``<parent_key>__<id>``: task keys allow only ``[A-Za-z0-9_-]``, which
templates and result paths rely on, so the separator cannot be a dot). A proposed task
may depend on another proposed task (by its short id) or on any existing task of the plan
that is not downstream of the parent; it depends on nothing else.

Refused whole (nothing inserted), with every reason in one ``GrowthRefused``:
- any validator error (unknown type, bad payload, cycle, unknown dependency, ...);
- a ``shell`` task from outside (``origin == "external"``) or from tainted output: a
  command never comes from data the rig did not write;
- the caps: ``AIRIG_PLAN_MAX_TASKS`` tasks in the plan, ``AIRIG_PLAN_MAX_DEPTH`` growths
  deep (a hand-written task is depth 0, what it adds depth 1, ...);
- a task writing on the data volume (note, frames, pages) anywhere but inside
  ``outputs/<plan id>/``: each path a model proposes is tainted data
  (``common/write_paths.py`` ``grown_problem``).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from airig.brain.plans.validate import Limits, PlanInvalid, validate_plan
from airig.brain.settings import BrainSettings
from airig.brain.store import growth
from airig.brain.store.events import Outbox, record
from airig.brain.store.results import TEMPLATE, references
from airig.common import write_paths
from airig.common.protocol import TaskState as S

ORIGINS = ("plan", "external")
SEPARATOR = "__"
# Keys the validator accepts (plans/models.py TASK_ID_PATTERN): a namespaced key must fit.
MAX_KEY = 64
# A dependency on a task that can no longer succeed would leave the new task PENDING for ever.
DEAD_STATES = {S.FAILED, S.CANCELLED, S.UPSTREAM_FAILED}


@dataclass
class GrowthRefused(PlanInvalid):
    """The proposed tasks were refused; ``errors`` as the validator reports them, each
    ``task`` naming the proposed (short) id, so a model can be shown them as they are."""

    def __str__(self) -> str:
        return "proposed tasks refused: " + "; ".join(
            f"{e.get('task') or 'plan'}.{e.get('field')}: {e.get('message')}" for e in self.errors
        )


def subtask_key(parent_key: str, task_id: str) -> str:
    return f"{parent_key}{SEPARATOR}{task_id}"


def _error(task: str | None, where: str, message: str) -> dict[str, Any]:
    return {"task": task, "field": where, "message": message}


def _rename_templates(value: Any, names: dict[str, str]) -> Any:
    """``value`` with every ``{{ tasks.<id>.output... }}`` naming a proposed id renamed."""
    if isinstance(value, str):

        def swap(match: re.Match[str]) -> str:
            key = match.group(1)
            if key not in names:
                return match.group(0)
            start, end = match.span(1)
            base = match.start(0)
            text = match.group(0)
            return text[: start - base] + names[key] + text[end - base :]

        return TEMPLATE.sub(swap, value)
    if isinstance(value, dict):
        return {k: _rename_templates(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename_templates(v, names) for v in value]
    return value


def _caps(
    conn: sqlite3.Connection, parent: sqlite3.Row, count: int, settings: BrainSettings
) -> list[dict[str, Any]]:
    errors = []
    depth = (parent["depth"] or 0) + 1
    if depth > settings.plan_max_depth:
        errors.append(_error(None, "depth", (
            f"task {parent['key']!r} is {depth - 1} growths deep; a plan grows at most "
            f"{settings.plan_max_depth} levels (AIRIG_PLAN_MAX_DEPTH)"
        )))  # fmt: skip
    existing = growth.task_count(conn, parent["plan_id"])
    if existing + count > settings.plan_max_tasks:
        errors.append(_error(None, "tasks", (
            f"{count} more tasks would make the plan {existing + count}; the limit is "
            f"{settings.plan_max_tasks} (AIRIG_PLAN_MAX_TASKS)"
        )))  # fmt: skip
    return errors


def _namespaced(
    proposed: list[Any], parent: sqlite3.Row, untrusted: bool, external: bool
) -> tuple[list[dict[str, Any]], dict[str, str], list[dict[str, Any]]]:
    """(tasks with namespaced ids, {short id: key}, errors found before validation)."""
    errors: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for raw in proposed:
        if isinstance(raw, dict) and isinstance(raw.get("id"), str):
            key = subtask_key(parent["key"], raw["id"])
            if len(key) > MAX_KEY:
                errors.append(_error(raw["id"], "id", (
                    f"under {parent['key']!r} the key {key[:80]!r} is longer than {MAX_KEY} "
                    "characters; use a shorter id"
                )))  # fmt: skip
            names[raw["id"]] = key
    tasks = []
    for raw in proposed:
        if not isinstance(raw, dict):
            tasks.append(raw)  # the validator reports it
            continue
        task = dict(raw)
        if isinstance(task.get("id"), str):
            task["id"] = names[task["id"]]
        if isinstance(task.get("depends_on"), list):
            task["depends_on"] = [names.get(d, d) if isinstance(d, str) else d
                                  for d in task["depends_on"]]  # fmt: skip
        if "payload" in task:
            task["payload"] = _rename_templates(task["payload"], names)
        if untrusted:
            task["trust"] = "untrusted"  # the validator then refuses any shell task too
        if parent["sensitive"]:
            task["sensitive"] = True  # made from the parent's data
        if task.get("allow_external") and not parent["allow_external"]:
            # A model's proposal cannot widen what may leave the machine: only a task whose
            # own plan allowed sending sensitive data passes that on to what it adds.
            task["allow_external"] = False
        if external and task.get("type") == "shell":
            errors.append(_error(raw.get("id"), "type", (
                "the external tier cannot add shell tasks; a command never comes from outside"
            )))  # fmt: skip
        tasks.append(task)
    return tasks, names, errors


def _existing_refs(
    conn: sqlite3.Connection, parent: sqlite3.Row, tasks: list[Any], names: dict[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Stand-ins for the existing tasks the proposal names (so the validator sees them,
    with their trust, and taint flows through templates), and errors for names it may not
    use: the parent's downstream (a cycle through the growth) and dead tasks."""
    short = {key: task_id for task_id, key in names.items()}
    wanted: dict[str, str] = {}  # existing key -> the proposed task naming it
    for task in tasks:
        if not isinstance(task, dict):
            continue
        deps: list[Any] = task["depends_on"] if isinstance(task.get("depends_on"), list) else []
        refs = {dep for dep in deps if isinstance(dep, str)} | references(task.get("payload"))
        for ref in refs - set(short):
            wanted.setdefault(ref, short.get(str(task.get("id")), str(task.get("id"))))
    if not wanted:
        return [], []
    rows = growth.tasks_named(conn, parent["plan_id"], sorted(wanted))
    downstream = set(growth.downstream(conn, parent["id"]).values())
    stand_ins, errors = [], []
    for row in rows:
        who = wanted[row["key"]]
        if row["key"] in downstream:
            errors.append(_error(who, "depends_on", (
                f"task {row['key']!r} waits for {parent['key']!r} and so for its subtasks; "
                "a subtask cannot depend on it"
            )))  # fmt: skip
        elif row["state"] in DEAD_STATES:
            errors.append(_error(who, "depends_on", f"task {row['key']!r} is {row['state']}"))
        untrusted = row["tainted_output"] or not row["trusted"]
        stand_ins.append({
            "id": row["key"], "type": "noop", "task_class": "cpu",
            "trust": "untrusted" if untrusted else "trusted", "sensitive": bool(row["sensitive"]),
        })  # fmt: skip
    return stand_ins, errors


def _validate(
    conn: sqlite3.Connection,
    parent: sqlite3.Row,
    proposed: list[Any],
    settings: BrainSettings,
    untrusted: bool,
    external: bool,
) -> tuple[list[Any], set[str], dict[str, str]]:
    """(validated specs of the new tasks, tainted keys, {short id: key}) or GrowthRefused."""
    tasks, names, errors = _namespaced(proposed, parent, untrusted, external)
    stand_ins, ref_errors = _existing_refs(conn, parent, tasks, names)
    errors += ref_errors
    taken = growth.keys_taken(conn, parent["plan_id"], sorted(names.values()))
    short = {key: task_id for task_id, key in names.items()}
    errors += [_error(short[r["key"]], "id", f"the plan already has a task {r['key']!r}")
               for r in taken]  # fmt: skip
    limits = Limits(
        max_tasks=len(tasks) + len(stand_ins), max_payload_bytes=settings.max_payload_bytes
    )
    fixes: list[dict[str, str]] = []
    try:
        plan, tainted = validate_plan({"name": "growth", "tasks": tasks + stand_ins}, limits)
    except PlanInvalid as exc:
        errors += exc.errors
        fixes = exc.fixes
    for task in tasks:  # every path a model proposes is tainted: outputs/<plan id>/ only
        payload = task.get("payload") if isinstance(task, dict) else None
        if isinstance(payload, dict) and isinstance(task.get("id"), str):
            unfit = write_paths.grown_problem(str(task.get("type")), payload, parent["plan_id"])
            if unfit is not None:
                errors.append(_error(task["id"], f"payload.{unfit[0]}", unfit[1]))
    if errors:
        for error in errors:
            error["task"] = short.get(error.get("task") or "", error.get("task"))
        raise GrowthRefused(errors, fixes=fixes)
    new = [spec for spec in plan.tasks if spec.id in short]
    return new, tainted, names


def _insert(
    conn: sqlite3.Connection,
    outbox: Outbox,
    parent: sqlite3.Row,
    specs: list[Any],
    tainted: set[str],
    origin: str,
    now: float,
    settings: BrainSettings,
) -> dict[str, int]:
    depth = (parent["depth"] or 0) + 1
    ids: dict[str, int] = {}
    existing_states = growth.states_by_key(conn, parent["plan_id"])
    new_keys = {spec.id for spec in specs}
    for spec in specs:
        waiting = [d for d in spec.depends_on if d in new_keys or existing_states[d] != S.SUCCEEDED]
        state = S.PENDING if waiting else S.READY
        ids[spec.id] = growth.insert_task(
            conn, parent["plan_id"], spec, spec.id not in tainted,
            spec.timeout_s or settings.default_timeout_s, state, now,
            now if state == S.READY else None, origin, depth,
        )  # fmt: skip
    uid_of = growth.ids_by_key(conn, parent["plan_id"])
    for spec in specs:
        growth.add_deps(conn, [(ids[spec.id], uid_of[dep]) for dep in spec.depends_on])
    return ids


def _hold_dependents(
    conn: sqlite3.Connection, parent: sqlite3.Row, specs: list[Any], ids: dict[str, int]
) -> None:
    """The parent's unfinished dependents wait for the new leaves too.

    A task that depended on the parent consumed "the work the parent stands for": for a
    `plan` task (or an escalated task broken down) that work is done by its subtasks, so
    releasing the dependents when the parent alone finishes would run them on half the
    results. Leaves suffice: every other new task is upstream of some leaf.
    """
    upstream = {dep for spec in specs for dep in spec.depends_on}
    leaves = [ids[spec.id] for spec in specs if spec.id not in upstream]
    new = set(ids.values())
    for row in growth.dependents(conn, parent["id"]):
        if row["id"] in new or row["state"] in S.TERMINAL:
            continue
        growth.add_deps_if_missing(conn, [(row["id"], leaf) for leaf in leaves])


def add_subtasks(
    conn: sqlite3.Connection,
    outbox: Outbox,
    settings: BrainSettings,
    parent: sqlite3.Row,
    proposed: list[dict[str, Any]],
    origin: str,
    now: float,
    tainted: bool,
) -> list[int]:
    """Add ``proposed`` to ``parent``'s plan in the caller's transaction; the new task uids.

    ``origin`` is "plan" (a `plan` task's model) or "external" (the external tier's
    breakdown); ``tainted`` says the proposal came from tainted output. Raises
    ``GrowthRefused`` with every error and inserts nothing when any check fails.
    """
    if origin not in ORIGINS:
        raise ValueError(f"origin {origin!r} is not one of {ORIGINS}")
    if not isinstance(proposed, list):
        raise GrowthRefused([_error(None, "tasks", "the proposed tasks must be a list")])
    if not proposed:
        return []
    caps = _caps(conn, parent, len(proposed), settings)
    if caps:
        raise GrowthRefused(caps)
    external = origin == "external"
    specs, tainted_keys, _ = _validate(
        conn, parent, proposed, settings, untrusted=tainted or external, external=external
    )
    where = f"{origin}:{parent['key']}"
    # A savepoint: should an insert fail after all checks passed, the caller's
    # transaction (which goes on, e.g. to fail the parent) holds none of this growth.
    with growth.savepoint(conn):
        ids = _insert(conn, outbox, parent, specs, tainted_keys, where, now, settings)
        _hold_dependents(conn, parent, specs, ids)
    record(conn, outbox, "tasks_added", parent, now, origin=where,
           added=[spec.id for spec in specs], depth=(parent["depth"] or 0) + 1)  # fmt: skip
    rows = growth.tasks_by_id(conn, list(ids.values()))
    for row in rows:
        record(conn, outbox, "task_submitted", row, now, to=row["state"], origin=where)
        if row["state"] == S.READY:
            outbox.work_ready = True
    return [row["id"] for row in rows]
