"""A task type is one declared thing (``airig/common/task_types.py``, issue 37): every
table the kit derives from it covers exactly its names and agrees with its fields, and a
type missing from it (a payload model, an executor, a sample here) fails."""

from __future__ import annotations

import ast
import inspect
import json
import sqlite3
import typing
from pathlib import Path

import brain_helpers as h
import pytest

from airig.brain import reactions
from airig.brain.api.app import create_app
from airig.brain.escalation import criteria, handoff
from airig.brain.planner import catalogue
from airig.brain.plans import models, reuse
from airig.brain.plans.validate import Limits, PlanInvalid, placement_model, validate_plan
from airig.brain.store import queue
from airig.brain.store import reuse as store_reuse
from airig.common import task_schemas
from airig.common.protocol import TASK_CLASSES, Assignment
from airig.common.task_types import (
    COMFYUI,
    DEFAULT_CLASS_FOR_TYPE,
    HOOKS,
    OLLAMA,
    PAYLOAD_SCHEMAS,
    TASK_TYPES,
    WHISPER,
    TaskType,
    names_where,
    service_of,
)
from airig.executors.base import EXECUTORS, validate_payload
from airig.worker.runner import NO_FILES

PACKAGE = Path(__file__).resolve().parents[2] / "airig"

# One valid payload per type: a new type needs its sample here (the third file of
# AGENTS.md's "How to add a task type").
SAMPLE: dict[str, dict[str, typing.Any]] = {
    "llm": {"model": "llama3.2", "prompt": "hi"},
    "embed": {"model": "nomic-embed-text", "input": "a"},
    "transcribe": {"audio": "talk.wav", "model": "Systran/faster-whisper-small"},
    "image": {"prompt": "a cat", "checkpoint": "sd15.safetensors"},
    "shell": {"command": "echo hi"},
    "resource": {"action": "load", "service": "ollama", "model": "llama3.2"},
    "noop": {"echo": 1},
    "plan": {"goal": "sort the photos", "model": "llama3.2"},
    "frames": {"video": "talk.mp4"},
    "pages": {"pdf": "paper.pdf"},
    "ocr": {"image": "scan.png", "model": "qwen2.5vl:7b"},
    "note": {"path": "notes/talk.md", "kind": "video", "transcript": "words"},
    "html": {"html": "inputs/wiki/Volcano.html", "path": "outputs/wiki/Volcano.txt"},
}


def assignment(task_type: str, load: str | None = "m") -> Assignment:
    return Assignment(
        task_id=1, plan_id="p", key="t", name="t", type=task_type, task_class="cpu",
        payload=SAMPLE[task_type], timeout_s=60, attempt=1, lease_id="l",
        lease_expires_at=1.0, load=load,
    )  # fmt: skip


def test_the_table_is_frozen_and_each_entry_is_well_formed():
    with pytest.raises(TypeError):
        TASK_TYPES["extra"] = TASK_TYPES["noop"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        TASK_TYPES["noop"].writes_files = True  # type: ignore[misc]
    for name, spec in TASK_TYPES.items():
        assert isinstance(spec, TaskType) and spec.name == name
        assert name.isascii() and name.isalpha() and name.islower()  # written into SQL
        assert spec.task_class in TASK_CLASSES, name
        assert spec.model_service in (None, OLLAMA, WHISPER, COMFYUI), name
        assert not (spec.service_from_payload and spec.model_service), name
        assert issubclass(spec.payload, task_schemas.Payload), name
        assert spec.brain_fields <= set(spec.payload.model_fields), name
        if spec.data_files is not None:
            assert spec.writes_files, name


def test_every_payload_model_belongs_to_exactly_one_type():
    """A payload model written in task_schemas.py and left out of the table is a type
    the brain would refuse and no worker would run."""
    declared = {
        value
        for value in vars(task_schemas).values()
        if isinstance(value, type)
        and issubclass(value, task_schemas.Payload)
        and value.__name__.endswith("Payload")
        and value is not task_schemas.Payload
    }
    used = [spec.payload for spec in TASK_TYPES.values()]
    assert sorted(used, key=str) == sorted(declared, key=str)


def test_the_views_and_the_samples_cover_exactly_the_table():
    names = set(TASK_TYPES)
    assert set(SAMPLE) == names, "give the new type a sample payload above"
    assert dict(PAYLOAD_SCHEMAS) == {n: t.payload for n, t in TASK_TYPES.items()}
    assert dict(DEFAULT_CLASS_FOR_TYPE) == {n: t.task_class for n, t in TASK_TYPES.items()}
    for name, payload in SAMPLE.items():
        validate_payload(name, payload)  # the worker's check accepts what the brain does


def test_each_type_has_the_executor_of_its_payload_model():
    assert set(EXECUTORS) == set(TASK_TYPES)
    for name, execute in EXECUTORS.items():
        first = next(iter(inspect.signature(execute).parameters))
        assert typing.get_type_hints(execute)[first] is TASK_TYPES[name].payload, name


def test_the_openapi_schema_lists_exactly_the_table(tmp_path):
    spec = create_app(h.make_settings(tmp_path)).openapi()
    task = spec["components"]["schemas"]["TaskSpec"]["properties"]
    assert task["type"]["enum"] == sorted(TASK_TYPES) == list(models.TASK_TYPES)


@pytest.mark.parametrize("name", sorted(TASK_TYPES))
def test_plan_validation_follows_the_table(name):
    """A task of each type validates, gets the table's class when it has none (shell and
    noop by their content), and is placed by its model the way its service needs."""
    model = SAMPLE[name].get("model", "sd15")  # a task's own model where its payload has none
    raw = {"id": "t", "type": name, "payload": dict(SAMPLE[name]), "model": model}
    plan, _ = validate_plan({"tasks": [raw]}, Limits())
    [task] = plan.tasks
    spec = TASK_TYPES[name]
    if not spec.class_by_content:
        assert task.task_class == spec.task_class
    service = service_of(name, SAMPLE[name])
    if service == COMFYUI:
        assert task.model is None  # one shared server: its models place no task
    elif service == OLLAMA:
        assert task.model is not None and ":" in task.model  # Ollama's own name
    else:
        assert task.model == model


def test_an_unknown_type_is_refused_naming_every_type_of_the_table():
    with pytest.raises(PlanInvalid) as caught:
        validate_plan({"tasks": [{"id": "t", "type": "sing", "payload": {}}]}, Limits())
    [error] = caught.value.errors
    assert all(name in error["message"] for name in TASK_TYPES)


def test_the_service_a_task_needs_is_the_same_everywhere():
    """The placement (Python), the queue's held-back services (SQL) and the worker's swap
    (``Assignment.load_service``) all read the table's ``model_service``."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE tasks (type TEXT, payload_json TEXT)")
    for name, payload in SAMPLE.items():
        expected = service_of(name, payload)
        spec = TASK_TYPES[name]
        assert expected == (payload["service"] if spec.service_from_payload
                            else spec.model_service)  # fmt: skip
        text = json.dumps(payload)
        assert queue.service_of(name, text) == expected, name
        db.execute("DELETE FROM tasks")
        db.execute("INSERT INTO tasks VALUES (?, ?)", (name, text))
        [(in_sql,)] = db.execute(f"SELECT {queue.SERVICE_OF_TASK} FROM tasks").fetchall()
        assert in_sql == expected, name
        assert assignment(name).load_service == spec.model_service, name
        assert assignment(name, load=None).load_service is None


def test_an_ocr_task_loads_its_vision_model_on_ollama():
    """OCR reads with a vision model on Ollama: placement and the queue said so, the
    worker's swap table did not (its ``load_service`` was None)."""
    assert assignment("ocr", load="qwen2.5vl:7b").load_service == OLLAMA
    assert queue.service_of("ocr", "{}") == OLLAMA
    assert placement_model("ocr", {}, "qwen2.5vl") == "qwen2.5vl:latest"


def test_a_plan_task_is_placed_by_its_models_ollama_name():
    """The planner model runs on Ollama like an llm task: placed by the name /api/ps
    reports, or each plan task's claim looked like a swap of a model already loaded."""
    assert placement_model("plan", {}, "llama3.2") == "llama3.2:latest"
    assert placement_model("llm", {}, "llama3.2") == "llama3.2:latest"
    assert placement_model("noop", {}, "llama3.2") == "llama3.2"


@pytest.mark.parametrize(
    "payload_json",
    ["not json", "[1, 2]", '{"service": 7}', '{"service": null}', "{}", "null",
     "[" * 100_000 + "]" * 100_000],
)  # fmt: skip
def test_a_hostile_resource_payload_names_no_service(payload_json):
    assert queue.service_of("resource", payload_json) is None
    assert service_of("resource", payload_json) is None
    assert service_of("no-such-type", payload_json) is None


def test_the_worker_escalation_planner_and_reuse_tables_are_the_tables_columns():
    assert names_where(writes_files=False) == ("llm", "embed", "resource", "noop", "plan")
    assert set(NO_FILES) == {n for n, t in TASK_TYPES.items() if not t.writes_files}
    assert set(criteria.CONTEXT_TYPES) == {n for n, t in TASK_TYPES.items() if t.prompt_payload}
    subtasks = {n for n, t in TASK_TYPES.items() if t.external_subtask}
    assert set(handoff.SUBTASK_TYPES) == subtasks
    assert "one of " + ", ".join(handoff.SUBTASK_TYPES) + ";" in handoff.SYSTEM
    assert not {"shell", "plan", "resource"} & subtasks  # the external tier runs no command
    assert set(reuse.NEVER_REUSED) == {n for n, t in TASK_TYPES.items() if not t.reusable}
    shown = catalogue.type_catalogue(allow_shell=True, allow_plan=True)
    assert set(shown) == {n for n, t in TASK_TYPES.items() if t.planned}
    for name, entry in shown.items():
        spec = TASK_TYPES[name]
        assert entry["class"] == spec.task_class
        assert not spec.brain_fields & set(entry["payload"].get("properties", {}))


def test_the_files_a_task_wrote_are_read_under_the_tables_key():
    output = {"path": "a.md", "frames": [{"path": "f/1.png"}, {"x": 1}, "f/2.png"],
              "pages": [{"path": "p/1.png"}]}  # fmt: skip
    found = {name: store_reuse.written_paths(name, output) for name in TASK_TYPES}
    assert found == {
        name: (["a.md"] if name in ("note", "html") else ["f/1.png"] if name == "frames"
               else ["p/1.png"] if name == "pages" else [])
        for name in TASK_TYPES
    }  # fmt: skip
    assert store_reuse.written_paths("note", {"path": ["x"]}) == []
    assert store_reuse.written_paths("note", "not a mapping") == []


def type_comparisons(path: Path) -> list[str]:
    """The task-type names ``path`` compares anything with (``x == "llm"``, ``in (...)``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare):
            continue
        for right in node.comparators:
            items = right.elts if isinstance(right, ast.Tuple | ast.Set | ast.List) else [right]
            found += [
                item.value for item in items
                if isinstance(item, ast.Constant) and item.value in TASK_TYPES
            ]  # fmt: skip
    return found


def test_the_derived_tables_name_no_type_of_their_own():
    """The modules whose tables the table replaced compare a task's type with no name;
    the shell taint guard stays explicit (a command never runs tainted input)."""
    where = {
        "brain/leases.py": ["shell"],
        "brain/reactions.py": [],
        "brain/plans/validate.py": ["shell", "shell", "resource", "resource"],
        "brain/store/queue.py": [],
        "brain/store/reuse.py": [],
        "brain/planner/catalogue.py": ["shell", "plan"],
        "brain/escalation/criteria.py": [],
        "brain/escalation/handoff.py": [],
        "common/protocol.py": [],
        "executors/base.py": [],
    }
    found = {path: sorted(type_comparisons(PACKAGE / path)) for path in where}
    assert found == {path: sorted(names) for path, names in where.items()}


def test_every_hook_the_table_may_name_is_registered_in_the_brain():
    assert tuple(reactions.REACTIONS) == HOOKS
    for name, spec in TASK_TYPES.items():
        assert set(spec.brain_hooks) <= set(HOOKS), name
        assert len(set(spec.brain_hooks)) == len(spec.brain_hooks), name
        assert reactions.of(name) == tuple(reactions.REACTIONS[h] for h in spec.brain_hooks)
    assert reactions.of("no-such-type") == ()
