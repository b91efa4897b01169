"""A ``from`` fan-out group grows when its source task succeeds (PLANS.md, "Fan-out").

``leases.complete`` (and the external tier's answer, ``escalation/reply.py``) call
``start_groups`` in the completion's transaction, after the dependents were released: a
``from`` group whose every dependency has succeeded reads the list in its source's
output, expands its template per item (``plans/fanout.py``, as a submitted group), and
its item tasks join the plan through the validator and ``grow.py``'s insert, with a
``tasks_added`` event on the group. Items from tainted output (the source ran untrusted
or on an untrusted rig) make untrusted item tasks, and a template holding a shell task
then fails the growth.

Anything that stops the growth (not a list, no such field, too many items, a refused
template) fails the *group* with one error naming it, the path and the count; its
dependents become UPSTREAM_FAILED as usual, the source task stays SUCCEEDED. An empty
list ends the group at once, SUCCEEDED with no items.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from airig.brain.planner import grow
from airig.brain.plans import fanout as expand
from airig.brain.plans.validate import Limits, PlanInvalid, validate_plan
from airig.brain.settings import BrainSettings
from airig.brain.store import fanout, results, states
from airig.brain.store.events import Outbox, record
from airig.common.jsonsafe_text import OutputText


class GroupRefused(Exception):
    """The group cannot grow; the message names the group and why."""


def start_groups(
    conn: sqlite3.Connection, outbox: Outbox, upstream: sqlite3.Row, now: float,
    settings: BrainSettings, output: results.Output | None = None,
) -> None:  # fmt: skip
    """Expand every ``from`` group ``upstream`` just released; fail the ones that cannot.
    ``output``: upstream's output as the caller holds it (the completion just stored it),
    so that a large one is not read back beside it; None: read from the store."""
    known = {upstream["id"]: output} if output is not None else {}
    for group in fanout.unexpanded_groups(conn, upstream):
        try:
            _grow(conn, outbox, group, now, settings, known)
        except GroupRefused as exc:
            fresh = states.require_task(conn, group["id"])
            states.fail_terminal(conn, outbox, fresh, now, "fanout_failed", str(exc)[:4000],
                                 "fan-out refused")  # fmt: skip


def _source(conn: sqlite3.Connection, group: sqlite3.Row, key: str) -> sqlite3.Row:
    row = fanout.task_by_key(conn, group["plan_id"], key)
    if row is None:
        raise GroupRefused(f"group {group['key']}: its source task {key!r} is gone")
    return row


def _grow(
    conn: sqlite3.Connection, outbox: Outbox, group: sqlite3.Row, now: float,
    settings: BrainSettings, known: dict[int, results.Output],
) -> None:  # fmt: skip
    spec = fanout.definition(group)
    raw = {"id": group["key"], "name": group["name"], "for_each": spec["for_each"],
           "output": spec["output"], "tasks": spec["tasks"],
           "depends_on": spec.get("depends_on", [])}  # fmt: skip
    shape, errors = expand.read_group(raw)
    if shape is None or shape.from_key is None:
        raise GroupRefused(f"group {group['key']}: {errors}")
    where = (
        f"{{{{ tasks.{shape.from_key}.output{'.' if shape.from_path else ''}{shape.from_path} }}}}"
    )
    source = _source(conn, group, shape.from_key)
    existing = fanout.task_count(conn, group["plan_id"])
    known_output = known.get(source["id"])
    if isinstance(known_output, OutputText):  # a list kept as the body's text: its length
        _check_count(group, shape, where, existing, known_output.count_at(shape.from_path),
                     settings)  # fmt: skip
    try:
        output = results.value_of(known_output) if known_output is not None else None
        if output is None:
            output = fanout.load_output(conn, settings.results_dir, source)
        entries = expand.read_list(output, shape.from_path)
    except (expand.ItemError, OSError, ValueError) as exc:
        raise GroupRefused(f"group {group['key']}: {where}: {exc}") from None
    # Counted before any item is built: each item's fields are a few hundred bytes of
    # objects, so a source listing 4 million numbers made 1.3 GB (and 20 s inside the
    # completion) only to be refused here.
    _check_count(group, shape, where, existing, len(entries), settings)
    try:
        items = [expand.item_values(entry, i) for i, entry in enumerate(entries)]
    except expand.ItemError as exc:
        raise GroupRefused(f"group {group['key']}: {where}: {exc}") from None
    del output, entries
    shape.items = items
    fanout.set_definition(conn, group, {**spec, "items": items})
    if not items:
        states.finish_group(conn, outbox, states.require_task(conn, group["id"]), now)
        return
    tainted = bool(source["tainted_output"]) or not source["trusted"]
    expansion = expand.Expansion()
    try:
        expand.expand_items(shape, items, expansion)
    except expand.ItemError as exc:
        raise GroupRefused(f"group {group['key']}: {where}: {exc}") from None
    _insert(conn, outbox, group, shape, expansion, tainted, now, settings)


def _check_count(
    group: sqlite3.Row, shape: expand.Group, where: str, existing: int, items: int | None,
    settings: BrainSettings,
) -> None:  # fmt: skip
    """GroupRefused when ``items`` items (None: not known yet) pass the plan's task cap."""
    if items is None:
        return
    count = items * len(shape.template)
    if existing + count > settings.plan_max_tasks:
        raise GroupRefused(
            f"group {group['key']}: {where} holds {items} items x {len(shape.template)} "
            f"tasks = {count} tasks; the plan would hold {existing + count}, the limit is "
            f"{settings.plan_max_tasks} (AIRIG_PLAN_MAX_TASKS)"
        )


def _insert(
    conn: sqlite3.Connection, outbox: Outbox, group: sqlite3.Row, shape: expand.Group,
    expansion: expand.Expansion, tainted: bool, now: float, settings: BrainSettings,
) -> None:  # fmt: skip
    tasks: list[dict[str, Any]] = []
    for task in expansion.tasks:
        task = dict(task)
        if tainted:
            task["trust"] = "untrusted"  # the validator then refuses a shell task too
        if group["sensitive"]:
            task["sensitive"] = True
        tasks.append(task)
    names = {task["id"]: task["id"] for task in tasks}
    stand_ins, ref_errors = grow._existing_refs(conn, group, tasks, names)
    limits = Limits(len(tasks) + len(stand_ins), settings.max_payload_bytes)
    errors = list(ref_errors)
    try:
        plan, tainted_keys = validate_plan({"name": "fanout", "tasks": tasks + stand_ins}, limits)
    except PlanInvalid as exc:
        errors += exc.errors
    if errors:
        first = errors[0]
        where = "untrusted items" if tainted else "items"
        raise GroupRefused(
            f"group {group['key']}: its {len(shape.items or [])} {where} were refused "
            f"({len(errors)} errors); first: {first.get('task')}.{first.get('field')}: "
            f"{first.get('message')}"
        )
    new = [spec for spec in plan.tasks if spec.id in expansion.members]
    origin = f"fanout:{group['key']}"
    with fanout.savepoint(conn, "fanout"):
        ids = grow._insert(conn, outbox, group, new, tainted_keys, origin, now, settings)
        fanout.set_members(conn, group["plan_id"], expansion.members)
    record(conn, outbox, "tasks_added", group, now, origin=origin,
           added=[spec.id for spec in new], items=len(shape.items or []))  # fmt: skip
    for row in fanout.rows_by_ids(conn, list(ids.values())):
        record(conn, outbox, "task_submitted", row, now, to=row["state"], origin=origin)
        if row["state"] == "READY":
            outbox.work_ready = True
