"""Fan-out: a group of tasks repeated for each item of a list (PLANS.md, "Fan-out").

A plan task with ``for_each`` and ``tasks`` (instead of ``type`` and ``payload``) is a
group. Its items come from a ``glob`` of files on the data volume or a literal ``items``
list (both expanded here, at submission), or ``from`` a list in an upstream task's output
(expanded when that task succeeds, ``planner/fanout.py``, through the same functions).

Each item gets a copy of the template tasks under the key ``<group>__<index>__<id>``;
templates and ``depends_on`` naming a template id are renamed to the same item's task,
every item task also waits for the group's own ``depends_on``, and ``{{ item }}`` /
``{{ item.<field> }}`` take the item's values. In a ``shell`` command an item value is
never written into the command: the template becomes a quoted reference to an
environment variable ``AIRIG_ITEM_<FIELD>`` whose value goes into the task's ``env``,
as upstream outputs do (``store/shell_inputs.py``).

The group itself is stored as a task of type ``group`` (never offered to a worker; the
brain ends it when all its item tasks have ended), so ``depends_on: [<group>]`` and
``{{ tasks.<group>.output }}`` work as for any task. Everything here is pure but for the
glob, which reads the data volume.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from airig.brain.plans.models import PlanSpec, TaskSpec
from airig.brain.plans.validate import Limits, PlanInvalid, bounded, validate_plan
from airig.brain.store import results, shell_inputs
from airig.brain.store.fanout import GROUP_TYPE
from airig.common import write_paths

SEPARATOR = "__"
MAX_KEY = 64
ITEM = re.compile(r"\{\{\s*item(?:\.([A-Za-z0-9_]+))?\s*\}\}")
ITEM_VARIABLE = "AIRIG_ITEM"
GROUP_FIELDS = {"id", "name", "for_each", "output", "depends_on", "tasks"}
SOURCES = ("glob", "items", "from")
# ``from: "{{ tasks.<id>.output[.<field>...] }}"``: the whole string is one template.
FROM = re.compile(r"^\s*\{\{\s*tasks\.([A-Za-z0-9_-]+)\.output((?:\.[A-Za-z0-9_]+)*)\s*\}\}\s*$")


class _Placeholder(dict[str, Any]):
    """What a ``from`` template is checked with at submission (its items are not known
    yet): it has every field a template may name."""

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> str:
        return "item"


def placeholder() -> dict[str, Any]:
    return _Placeholder(value="item", path="item.txt", name="item.txt", stem="item",
                        suffix=".txt", dir=".", index=0)  # fmt: skip


class ItemError(ValueError):
    """An item (or a template's use of one) that cannot be expanded."""


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

    def definition(self) -> dict[str, Any]:
        """What the group's row stores as its payload (a ``from`` group is expanded from it,
        and gets its ``items`` then)."""
        spec = {"for_each": {self.source: self.spec}, "output": self.output,
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
    if not isinstance(for_each, dict) or len(chosen) != 1 or len(for_each) != 1:
        errors.append(_error(key, "for_each", "give exactly one of glob, items, from"))
        return None, errors
    source = chosen[0]
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
                  template, str(output), source, spec)  # fmt: skip
    if source == "glob" and not isinstance(spec, str):
        errors.append(_error(key, "for_each.glob", "a glob is a text pattern"))
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


# ---- items ----------------------------------------------------------------------------


def _path_fields(path: str) -> dict[str, Any]:
    pure = PurePosixPath(path)
    return {"path": path, "name": pure.name, "stem": pure.stem, "suffix": pure.suffix,
            "dir": str(pure.parent)}  # fmt: skip


def _looks_like_path(text: str) -> bool:
    pure = PurePosixPath(text)
    return (
        bool(text) and ("/" in text or bool(pure.suffix)) and not pure.is_absolute()
        and ".." not in pure.parts and "://" not in text and "\n" not in text
    )  # fmt: skip


# The characters an upload takes out of a file name (``launcher/inputs_sync.py``
# UNSAFE_CHARS, separators aside): control characters, and the bidirectional controls that
# make ``gpj.exe`` read as ``exe.jpg``. NUL is refused in every item value (no path,
# argument or environment variable can hold one: the task would fail on its worker, or
# the value be cut short); the rest in a value that reads as a path.
UNSAFE_IN_PATH = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)
# The fields a path item has (``_path_fields``): a ``from`` list of ``{path: ...}``
# objects (a frames or pages output) hands its paths in through them.
PATH_FIELDS = ("path", "name", "stem", "suffix", "dir")
SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}\Z")


def _reads_as_path(field: str, text: str) -> bool:
    r"""A path field, or text ending in a file suffix (``a\x01.jpg``), or a ``/`` in a
    text without spaces (``in/a\nb``); a sentence with a ``/`` in it is text."""
    tail = text.rstrip("".join(map(chr, range(33))) + "\x7f")
    return (
        field in PATH_FIELDS or SUFFIX.search(tail) is not None
        or ("/" in text and " " not in text and "://" not in text)
    )  # fmt: skip


def _unsafe_character(field: str, text: str) -> str | None:
    """The first character ``text`` may not hold as the item value ``field``, or None."""
    if "\x00" in text:
        return "\x00"
    found = UNSAFE_IN_PATH.search(text)
    return found.group(0) if found and _reads_as_path(field, text) else None


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def item_values(entry: Any, index: int) -> dict[str, Any]:
    """An ``items`` (or ``from``) entry as its fields; ItemError when it cannot be one."""
    if isinstance(entry, dict):
        values = {str(k): v for k, v in entry.items() if _scalar(v)}
        if not re.match(r"^[A-Za-z0-9_]*$", "".join(values)):
            raise ItemError(f"item {index}: field names are letters, digits and _")
        values["index"] = index
    elif _scalar(entry) and not isinstance(entry, bool) and entry is not None:
        text = str(entry)
        values = {"value": text, "index": index}
        if _looks_like_path(text):
            values.update(_path_fields(text))
    else:
        raise ItemError(f"item {index} is {type(entry).__name__}; give text, a number or a "
                        "mapping of fields")  # fmt: skip
    for name, value in values.items():
        if not isinstance(value, str):
            continue
        if "{{" in value:
            raise ItemError(f"item {index} field {name!r} holds '{{{{' (a template); items "
                            "are data, never templates")  # fmt: skip
        bad = _unsafe_character(name, value)
        if bad is not None:
            why = "" if bad == "\x00" else " (it reads as a path, which holds none)"
            raise ItemError(f"item {index} field {name!r} holds the control character "
                            f"{ascii(bad)}{why}; remove it from the item")  # fmt: skip
    return values


# ``{a,b}`` alternatives in a glob, as a shell writes them (not nested).
BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")
MAX_PATTERNS = 64


def brace_patterns(pattern: str) -> list[str]:
    """``pattern`` with each ``{a,b,...}`` expanded (``*.{jpg,png}`` -> ``*.jpg``, ``*.png``);
    ItemError past MAX_PATTERNS patterns."""
    out = [pattern]
    while any(BRACES.search(p) for p in out):
        grown: list[str] = []
        for text in out:
            match = BRACES.search(text)
            if match is None:
                grown.append(text)
                continue
            head, tail = text[: match.start()], text[match.end() :]
            grown += [head + alt + tail for alt in match.group(1).split(",")]
        out = list(dict.fromkeys(grown))
        if len(out) > MAX_PATTERNS:
            raise ItemError(f"glob {pattern!r:.120} expands to more than {MAX_PATTERNS} patterns")
    return out


def _name_matcher(name: str) -> re.Pattern[str]:
    """A file name pattern matched whatever the case of the name (``*.jpg`` takes
    ``IMG_1.JPG``: cameras and phones write either)."""
    return re.compile(fnmatch.translate(name), re.IGNORECASE)


def _matches(root: Path, pattern: str) -> set[Path]:
    """Python's glob of ``pattern`` under ``root``, its last part matched ignoring case
    (folders as written: ``inputs/Talks`` and ``inputs/talks`` are two uploads)."""
    pure = PurePosixPath(pattern)
    if pure.name == "**" or not pure.name:
        return set(root.glob(pattern))
    name = _name_matcher(pure.name)
    parents = [root] if str(pure.parent) == "." else list(root.glob(str(pure.parent)))
    found: set[Path] = set()
    for parent in parents:
        try:
            children = list(parent.iterdir()) if parent.is_dir() else []
        except OSError:
            continue
        found.update(c for c in children if name.match(c.name))
    return found


def _shown(parts: tuple[str, ...], pattern: str) -> bool:
    """Whether a match may hold its dot names (``.a.jpg``, ``.hidden/``): only where the
    pattern itself writes a part starting with ``.`` that matches it, as a shell's glob
    does. The file service writes an upload in flight as ``.upload-<hex>`` beside its
    final name, so ``*`` or ``**`` taking dot names would fan out over half a file."""
    dotted = [p for p in PurePosixPath(pattern).parts if p.startswith(".")]
    return all(
        any(_name_matcher(d).match(part) for d in dotted) for part in parts if part.startswith(".")
    )


def glob_items(data_dir: Path, pattern: str, limit: int) -> list[dict[str, Any]]:
    """The files (not folders) under the data volume matching ``pattern`` (``{a,b}``
    alternatives; the file name's case ignored), sorted by path; at most ``limit`` + 1
    (the caller reports the count). ItemError for a pattern that is absolute or climbs
    out; a match whose real path leaves the volume (a symlink) is skipped, and so is a
    dot name (a file or a folder ``**`` would descend into) the pattern does not write."""
    patterns = brace_patterns(pattern)
    for each in patterns:
        pure = PurePosixPath(each)
        if not each or pure.is_absolute() or ".." in pure.parts or "\\" in each:
            raise ItemError(f"glob {pattern!r:.120} must be relative to the data volume, "
                            "without '..'")  # fmt: skip
    root = data_dir.resolve()
    found: list[str] = []
    try:
        matches = sorted(set().union(*(
            {m for m in _matches(root, p) if _shown(m.relative_to(root).parts, p)}
            for p in patterns
        )))  # fmt: skip
    except (ValueError, OSError) as exc:
        raise ItemError(f"glob {pattern!r:.120}: {exc}") from None
    for path in matches:
        try:
            real = path.resolve()
            inside = real.is_relative_to(root) and real.is_file()
        except OSError:
            continue
        if inside:
            found.append(path.relative_to(root).as_posix())
        if len(found) > limit:
            break
    return [{**_path_fields(p), "index": i} for i, p in enumerate(found)]


def _item_text(item: dict[str, Any], name: str | None) -> str:
    if name is None:
        for default in ("path", "value"):
            if default in item:
                return _text(item[default])
        return json.dumps({k: v for k, v in item.items() if k != "index"}, sort_keys=True)
    if name not in item:
        raise ItemError(f"item {item.get('index')} has no field {name!r} "
                        f"(it has {sorted(item)})")  # fmt: skip
    return _text(item[name])


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


# ---- templates ------------------------------------------------------------------------


def _substitute(value: Any, item: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return ITEM.sub(lambda m: _item_text(item, m.group(1)), value)
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
        env[name] = _item_text(item, match.group(1))
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


def read_list(output: Any, path: str) -> list[Any]:
    """The list at ``path`` of an upstream output (``""``: the output itself, or its
    ``items`` / ``files`` / ``text`` when the output is a mapping holding one list)."""
    value: Any = output
    for part in path.split(".") if path else []:
        if not isinstance(value, dict) or part not in value:
            raise ItemError(f"the output has no field {path!r}")
        value = value[part]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ItemError(f"{path or 'the output'} is text, not a list") from None
    if not isinstance(value, list):
        raise ItemError(f"{path or 'the output'} is {type(value).__name__}, not a list")
    return value


# ---- a whole plan ---------------------------------------------------------------------


def _stand_in(group: Group, reads: list[str], marks: dict[str, bool]) -> dict[str, Any]:
    """What the validator sees for the group: a noop waiting for every item's output task
    (and a ``from`` group's source), marked untrusted / sensitive when any of them is, so
    taint and sensitivity reach the group's readers. No payload: a template per item would
    make it as large as the group."""
    task: dict[str, Any] = {
        "id": group.key, "name": group.name, "type": "noop", "task_class": "cpu",
        "depends_on": list(dict.fromkeys([*group.depends_on, *reads])),
    }  # fmt: skip
    if marks.get("tainted"):
        task["trust"] = "untrusted"
    if marks.get("sensitive"):
        task["sensitive"] = True
    return task


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


def validate_with_fanout(
    data: dict[str, Any], limits: Limits, data_dir: Path | None
) -> tuple[PlanSpec, set[str]]:
    """``validate_plan``, with every group expanded first (glob and items now; a ``from``
    group's template checked with a placeholder item). PlanInvalid names the group of any
    problem of its items, once per template task."""
    raw_tasks = data.get("tasks") or []
    if not isinstance(raw_tasks, list) or not any(is_group(raw) for raw in raw_tasks):
        return validate_plan(data, limits)
    if len(raw_tasks) > limits.max_tasks:
        error = _error(None, "tasks", f"{len(raw_tasks)} tasks; the limit is {limits.max_tasks}")
        raise PlanInvalid([error], too_large=True)
    errors: list[dict[str, Any]] = []
    plain = [raw for raw in raw_tasks if not is_group(raw)]
    expansion, samples = Expansion(), Expansion()
    groups: list[Group] = []
    local: dict[str, str] = {}
    # the plan's own tasks and group rows count too, as they do for a growing plan
    budget = limits.plan_max_tasks - len(raw_tasks)
    for raw in raw_tasks:
        if not is_group(raw):
            continue
        group, problems = read_group(raw)
        errors += problems
        if group is None:
            continue
        errors += outside_deps(group)
        groups.append(group)
        if group.source == "items" and isinstance(group.spec, list) and group.spec:
            # Counted before any item is built: an item's fields take ~300 bytes of Python
            # objects, so a 1 MB list of half a million numbers made 150 MB to refuse.
            refusal = too_many(group, len(group.spec), budget, limits.plan_max_tasks)
            if refusal is not None:
                errors.append(refusal)
                budget = -1
                continue
        try:
            items = _static_items(group, data_dir, budget // len(group.template) + 1)
        except ItemError as exc:
            errors.append(_error(group.key, f"for_each.{group.source}", str(exc)))
            continue
        group.items = items
        target = samples if items is None else expansion
        items = items if items is not None else [placeholder()]
        count = len(items) * len(group.template)
        if target is expansion:
            if not items:
                what = f"glob {group.spec!r:.120}" if group.source == "glob" else "items"
                errors.append(_error(group.key, f"for_each.{group.source}",
                                     f"{what} matched nothing (0 items)"))  # fmt: skip
                continue
            refusal = too_many(group, len(items), budget, limits.plan_max_tasks)
            if refusal is not None:
                errors.append(refusal)
                budget = -1
                continue
            budget -= count
            longest = max(len(str(t["id"])) for t in group.template)
            if len(item_key(group.key, len(items) - 1, "x" * longest)) > MAX_KEY:
                errors.append(_error(group.key, "tasks", (
                    f"with {len(items)} items the keys <group>__<index>__<id> pass {MAX_KEY} "
                    "characters; use a shorter group id or template ids"
                )))  # fmt: skip
                continue
        try:
            expand_items(group, items, target)
        except ItemError as exc:
            errors.append(_error(group.key, "tasks", str(exc)))
            continue
        for raw_task in group.template:
            for item in items:
                local[item_key(group.key, int(item["index"]), str(raw_task["id"]))] = raw_task["id"]
    if errors:
        raise PlanInvalid(errors)
    members = {**expansion.members, **samples.members}
    group_keys = {g.key for g in groups}
    reads = {g.key: [*expansion_outputs(g, expansion), *expansion_outputs(g, samples),
                     *([g.from_key] if g.from_key else [])] for g in groups}  # fmt: skip
    marks: dict[str, dict[str, bool]] = {g.key: {} for g in groups}
    # Again while a group turns out tainted or sensitive (its readers then are too): at
    # most once more per group, as a group's marks only ever go from false to true.
    for _ in range(len(groups) + 1):
        stand_ins = [_stand_in(g, reads[g.key], marks[g.key]) for g in groups]
        tasks = plain + expansion.tasks + samples.tasks + stand_ins
        try:
            plan, tainted = validate_plan(
                {**data, "tasks": tasks}, Limits(len(tasks), limits.max_payload_bytes),
                len(tasks) * 50,
            )  # fmt: skip
        except PlanInvalid as exc:
            fixes = _dedupe_fixes(exc.fixes, local, members, group_keys)
            errors = bounded(_dedupe(exc.errors, members, local))
            raise PlanInvalid(errors, exc.too_large, fixes) from None
        sensitive = {spec.id for spec in plan.tasks if spec.sensitive}
        found = {g.key: {"tainted": any(k in tainted for k in reads[g.key]),
                         "sensitive": any(k in sensitive for k in reads[g.key])}
                 for g in groups}  # fmt: skip
        if all({n for n, v in found[k].items() if v} <= set(marks[k]) for k in found):
            break
        marks = {k: {**marks[k], **{n: True for n, v in found[k].items() if v}} for k in found}
    errors = _from_checks(groups, plan, tainted, group_keys)
    if errors:
        raise PlanInvalid(errors)
    plan.fixes = _dedupe_fixes(plan.fixes, local, members, group_keys)
    return _finished(plan, tainted, groups, expansion, samples, local), tainted


def too_many(group: Group, items: int, budget: int, plan_max: int) -> dict[str, Any] | None:
    """The group's refusal when ``items`` copies of its template pass what the plan may
    still hold (``budget`` tasks), else None; from the count alone, before any item is
    built. A glob stops reading at the limit, so its count is a floor (``N+``)."""
    count = items * len(group.template)
    if count <= budget:
        return None
    return _error(group.key, f"for_each.{group.source}", (
        f"{items}{'+' if group.source == 'glob' else ''} items x {len(group.template)} "
        f"tasks = {count} tasks; with the plan's other tasks that passes the limit of "
        f"{plan_max} (AIRIG_PLAN_MAX_TASKS)"
    ))  # fmt: skip


def _static_items(group: Group, data_dir: Path | None, limit: int) -> list[dict[str, Any]] | None:
    """A glob's or a literal list's items; None for a ``from`` group (known at run time)."""
    if group.source == "glob":
        if data_dir is None:
            raise ItemError("this brain has no data volume to glob")
        return glob_items(data_dir, str(group.spec), limit)
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


def _finished(
    plan: PlanSpec, tainted: set[str], groups: list[Group], expansion: Expansion,
    samples: Expansion, local: dict[str, str],
) -> PlanSpec:  # fmt: skip
    """The plan to store: sample tasks of ``from`` groups dropped, each stand-in replaced
    by the group's own row."""
    by_key = {g.key: g for g in groups}
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
    return PlanSpec(name=plan.name, tasks=tasks, fixes=plan.fixes, members=expansion.members,
                    rerun=plan.rerun)  # fmt: skip
