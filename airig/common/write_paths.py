"""Where a path a template fills may lead (issue 36 §2): inside its plan's folder.

A task writes on the data volume only under ``outputs/`` (the executors check that, links
resolved: ``executors/context.py``). A path whose text a template fills (``{{ item.stem }}``
from a file name, ``{{ tasks.<id>.output.<field> }}`` from a worker's output, an untrusted
rig's text) is held tighter: what the template fills stays inside **its plan's folder**,
the folder the plan's own text names before the first template. A recipe's
``path: "{{ outputs_dir }}/{{ item.stem }}.md"`` reaches the brain as
``outputs/video-notes/talks/{{ item.stem }}.md`` (``submit`` fills ``{{ outputs_dir }}``
with ``outputs/<recipe>/<folder>``), so its plan's folder is ``outputs/video-notes/talks/``
and no item name or output can make it write into another plan's folder, ``index/`` or
``inputs/``.

The folder is the submitter's choice (a recipe run again on the same folder writes the
same files, which is how unchanged items are skipped), so the rule is about what data
fills in, not about who chose the folder: the plan's text must name a folder at least one
level inside ``outputs/`` before its first template (else the plan is refused at
submission), and the filled path must lie inside it, compared part by part
(``outputs/talks-x`` is not inside ``outputs/talks``), with no ``..``, no absolute path,
no NUL or control character, no name over NAME_MAX bytes, and the same in its NFKC form
(a fullwidth ``／`` or ``．．`` reads as ``/`` and ``..`` to a person and to any layer that
normalises). The brain checks when it fills (``plans/fanout.py`` for items,
``store/payloads.py`` for upstream outputs at the claim); the executors check the result
again on the worker. Only the standard library: the brain and the workers both import it.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import PurePosixPath
from typing import Any

OUTPUTS = "outputs"
# The payload field each writing task type writes to, and whether it names a file (a
# file must lie strictly inside the folder; a folder may be the plan's folder itself).
WRITE_FIELDS: dict[str, tuple[str, bool]] = {
    "note": ("path", True),
    "html": ("path", True),
    "frames": ("out_dir", False),
    "pages": ("out_dir", False),
}
TEMPLATE_START = "{{"
NAME_MAX = 255  # bytes, one name (the file system's limit)
PATH_MAX = 1024  # characters, a whole path (the payload schema's DataPath)
# Control characters and the bidirectional controls that make ``gpj.exe`` read as
# ``exe.jpg`` (the set fan-out items refuse in a path, ``plans/items.py``).
UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
RULE = "what a template fills (an item, a task's output) stays inside its plan's folder"


def _shown(text: str) -> str:
    """``text`` quoted for a one-line message, clipped (a name may be very long)."""
    shown = ascii(text) if UNSAFE.search(text) else repr(text)
    return shown if len(shown) <= 160 else shown[:150] + "…" + shown[-8:]


def write_field(task_type: str) -> str | None:
    """The payload field a task of ``task_type`` writes to on the data volume, or None."""
    return WRITE_FIELDS[task_type][0] if task_type in WRITE_FIELDS else None


def plan_folder(template: str) -> str | None:
    """The folder a path's own text names before its first template (``outputs/a/b`` of
    ``outputs/a/b/{{ item.stem }}.md``), or None when no template fills the path."""
    at = template.find(TEMPLATE_START)
    if at < 0:
        return None
    return template[:at].rpartition("/")[0]


def _folder_parts(folder: str) -> tuple[str, ...] | None:
    """The folder's parts when it lies at least one level inside ``outputs/``, else None."""
    if "\x00" in folder or "\\" in folder or folder.startswith(("/", "~")):
        return None
    parts = PurePosixPath(folder).parts
    if len(parts) < 2 or parts[0] != OUTPUTS or ".." in parts:
        return None
    return parts


def folder_problem(task_type: str, payload: dict[str, Any]) -> tuple[str, str] | None:
    """``(field, why)`` when a writing task's path template names no folder of its plan
    (known at submission: the plan is refused), else None."""
    field, _ = WRITE_FIELDS.get(task_type, ("", False))
    value = payload.get(field) if field else None
    if not isinstance(value, str):
        return None
    folder = plan_folder(value)
    if folder is None or _folder_parts(folder) is not None:
        return None
    return field, (
        f"{_shown(value)} is filled by a template but names no folder of its plan before "
        f"it: start it with outputs/<folder>/ (a recipe's {{{{ outputs_dir }}}}/), so that "
        f"{RULE}"
    )


def filled_problem(
    task_type: str, template: dict[str, Any], rendered: dict[str, Any], rule: str = RULE
) -> str | None:
    """Why the writing path of ``rendered`` (the payload ``template`` filled in) leaves
    its plan's folder, in one line naming the path and the ``rule``; None when it stays."""
    field, is_file = WRITE_FIELDS.get(task_type, ("", False))
    value, filled = template.get(field), rendered.get(field)
    if not field or not isinstance(value, str) or not isinstance(filled, str):
        return None
    folder = plan_folder(value)
    if folder is None:
        return None
    what = f"{'note path' if is_file else 'out_dir'} {_shown(filled)}"
    base = _folder_parts(folder)
    if base is None:
        return f"{what}: its template names no folder of its plan (outputs/<folder>/); {rule}"
    where = "/".join(base) + "/"
    found = UNSAFE.search(filled)
    if found:
        return f"{what} holds the control character {ascii(found.group(0))}; {rule}"
    if len(filled) > PATH_MAX or any(len(p.encode()) > NAME_MAX for p in filled.split("/")):
        return (
            f"{what} is longer than a path may be ({PATH_MAX} characters, {NAME_MAX} bytes a "
            f"name); {rule}"
        )
    nfkc = PurePosixPath(unicodedata.normalize("NFKC", folder)).parts
    for form, own in ((filled, base), (unicodedata.normalize("NFKC", filled), nfkc)):
        parts = PurePosixPath(form).parts
        if form.startswith(("/", "~")) or "\\" in form or ".." in parts:
            return f"{what} leaves its plan's folder {where}; {rule}"
        inside = parts[: len(own)] == own and (len(parts) > len(own) or not is_file)
        if not inside:
            return f"{what} is not inside its plan's folder {where}; {rule}"
    return None


GROWN_RULE = "a task a plan task or the external tier adds writes inside its plan's own folder"


def grown_problem(task_type: str, payload: dict[str, Any], plan_id: str) -> tuple[str, str] | None:
    """``(field, why)`` when a task a model proposed (``planner/grow.py``: every path in it
    is model text, tainted data) would write outside ``outputs/<plan id>/``, its plan's
    folder; None when it writes inside (or writes nothing)."""
    field, _ = WRITE_FIELDS.get(task_type, ("", False))
    if not field:
        return None
    folder = f"{OUTPUTS}/{plan_id}"
    value = payload.get(field)
    if not isinstance(value, str):  # frames and pages default to outputs/frames|pages/
        return field, f"give {field} inside {folder}/; {GROWN_RULE}"
    head = plan_folder(value)
    # the literal part the proposal wrote: the whole path, or its folder before a template
    written = value if head is None else f"{head}/{{{{ x }}}}"
    stand_in = {field: f"{folder}/{TEMPLATE_START} x }}}}"}
    if filled_problem(task_type, stand_in, {field: written}, GROWN_RULE) is None:
        return None
    return (
        field,
        f"{field} {_shown(value)} is not inside {folder}/, its plan's folder; {GROWN_RULE}",
    )


class LeavesPlanFolder(ValueError):
    """A filled write path that leaves its plan's folder (the task fails for good)."""


def check_filled(task_type: str, template: dict[str, Any], rendered: dict[str, Any]) -> None:
    """``filled_problem`` as an exception: LeavesPlanFolder with its line."""
    problem = filled_problem(task_type, template, rendered)
    if problem is not None:
        raise LeavesPlanFolder(problem)
