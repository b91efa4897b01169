"""The placeholders a plan file may hold for the CLI: ``{{ inputs_dir }}``,
``{{ outputs_dir }}`` and ``{{ models.llm|vision|embed|whisper }}``.

A recipe (``recipes/``) runs on any folder: it names its inputs ``{{ inputs_dir }}/*.mp4``
and its outputs ``{{ outputs_dir }}/...``, and ``submit PLAN --inputs-dir FOLDER`` fills
both before the plan reaches the brain (inputs: the data-volume folder the files are in;
outputs: ``outputs/<plan file's stem>/<that folder's name>``). They are filled here, not
by the brain, because they are the submitter's choice, like the file itself; a plan sent
with curl writes the paths in. The brain's own templates (``{{ tasks.… }}``,
``{{ item.… }}``) are left as they are.

``{{ models.<role> }}`` names the model .env chose for that role (``AIRIG_PLANNER_MODEL``,
``AIRIG_VISION_MODEL``, ``AIRIG_EMBED_MODEL``, the first of ``AIRIG_WHISPER_MODELS``), so
a recipe runs on what this rig pulls (``.env``'s lists and the models of the recipes in
``AIRIG_RECIPES``, ``recipes.py``); a model the rig does not pull is refused here in one
line, before any task runs and fails at its model call an hour into the plan, except
``{{ models.<role> | optional }}``, which becomes "" (the task's path without a model).
"""

from __future__ import annotations

import fnmatch
import re
import unicodedata
from pathlib import Path, PurePosixPath

from airig.common.errors import AirigError, ConfigError
from airig.launcher.recipes import MODEL, ROLES, chosen_models, pulled, same_model
from airig.launcher.settings import Settings

PLACEHOLDER = re.compile(r"\{\{\s*(inputs_dir|outputs_dir)\s*\}\}")
# A folder name as the upload names it (inputs_sync.FOLDER_UNSAFE): Unicode letters and
# digits (``inputs/写真``), ``_``, ``.`` and ``-``; nothing a glob, YAML or a shell reads.
SAFE_PART = re.compile(r"[\w.-]+")
# What follows ``{{ inputs_dir }}/`` in a plan: a glob (``*.{jpg,png}``) or a file name.
INPUT_PATTERN = re.compile(r"\{\{\s*inputs_dir\s*\}\}/((?:\{[^{}\s]*\}|[^\s\"'{},\]])+)")
BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")


def read_plan(plan_file: Path) -> bytes:
    try:
        return plan_file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {plan_file}: {exc.strerror}", "check the path") from None


def _names(body: bytes) -> set[str]:
    return {m.group(1) for m in PLACEHOLDER.finditer(body.decode("utf-8", "replace"))}


def needs_inputs(body: bytes) -> bool:
    return bool(_names(body))


def writes_outputs(body: bytes, outputs: str) -> bool:
    return outputs in body.decode("utf-8", "replace")


def data_relative(value: str) -> str:
    """A data-volume folder as given (``inputs/talks``, ``inputs/写真``), checked:
    relative, no ``..``; in NFC, the form the upload wrote its name in."""
    path = PurePosixPath(unicodedata.normalize("NFC", value.strip().rstrip("/")))
    parts = path.parts
    if (
        not parts
        or path.is_absolute()
        or any(p in ("..", ".") for p in parts)
        or not all(SAFE_PART.fullmatch(p) for p in parts)
    ):
        raise AirigError(
            f"--inputs-dir {value!r} is not a folder of the data volume",
            "give a folder on this machine (~/talks, /srv/talks: its files are uploaded) or "
            "one on the data volume such as inputs/talks",
        )
    return str(path)


def outputs_dir(plan_file: Path, data_dir: str) -> str:
    name = unicodedata.normalize("NFC", plan_file.stem)
    stem = re.sub(r"[^\w.-]+", "-", name).strip("-.") or "plan"
    return f"outputs/{stem}/{PurePosixPath(data_dir).name}"


def fill(body: bytes, data_dir: str, outputs: str) -> bytes:
    values = {"inputs_dir": data_dir, "outputs_dir": outputs}
    text = body.decode("utf-8", "replace")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], text).encode()


def fill_models(body: bytes, settings: Settings, where: str) -> bytes:
    """``body`` with each ``{{ models.<role> }}`` replaced; AirigError for a role this rig
    has no model for, or a model it does not pull. ``{{ models.<role> | optional }}``
    becomes "" then: the task runs its path without a model (``pdf-text``: tesseract)."""
    text = body.decode("utf-8", "replace")
    chosen = chosen_models(settings)
    have = pulled(settings)
    usable: dict[str, str] = {}
    for role, optional in sorted({(m.group(1), bool(m.group(2))) for m in MODEL.finditer(text)}):
        if role not in ROLES:
            raise AirigError(
                f"{where} names {{{{ models.{role} }}}}, which is no model role",
                "use models." + ", models.".join(ROLES),
            )
        knob, listed = ROLES[role]
        model = chosen[role]
        if model and any(same_model(model, name, listed) for name in have[listed]):
            usable[role] = model
        elif optional:
            continue
        elif not model:
            raise AirigError(
                f"{where} needs a {role} model and {knob} is empty",
                f"set {knob} in .env and run `python start_services.py up`",
            )
        else:
            raise AirigError(
                f"{where} runs {model} ({role}), which this rig does not pull",
                f"add {model} to {listed} in .env (or the recipe to AIRIG_RECIPES: "
                "`python start_services.py up --recipe NAME`) and run `up`",
            )
    return MODEL.sub(lambda m: usable.get(m.group(1), ""), text).encode()


def _alternatives(pattern: str) -> list[str]:
    """``*.{jpg,png}`` as ``*.jpg``, ``*.png`` (brain: ``items.brace_patterns``)."""
    match = BRACES.search(pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [p for alt in match.group(1).split(",") for p in _alternatives(head + alt + tail)]


def _matches(parts: list[str], name: str) -> bool:
    """Whether a file directly in the inputs folder matches a pattern's parts below it,
    as the brain's glob does (``**`` any folders, none included; the name's case ignored;
    a dot name only by a part that starts with ``.`` itself, ``plans/items.py`` ``_shown``)."""
    if not parts:
        return False
    if name.startswith(".") and not parts[-1].startswith("."):
        return False
    if parts[0] == "**":
        return _matches(parts[1:], name)
    if len(parts) > 1:
        return False  # a pattern of a sub-folder: the folder's own files are not in it
    return re.match(fnmatch.translate(parts[0]), name, re.IGNORECASE) is not None


def unmatched(body: bytes, names: list[str]) -> list[str] | None:
    """The uploaded ``names`` that no ``{{ inputs_dir }}/<pattern>`` of the plan takes
    (the recipe will not read them); None when the plan names no such pattern."""
    text = body.decode("utf-8", "replace")
    patterns = [p for m in INPUT_PATTERN.finditer(text) for p in _alternatives(m.group(1))]
    if not patterns:
        return None
    split = [p.split("/") for p in patterns]
    return [n for n in names if not any(_matches(parts, n) for parts in split)]


def unmatched_line(body: bytes, names: list[str]) -> str | None:
    """One line for ``submit``: how many of the folder's files no glob of the plan takes."""
    left = unmatched(body, names)
    if not left:
        return None
    shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
    files = "1 file in the folder matches" if len(left) == 1 else (
        f"{len(left)} files in the folder match")  # fmt: skip
    return f"{files} no glob of this plan and will not be read: {shown}"
