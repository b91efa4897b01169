"""Every task type, declared once: the one table the rest of the kit derives from.

A ``TaskType`` says everything the brain and the worker decide by a task's type: its
payload model (``task_schemas.py``), the class a task without one gets, the compute
service whose model it runs, whether its executor writes files, what the external tier
and the brain's planner may do with it, and what the brain does with its output (hooks
registered by name in ``airig/brain/reactions.py``). Who reads which field:

- ``payload``: the brain's plan validation and OpenAPI enum (``brain/plans/``), the
  worker's second check (``executors/base.py validate_payload``), the planner's catalogue;
- ``task_class``, ``class_by_content``: ``brain/plans/validate.py infer_class``;
- ``model_service``, ``service_from_payload``: ``service_of`` below (placement by model,
  ``brain/plans/validate.py``; a compute service down, ``brain/store/queue.py``) and the
  service a worker swaps the model on (``protocol.Assignment.load_service``);
- ``writes_files``: the worker's per-attempt folder (``worker/runner.py``);
- ``data_files``: the files on the data volume a re-run checks (``brain/store/reuse.py``);
- ``prompt_payload``, ``external_subtask``: the escalation (``brain/escalation/``);
- ``planned``, ``brain_fields``: the planner's catalogue (``brain/planner/catalogue.py``);
- ``reusable``: a fan-out item unchanged since an earlier run (``brain/plans/reuse.py``);
- ``brain_hooks``: ``brain/reactions.py``, in order, from ``brain/leases.py``.

The executor is not here (``common`` imports no executor): ``executors/base.py`` keys
its ``EXECUTORS`` by these names, and ``tests/unit/test_task_types.py`` fails when a
name is missing there or any derived table disagrees with this one. AGENTS.md, "How to
add a task type", lists the files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from airig.common.task_schemas import (
    EmbedPayload,
    FramesPayload,
    HtmlPayload,
    ImagePayload,
    LlmPayload,
    NoopPayload,
    NotePayload,
    OcrPayload,
    PagesPayload,
    Payload,
    PlanPayload,
    ResourcePayload,
    ShellPayload,
    TranscribePayload,
)

# The compute services a task's model may run on.
OLLAMA, WHISPER, COMFYUI = "ollama", "whisper", "comfyui"
# The brain's reactions a type may name (``airig/brain/reactions.py`` registers each).
HOOKS = ("planner", "index", "training_sample")


@dataclass(frozen=True)
class TaskType:
    """One task type. Only ``name``, ``payload``, ``task_class``, ``model_service`` and
    ``writes_files`` must be given; the rest default to "nothing special"."""

    name: str
    payload: type[Payload]
    # The class a task without ``task_class`` gets (``protocol.TASK_CLASSES``).
    task_class: str
    # The compute service whose model it runs (and where a worker swaps that model in):
    # "ollama", "whisper", "comfyui", or None (no model, or ``service_from_payload``).
    model_service: str | None
    # Its executor may write files: the worker gives each attempt a folder of its own.
    writes_files: bool
    # The service is the payload's ``service`` field (``resource``).
    service_from_payload: bool = False
    # A task without a class is classed by its content (keywords), not by its type.
    class_by_content: bool = False
    # The output key naming what it wrote on the data volume: a path, or a list of
    # entries with a ``path`` (a fan-out item is reused only while those files stand).
    data_files: str | None = None
    # Its payload is a model's prompt: escalation measures it against the local window.
    prompt_payload: bool = False
    # The external tier may hand it back as a subtask of a breakdown.
    external_subtask: bool = False
    # The brain's planner model is shown it (``shell`` and ``plan`` also need the plan
    # task to allow them: untrusted, or no room left to grow).
    planned: bool = True
    # Payload fields the brain fills, never a model: hidden from the planner's catalogue.
    brain_fields: frozenset[str] = frozenset()
    # A fan-out item of this type may be carried over from an earlier run.
    reusable: bool = True
    # What the brain does with it, in order (names in ``HOOKS``): on the claim, before
    # its success is stored (may fail the attempt), after its success or failure.
    brain_hooks: tuple[str, ...] = ()


_DECLARED = (
    TaskType(
        "llm", LlmPayload, "llm", OLLAMA, writes_files=False,
        prompt_payload=True, external_subtask=True, brain_hooks=("training_sample",),
    ),
    TaskType(
        "embed", EmbedPayload, "script", OLLAMA, writes_files=False,
        external_subtask=True, brain_hooks=("index",),
    ),
    TaskType("transcribe", TranscribePayload, "script", WHISPER, writes_files=True,
             external_subtask=True),
    TaskType("image", ImagePayload, "script", COMFYUI, writes_files=True, external_subtask=True),
    TaskType(
        "shell", ShellPayload, "cpu", None, writes_files=True,
        class_by_content=True, brain_fields=frozenset({"inputs"}), reusable=False,
    ),
    TaskType(
        "resource", ResourcePayload, "resource", None, writes_files=False,
        service_from_payload=True, planned=False,
    ),
    TaskType("noop", NoopPayload, "cpu", None, writes_files=False, class_by_content=True,
             external_subtask=True),
    TaskType(
        "plan", PlanPayload, "llm", OLLAMA, writes_files=False,
        brain_fields=frozenset({"catalogue", "previous_errors"}), reusable=False,
        brain_hooks=("planner",),
    ),
    TaskType("frames", FramesPayload, "cpu", None, writes_files=True, data_files="frames"),
    TaskType("pages", PagesPayload, "cpu", None, writes_files=True, data_files="pages"),
    # A vision model on Ollama (or tesseract: ``executors/ocr.py may_use_model``).
    TaskType("ocr", OcrPayload, "llm", OLLAMA, writes_files=True),
    TaskType("note", NotePayload, "cpu", None, writes_files=True, data_files="path"),
    # An HTML page's text and its chunks for an index (the zim-articles recipe).
    TaskType("html", HtmlPayload, "cpu", None, writes_files=True, data_files="path"),
)  # fmt: skip

TASK_TYPES: Mapping[str, TaskType] = MappingProxyType({t.name: t for t in _DECLARED})

# Views of the table, for the readers that need only one column.
PAYLOAD_SCHEMAS: Mapping[str, type[Payload]] = MappingProxyType(
    {name: t.payload for name, t in TASK_TYPES.items()}
)
DEFAULT_CLASS_FOR_TYPE: Mapping[str, str] = MappingProxyType(
    {name: t.task_class for name, t in TASK_TYPES.items()}
)


def names_where(**traits: Any) -> tuple[str, ...]:
    """The types whose fields equal ``traits``, in the table's order."""
    return tuple(
        name
        for name, t in TASK_TYPES.items()
        if all(getattr(t, field) == value for field, value in traits.items())
    )


def service_of(task_type: str, payload: Mapping[str, Any] | str | None = None) -> str | None:
    """The compute service a task of this type (and payload, a mapping or its JSON text)
    calls, or None: an unknown type, one without a model, a payload naming none."""
    spec = TASK_TYPES.get(task_type)
    if spec is None:
        return None
    if not spec.service_from_payload:
        return spec.model_service
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            return None
    service = payload.get("service") if isinstance(payload, Mapping) else None
    return service if isinstance(service, str) else None
