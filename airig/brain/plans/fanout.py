"""Fan-out: a group of tasks repeated for each item of a list (PLANS.md, "Fan-out").

A plan task with ``for_each`` and ``tasks`` (instead of ``type`` and ``payload``) is a
group. Its items (``plans/items.py``) come from a ``glob`` of files on the data volume, a
ZIM archive's entries (``zim``, ``plans/zim.py``: extracted onto the volume) or a literal
``items`` list (all expanded here, at submission), or ``from`` a list in an
upstream task's output (expanded when that task succeeds, ``planner/fanout.py``, through
the same functions).

Each item gets a copy of the template tasks under the key ``<group>__<index>__<id>``;
templates and ``depends_on`` naming a template id are renamed to the same item's task,
every item task also waits for the group's own ``depends_on``, and ``{{ item }}`` /
``{{ item.<field> }}`` take the item's values. In a ``shell`` command an item value is
never written into the command: the template becomes a quoted reference to an
environment variable ``AIRIG_ITEM_<FIELD>`` whose value goes into the task's ``env``,
as upstream outputs do (``store/shell_inputs.py``).

The group itself is stored as a task of type ``group`` (never offered to a worker; the
brain ends it when all its item tasks have ended), so ``depends_on: [<group>]`` and
``{{ tasks.<group>.output }}`` work as for any task.

A submitted plan with groups goes through two passes (``validate_with_fanout``): every
group is read and expanded (``expand_groups``), then the whole plan, item tasks and a
stand-in row per group, is validated once (``validate_plan``; the stand-in reads its
items' output tasks, so taint and sensitivity follow them to the group's readers).
Everything here is pure but for the glob and the archives, which read the data volume.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airig.brain.plans.items import ItemError, glob_items, item_text, item_values, placeholder
from airig.brain.plans.items import read_list as read_list  # planner/fanout.py reads it here
from airig.brain.plans.models import PlanSpec, TaskSpec
from airig.brain.plans.validate import Limits, PlanInvalid, bounded, validate_plan
from airig.brain.plans.zim import FILTERS as ZIM_FILTERS
from airig.brain.plans.zim import read_source, zim_items
from airig.brain.store import results, shell_inputs
from airig.brain.store.fanout import GROUP_TYPE
from airig.common import write_paths

SEPARATOR = "__"
MAX_KEY = 64
ITEM = re.compile(r"\{\{\s*item(?:\.([A-Za-z0-9_]+))?\s*\}\}")
ITEM_VARIABLE = "AIRIG_ITEM"
GROUP_FIELDS = {"id", "name", "for_each", "output", "depends_on", "tasks"}
SOURCES = ("glob", "items", "from", "zim")
# ``from: "{{ tasks.<id>.output[.<field>...] }}"``: the whole string is one template.
FROM = re.compile(r"^\s*\{\{\s*tasks\.([A-Za-z0-9_-]+)\.output((?:\.[A-Za-z0-9_]+)*)\s*\}\}\s*$")


@dataclass
class Group:
    """A group as the plan wrote it, checked for shape."""

    key: str
    name: str
    depends_on: list[str]
    template: list[dict[str, Any]]
    output: str
    source: str  # "glob" | "items" | "from"
    spec: Any
    from_key: str | None = None
    from_path: str = ""
    items: list[dict[str, Any]] | None = None
    filters: dict[str, Any] = field(default_factory=dict)  # a ``zim`` source's mimetype, path

    def definition(self) -> dict[str, Any]:
        """What the group's row stores as its payload (a ``from`` group is expanded from it,
        and gets its ``items`` then)."""
        spec = {"for_each": {self.source: self.spec, **self.filters}, "output": self.output,
                "tasks": self.template, "depends_on": self.depends_on}  # fmt: skip
        if self.items is not None:
            spec["items"] = self.items
        return spec


@dataclass
class Expansion:
    """The tasks of a group's items and which item each belongs to."""

    tasks: list[dict[str, Any]] = field(default_factory=list)
    members: dict[str, tuple[str, int]] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)  # each item's output task key


def _error(task: str | None, where: str, message: str) -> dict[str, Any]:
    return {"task": task, "field": where, "message": message}


def is_group(raw: Any) -> bool:
    return isinstance(raw, dict) and ("for_each" in raw or ("tasks" in raw and "type" not in raw))


def item_key(group: str, index: int, task_id: str) -> str:
    return f"{group}{SEPARATOR}{index}{SEPARATOR}{task_id}"


def read_group(raw: dict[str, Any]) -> tuple[Group | None, list[dict[str, Any]]]:
    """The group's shape: its fields, one item source, a template of tasks with ids."""
    key = raw.get("id")
    errors: list[dict[str, Any]] = []
    if not isinstance(key, str) or not re.match(r"^[A-Za-z0-9_-]{1,64}$", key):
        return None, [_error(str(key)[:80], "id", "a group needs an id of letters, digits, _ -")]
    extra = set(raw) - GROUP_FIELDS
    if extra:
        errors.append(_error(key, "group", (
            f"unknown group fields {sorted(extra)}; a group has for_each, tasks, output, "
            "depends_on, name (the task fields go on its template tasks)"
        )))  # fmt: skip
    for_each = raw.get("for_each")
    chosen = [s for s in SOURCES if isinstance(for_each, dict) and s in for_each]
    if not isinstance(for_each, dict) or len(chosen) != 1:
        errors.append(_error(key, "for_each", "give exactly one of glob, items, from, zim"))
        return None, errors
    source = chosen[0]
    filters = {k: v for k, v in for_each.items() if k != source}
    if filters and (source != "zim" or set(filters) - set(ZIM_FILTERS)):
        errors.append(_error(key, "for_each", (
            f"unknown fields {sorted(filters)} beside {source}; only zim takes filters "
            f"({', '.join(ZIM_FILTERS)})"
        )))  # fmt: skip
        return None, errors
    spec = for_each[source]
    deps = raw.get("depends_on", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        errors.append(_error(key, "depends_on", "a list of task ids"))
        deps = []
    template = raw.get("tasks")
    if not isinstance(template, list) or not template:
        errors.append(_error(key, "tasks", "a group needs a non-empty list of template tasks"))
        return None, errors
    ids = [t["id"] for t in template if isinstance(t, dict) and isinstance(t.get("id"), str)]
    if len(ids) != len(template):
        errors.append(_error(key, "tasks", "every template task is a mapping with an id"))
        return None, errors
    if any(is_group(t) for t in template):
        errors.append(_error(key, "tasks", "a group cannot hold another group"))
    output = raw.get("output") or ids[-1]
    if output not in ids:
        errors.append(_error(key, "output", f"{output!r} is not a template task ({ids})"))
    group = Group(key, str(raw.get("name") or key)[:200], list(dict.fromkeys(deps)),
                  template, str(output), source, spec, filters=filters)  # fmt: skip
    if source in ("glob", "zim") and not isinstance(spec, str):
        errors.append(_error(key, f"for_each.{source}", f"a {source} is a text pattern"))
    elif source == "zim":
        try:
            read_source(for_each)
        except ItemError as exc:
            errors.append(_error(key, "for_each", str(exc)))
    elif source == "items" and not isinstance(spec, list):
        errors.append(_error(key, "for_each.items", "items is a list"))
    elif source == "from":
        match = FROM.match(spec) if isinstance(spec, str) else None
        if match is None:
            errors.append(_error(key, "for_each.from", (
                "from is one template naming a list in an upstream output: "
                '"{{ tasks.<id>.output.<field> }}"'
            )))  # fmt: skip
        else:
            group.from_key, group.from_path = match.group(1), match.group(2).strip(".")
            if group.from_key not in group.depends_on:
                group.depends_on.append(group.from_key)  # the group waits for its source
    longest = max((len(item_key(key, 0, i)) for i in ids), default=0)
    if longest > MAX_KEY:
        errors.append(_error(key, "tasks", (
            f"item task keys <group>__<index>__<id> would be longer than {MAX_KEY} "
            f"characters (e.g. {item_key(key, 0, max(ids, key=len))!r}); use shorter ids"
        )))  # fmt: skip
    return (None if errors else group), errors


# ---- templates ------------------------------------------------------------------------


def _substitute(value: Any, item: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return ITEM.sub(lambda m: item_text(item, m.group(1)), value)
    if isinstance(value, dict):
        return {k: _substitute(v, item) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, item) for v in value]
    return value


def _variable(name: str | None) -> str:
    return ITEM_VARIABLE if name is None else f"{ITEM_VARIABLE}_{name.upper()}"


def _shell_payload(payload: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """A shell payload for one item: item templates in ``command`` become quoted variable
    references, their values go into ``env``; other fields get the values themselves."""
    command = payload.get("command")
    env: dict[str, str] = {}

    def reference(match: re.Match[str]) -> str:
        name = _variable(match.group(1))
        env[name] = item_text(item, match.group(1))
        return name

    rest = _substitute({k: v for k, v in payload.items() if k != "command"}, item)
    if isinstance(command, str) or (isinstance(command, list)
                                    and all(isinstance(w, str) for w in command)):  # fmt: skip
        command = shell_inputs.command_with_variables(command, ITEM, reference)
    if env:
        given = rest.get("env")
        rest["env"] = {**(given if isinstance(given, dict) else {}), **env}
    return {"command": command, **rest} if "command" in payload else rest


def _rename(value: Any, names: dict[str, str]) -> Any:
    """``value`` with every ``{{ tasks.<id>.output... }}`` naming a template id renamed."""
    if isinstance(value, str):

        def swap(match: re.Match[str]) -> str:
            key = match.group(1)
            if key not in names:
                return match.group(0)
            text, base = match.group(0), match.start(0)
            start, end = match.span(1)
            return text[: start - base] + names[key] + text[end - base :]

        return results.TEMPLATE.sub(swap, value)
    if isinstance(value, dict):
        return {k: _rename(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename(v, names) for v in value]
    return value


def expand_items(group: Group, items: list[dict[str, Any]], into: Expansion) -> None:
    """Add each item's copy of the template to ``into``; ItemError naming the item."""
    local = [str(t["id"]) for t in group.template]
    for item in items:
        index = int(item["index"])
        names = {task_id: item_key(group.key, index, task_id) for task_id in local}
        for raw in group.template:
            task = dict(raw)
            task["id"] = names[raw["id"]]
            deps = raw.get("depends_on", [])
            deps = deps if isinstance(deps, list) else []
            renamed = [names.get(d, d) if isinstance(d, str) else d for d in deps]
            task["depends_on"] = list(dict.fromkeys([*renamed, *group.depends_on]))
            payload = raw.get("payload", {})
            if isinstance(payload, dict):
                payload = _rename(payload, names)
                if raw.get("type") == "shell":
                    payload = _shell_payload(payload, item)
                else:  # a write path an item fills stays in its plan's folder
                    filled = _substitute(payload, item)
                    problem = write_paths.filled_problem(str(raw.get("type")), payload, filled)
                    if problem is not None:
                        raise ItemError(f"item {index}: {problem}")
                    payload = filled
                task["payload"] = payload
            for text_field in ("name", "model"):
                if isinstance(task.get(text_field), str):
                    task[text_field] = _substitute(task[text_field], item)
            into.tasks.append(task)
            into.members[task["id"]] = (group.key, index)
        into.outputs.append(names[group.output])


def outside_deps(group: Group) -> list[dict[str, Any]]:
    """A template task may depend on its own item's tasks and on what the group waits for."""
    local = {str(t["id"]) for t in group.template}
    errors = []
    for raw in group.template:
        deps = raw.get("depends_on", [])
        for dep in deps if isinstance(deps, list) else []:
            if isinstance(dep, str) and dep not in local and dep not in group.depends_on:
                errors.append(_error(group.key, f"tasks.{raw['id']}.depends_on", (
                    f"{dep!r} is neither a template task nor in the group's depends_on; "
                    "add it to the group's depends_on"
                )))  # fmt: skip
    return errors


# ---- a whole plan ---------------------------------------------------------------------


@dataclass
class Expanded:
    """A plan's groups, expanded: their item tasks (``items``), the tasks a ``from``
    group's template makes of a placeholder item (``samples``, checked and then dropped),
    and the template task each item task copies (``local``)."""

    groups: list[Group] = field(default_factory=list)
    items: Expansion = field(default_factory=Expansion)
    samples: Expansion = field(default_factory=Expansion)
    local: dict[str, str] = field(default_factory=dict)

    def members(self) -> dict[str, tuple[str, int]]:
        return {**self.items.members, **self.samples.members}

    def keys(self) -> set[str]:
        return {g.key for g in self.groups}

    def reads(self) -> dict[str, list[str]]:
        """What each group's row takes in: every item's output task, and a ``from``
        group's source."""
        return {g.key: [*expansion_outputs(g, self.items), *expansion_outputs(g, self.samples),
                        *([g.from_key] if g.from_key else [])] for g in self.groups}  # fmt: skip


def _stand_in(group: Group, reads: list[str]) -> dict[str, Any]:
    """What the validator sees for the group: a noop waiting for every item's output task
    (and a ``from`` group's source), which ``validate_plan`` makes untrusted / sensitive
    when any of them is, so taint and sensitivity reach the group's readers. No payload:
    a template per item would make it as large as the group."""
    return {
        "id": group.key, "name": group.name, "type": "noop", "task_class": "cpu",
        "depends_on": list(dict.fromkeys([*group.depends_on, *reads])),
    }  # fmt: skip


def expansion_outputs(group: Group, expansion: Expansion) -> list[str]:
    prefix = f"{group.key}{SEPARATOR}"
    return [key for key in expansion.outputs if key.startswith(prefix)]


def _dedupe(
    errors: list[dict[str, Any]], members: dict[str, tuple[str, int]], local: dict[str, str]
) -> list[dict[str, Any]]:
    """Errors of item tasks reported once per template task (naming the group, the
    template id and how many items share it), not once per item."""
    out: list[dict[str, Any]] = []
    seen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for error in errors:
        task = error.get("task")
        if task not in members:
            out.append(error)
            continue
        group, index = members[task]
        where = f"tasks.{local[task]}.{error.get('field')}"
        message = str(error.get("message")).replace(f"{group}{SEPARATOR}{index}{SEPARATOR}", "")
        found = seen.get((group, where, message))
        if found is None:
            found = {"task": group, "field": where, "message": message, "items": []}
            seen[group, where, message] = found
            out.append(found)
        found["items"].append(index)
    for error in seen.values():
        items = error.pop("items")
        shown = ", ".join(map(str, items[:5])) + (f" and {len(items) - 5} more" if len(items) > 5
                                                  else "")  # fmt: skip
        error["message"] += f" (item {shown})" if len(items) == 1 else f" (items {shown})"
    return out


def _dedupe_fixes(
    fixes: list[dict[str, str]],
    local: dict[str, str],
    members: dict[str, tuple[str, int]],
    groups: set[str],
) -> list[dict[str, str]]:
    out, seen = [], set()
    for fix in fixes:
        task = fix.get("task", "")
        if task in groups:
            continue
        if task in members:
            group = members[task][0]
            fix = {**fix, "task": group, "field": f"tasks.{local[task]}.{fix.get('field')}"}
            if (fix["task"], fix["field"]) in seen:
                continue
            seen.add((fix["task"], fix["field"]))
        out.append(fix)
    return out


class Uncounted(Exception):
    """A group whose ``items`` list was given by its count alone (``counts``) is within
    what the plan may hold: its items are needed, so the plan is read whole."""


def validate_with_fanout(
    data: dict[str, Any],
    limits: Limits,
    data_dir: Path | None,
    counts: dict[int, int] | None = None,
) -> tuple[PlanSpec, set[str]]:
    """``validate_plan``, with every group expanded first (glob and items now; a ``from``
    group's template checked with a placeholder item). PlanInvalid names the group of any
    problem of its items, once per template task. ``counts`` (a task's position in
    ``tasks``: its ``items`` list's length) stands for lists not built (``plans/load.py``):
    each must be refused by its count, else ``Uncounted``."""
    raw_tasks = data.get("tasks") or []
    if not isinstance(raw_tasks, list) or not any(is_group(raw) for raw in raw_tasks):
        return validate_plan(data, limits)
    if len(raw_tasks) > limits.max_tasks:
        error = _error(None, "tasks", f"{len(raw_tasks)} tasks; the limit is {limits.max_tasks}")
        raise PlanInvalid([error], too_large=True)
    expanded = expand_groups(raw_tasks, limits, data_dir, counts or {})
    if counts:
        raise Uncounted  # every counted group was within the limit: not refused
    plain = [raw for raw in raw_tasks if not is_group(raw)]
    plan, tainted = _validate_expanded(data, plain, expanded, limits)
    errors = _from_checks(expanded.groups, plan, tainted, expanded.keys())
    if errors:
        raise PlanInvalid(errors)
    plan.fixes = _dedupe_fixes(plan.fixes, expanded.local, expanded.members(), expanded.keys())
    return _finished(plan, tainted, expanded), tainted


def expand_groups(
    raw_tasks: list[Any],
    limits: Limits,
    data_dir: Path | None,
    counts: dict[int, int] | None = None,
) -> Expanded:
    """The first pass: every group read and expanded, in the plan's order, each within
    what the plan may still hold; PlanInvalid with every group's problems."""
    expanded, errors = Expanded(), []
    # the plan's own tasks and group rows count too, as they do for a growing plan
    budget = limits.plan_max_tasks - len(raw_tasks)
    for position, raw in enumerate(raw_tasks):
        if not is_group(raw):
            continue
        group, problems = read_group(raw)
        errors += problems
        if group is None:
            continue
        errors += outside_deps(group)
        expanded.groups.append(group)
        known = (counts or {}).get(position)
        if known is not None:  # an ``items`` list not built: refused by its count or read whole
            refusal = too_many(group, known, budget, limits.plan_max_tasks)
            if refusal is None or group.source != "items":
                raise Uncounted
            errors.append(refusal)
            budget = -1
            continue
        problem, budget = _expand_group(group, data_dir, budget, limits.plan_max_tasks, expanded)
        if problem is not None:
            errors.append(problem)
    if errors:
        raise PlanInvalid(errors)
    return expanded


def _expand_group(
    group: Group, data_dir: Path | None, budget: int, plan_max: int, into: Expanded
) -> tuple[dict[str, Any] | None, int]:
    """One group's items and their tasks added to ``into``: (the group's problem or None,
    the tasks the plan may still hold after it; -1 once a group is refused for its size,
    so each later one is refused naming its own count)."""
    if group.source == "items" and isinstance(group.spec, list) and group.spec:
        # Counted before any item is built: an item's fields take ~300 bytes of Python
        # objects, so a 1 MB list of half a million numbers made 150 MB to refuse.
        refusal = too_many(group, len(group.spec), budget, plan_max)
        if refusal is not None:
            return refusal, -1
    try:
        items = _static_items(group, data_dir, budget // len(group.template) + 1)
    except ItemError as exc:
        return _error(group.key, f"for_each.{group.source}", str(exc)), budget
    group.items = items
    if items is None:  # a ``from`` group: its template checked on a placeholder item
        target, items = into.samples, [placeholder()]
    else:
        target = into.items
        problem, budget = _sized(group, items, budget, plan_max)
        if problem is not None:
            return problem, budget
    try:
        expand_items(group, items, target)
    except ItemError as exc:
        return _error(group.key, "tasks", str(exc)), budget
    for raw_task in group.template:
        for item in items:
            into.local[item_key(group.key, int(item["index"]), str(raw_task["id"]))] = raw_task[
                "id"
            ]
    return None, budget


def _sized(
    group: Group, items: list[dict[str, Any]], budget: int, plan_max: int
) -> tuple[dict[str, Any] | None, int]:
    """A glob's, an archive's or a literal list's items checked for their number: at least
    one, within what the plan may still hold, and keys within MAX_KEY. (problem or None,
    budget left)"""
    if not items:
        what = f"{group.source} {group.spec!r:.120}" if group.source != "items" else "items"
        what += "".join(f", {k} {v!r:.80}" for k, v in group.filters.items())  # zim's
        return _error(group.key, f"for_each.{group.source}",
                      f"{what} matched nothing (0 items)"), budget  # fmt: skip
    refusal = too_many(group, len(items), budget, plan_max)
    if refusal is not None:
        return refusal, -1
    budget -= len(items) * len(group.template)
    longest = max(len(str(t["id"])) for t in group.template)
    if len(item_key(group.key, len(items) - 1, "x" * longest)) > MAX_KEY:
        return _error(group.key, "tasks", (
            f"with {len(items)} items the keys <group>__<index>__<id> pass {MAX_KEY} "
            "characters; use a shorter group id or template ids"
        )), budget  # fmt: skip
    return None, budget


def _validate_expanded(
    data: dict[str, Any], plain: list[Any], expanded: Expanded, limits: Limits
) -> tuple[PlanSpec, set[str]]:
    """The second pass: the plan's own tasks, its item and sample tasks and a stand-in
    row per group validated at once. PlanInvalid names a group's template task once for
    all the items that share a problem."""
    reads = expanded.reads()
    stand_ins = [_stand_in(g, reads[g.key]) for g in expanded.groups]
    tasks = plain + expanded.items.tasks + expanded.samples.tasks + stand_ins
    try:
        return validate_plan(
            {**data, "tasks": tasks}, Limits(len(tasks), limits.max_payload_bytes),
            len(tasks) * 50, reads=reads,
        )  # fmt: skip
    except PlanInvalid as exc:
        members = expanded.members()
        fixes = _dedupe_fixes(exc.fixes, expanded.local, members, expanded.keys())
        errors = bounded(_dedupe(exc.errors, members, expanded.local))
        raise PlanInvalid(errors, exc.too_large, fixes) from None


def too_many(group: Group, items: int, budget: int, plan_max: int) -> dict[str, Any] | None:
    """The group's refusal when ``items`` copies of its template pass what the plan may
    still hold (``budget`` tasks), else None; from the count alone, before any item is
    built. A glob stops reading at the limit, so its count is a floor (``N+``)."""
    count = items * len(group.template)
    if count <= budget:
        return None
    return _error(group.key, f"for_each.{group.source}", (
        f"{items}{'+' if group.source in ('glob', 'zim') else ''} items x {len(group.template)} "
        f"tasks = {count} tasks; with the plan's other tasks that passes the limit of "
        f"{plan_max} (AIRIG_PLAN_MAX_TASKS)"
    ))  # fmt: skip


def _static_items(group: Group, data_dir: Path | None, limit: int) -> list[dict[str, Any]] | None:
    """A glob's, an archive's or a literal list's items; None for a ``from`` group (known
    at run time)."""
    if group.source == "glob":
        if data_dir is None:
            raise ItemError("this brain has no data volume to glob")
        return glob_items(data_dir, str(group.spec), limit)
    if group.source == "zim":
        if data_dir is None:
            raise ItemError("this brain has no data volume to read archives on")
        return zim_items(data_dir, read_source({"zim": group.spec, **group.filters}), limit)
    if group.source == "items":
        return [item_values(entry, i) for i, entry in enumerate(group.spec)]
    return None


def _from_checks(
    groups: list[Group], plan: PlanSpec, tainted: set[str], group_keys: set[str]
) -> list[dict[str, Any]]:
    by_id = {spec.id: spec for spec in plan.tasks}
    errors = []
    for group in groups:
        if group.from_key is None:
            continue
        if group.from_key in group_keys or any(d in group_keys for d in group.depends_on):
            errors.append(_error(group.key, "depends_on", (
                "a `from` group reads an ordinary task's output and cannot wait for a group"
            )))  # fmt: skip
        shell = [str(t["id"]) for t in group.template if t.get("type") == "shell"]
        source = by_id.get(group.from_key)
        if shell and source is not None and group.from_key in tainted:
            errors.append(_error(group.key, "trust", (
                f"its items come from untrusted task {group.from_key!r}; a shell task "
                f"({shell}) never runs on untrusted data"
            )))  # fmt: skip
    return errors


def _finished(plan: PlanSpec, tainted: set[str], expanded: Expanded) -> PlanSpec:
    """The plan to store: sample tasks of ``from`` groups dropped, each stand-in replaced
    by the group's own row."""
    samples = expanded.samples
    by_key = {g.key: g for g in expanded.groups}
    tasks: list[TaskSpec] = []
    for spec in plan.tasks:
        if spec.id in samples.members:
            continue
        group = by_key.get(spec.id)
        if group is not None:
            spec = TaskSpec(
                id=group.key, name=group.name, type=GROUP_TYPE, task_class="cpu",
                payload=group.definition(), depends_on=group.depends_on,
                trust="untrusted" if spec.id in tainted else "trusted",
                sensitive=spec.sensitive, retry_count=0,
            )  # fmt: skip
        tasks.append(spec)
    for key in samples.members:
        tainted.discard(key)
    return PlanSpec(name=plan.name, tasks=tasks, fixes=plan.fixes,
                    members=expanded.items.members, rerun=plan.rerun)  # fmt: skip
