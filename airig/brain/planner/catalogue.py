"""What a `plan` task's model may use, put into its payload by the brain when it is claimed.

- task types with their payload schemas: the brain's own (``task_types.TASK_TYPES``),
  the ones its validator will check the answer against; ``resource`` is left out
  (``planned``: loading and evicting models is the scheduler's job), ``shell`` when the
  task runs untrusted (the validator would refuse it), ``plan`` when its subtasks could
  not grow any further;
- models: the ones the rig provisions and verifies (``AIRIG_OLLAMA_MODELS``,
  ``AIRIG_WHISPER_MODELS``: 02-compute's models-ready gate holds the stack until every one
  is pulled and verified) plus what live workers report resident;
- input files: listed here, by the brain, under ``BRAIN_DATA_DIR`` (the data volume, which
  the brain mounts like its workers). The brain lists rather than the worker that runs the
  plan task because that worker may be on a joined rig whose data volume is not the one
  the plan's tasks will read, and because a goal's folder is then checked when the goal
  is posted (``check_inputs_dir``), with a one-line error, not minutes later on a worker.

Claim time, not submit time: the models and files are those of the moment the model is
asked, and a hand-written plan's `plan` task gets its catalogue the same way. The listing
is bounded (``MAX_FILES`` entries, ``MAX_SCANNED`` directory entries visited), since it
runs inside the claim's transaction, and leaves dot names out, as a glob does. The names
are a folder's, untrusted: the plan executor shows them escaped, clipped and inside the
untrusted wrapper (``executors/plan.py``, ``listing``).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path, PurePosixPath
from typing import Any

from airig.brain.settings import BrainSettings
from airig.brain.store import trust, workers
from airig.common.ollama_names import valid_ollama_name
from airig.common.task_types import TASK_TYPES

MAX_FILES = 200
MAX_SCANNED = 5_000


def _strip_titles(value: Any) -> Any:
    """A JSON schema without pydantic's ``title`` entries: tokens the model need not read."""
    if isinstance(value, dict):
        return {k: _strip_titles(v) for k, v in value.items() if k != "title"}
    if isinstance(value, list):
        return [_strip_titles(v) for v in value]
    return value


def type_catalogue(allow_shell: bool, allow_plan: bool) -> dict[str, Any]:
    types: dict[str, Any] = {}
    for name, spec in sorted(TASK_TYPES.items()):
        if not spec.planned or (name == "shell" and not allow_shell):
            continue
        if name == "plan" and not allow_plan:
            continue
        body = _strip_titles(spec.payload.model_json_schema())
        # fields the brain fills, never the model: left out of the schemas it is shown
        for field in spec.brain_fields:
            body.get("properties", {}).pop(field, None)
        types[name] = {"class": spec.task_class, "payload": body}
    return types


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def models(conn: sqlite3.Connection, settings: BrainSettings, now: float) -> dict[str, list[str]]:
    """The models this rig provisions (.env's lists): the brain's own configuration."""
    found = {"ollama": _split(settings.ollama_models), "whisper": _split(settings.whisper_models)}
    return {service: sorted(names) for service, names in found.items() if names}


def reported_models(
    conn: sqlite3.Connection, settings: BrainSettings, now: float, known: list[str]
) -> list[str]:
    """Ollama models live workers report resident that .env does not list. A rig writes
    these names (a joined one included), so they are outside data: the plan executor
    wraps them as untrusted, never in the catalogue's instructions; names that break
    Ollama's own rules are dropped (the brain refuses them at heartbeat too)."""
    rows = workers.models_heard_since(conn, now - 3 * settings.lease_s)
    reported: set[str] = set()
    for row in rows:
        reported.update(m for m in json.loads(row["models_json"]) if isinstance(m, str))
    return sorted(m for m in reported - set(known) if valid_ollama_name(m))


def check_inputs_dir(settings: BrainSettings, inputs_dir: str) -> Path:
    """The folder under the data volume, or ValueError saying what is wrong."""
    root = settings.data_dir.resolve()
    folder = (root / PurePosixPath(inputs_dir)).resolve()
    if folder != root and root not in folder.parents:
        raise ValueError(f"{inputs_dir!r} leaves the data volume")
    if not folder.is_dir():
        raise ValueError(f"{inputs_dir!r} is not a folder on the data volume ({root})")
    return folder


def list_files(settings: BrainSettings, inputs_dir: str) -> dict[str, Any]:
    """{"dir", "files": [[path relative to the data volume, bytes], ...], "truncated"}."""
    try:
        folder = check_inputs_dir(settings, inputs_dir)
    except ValueError as exc:
        return {"dir": inputs_dir, "files": [], "error": str(exc)}
    root = settings.data_dir.resolve()
    files: list[list[Any]] = []
    scanned, truncated = 0, False
    for current, dirs, names in os.walk(folder):  # no symlinked folder is followed
        # Dot names are left out as a glob leaves them (``plans/items.py``): an upload in
        # flight is a ``.upload-<hex>`` file, and a plan must not be drafted over it.
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            scanned += 1
            if name.startswith("."):
                continue
            path = Path(current) / name
            if path.is_symlink() or not path.is_file():
                continue
            files.append([str(path.relative_to(root)), path.stat().st_size])
            if len(files) >= MAX_FILES:
                break
        if len(files) >= MAX_FILES or scanned >= MAX_SCANNED:
            truncated = True
            break
    return {"dir": inputs_dir, "files": files, "truncated": truncated}


def fill(
    conn: sqlite3.Connection,
    task: sqlite3.Row,
    payload: dict[str, Any],
    settings: BrainSettings,
    now: float,
) -> dict[str, Any]:
    """``payload`` with the brain's catalogue (and the default model) set, for a claim."""
    draft = payload.get("mode") == "draft"
    # A draft's tasks start at depth 0 of their own plan; grown tasks one below this task.
    child_depth = 0 if draft else (task["depth"] or 0) + 1
    # The row still says trusted while the claim is under way: a task whose templates
    # read tainted output runs untrusted (the claim records it just after), and then the
    # validator refuses shell in its answer, so shell is not offered to it either.
    runs_trusted = bool(task["trusted"]) and not trust.tainted_sources(conn, task)
    catalogue: dict[str, Any] = {
        "types": type_catalogue(
            allow_shell=runs_trusted, allow_plan=child_depth < settings.plan_max_depth
        ),
        "models": models(conn, settings, now),
    }
    reported = reported_models(conn, settings, now, catalogue["models"].get("ollama", []))
    if reported:
        catalogue["reported_models"] = reported
    if payload.get("inputs_dir"):
        catalogue["files"] = list_files(settings, payload["inputs_dir"])
    return {**payload, "model": payload.get("model") or settings.planner_model,
            "catalogue": catalogue}  # fmt: skip
