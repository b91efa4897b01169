"""The executors' one entry point: validate a payload, then run it.

The worker calls ``run_task``; only ``TaskError`` leaves it. Importing this module pulls
in the HTTP clients; the brain, which only validates, imports ``airig.common.task_schemas``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar, cast

from pydantic import ValidationError

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
from airig.common.task_types import DEFAULT_CLASS_FOR_TYPE, PAYLOAD_SCHEMAS
from airig.executors.context import ExecContext, ExecResult, TaskError, elapsed_ms
from airig.executors.embed import execute_embed
from airig.executors.frames import execute_frames
from airig.executors.html import execute_html
from airig.executors.image import execute_image
from airig.executors.llm import execute_llm
from airig.executors.noop import execute_noop
from airig.executors.note import execute_note
from airig.executors.ocr import execute_ocr, may_use_model
from airig.executors.pages import execute_pages
from airig.executors.plan import execute_plan
from airig.executors.resource import execute_resource
from airig.executors.shell import execute_shell
from airig.executors.transcribe import execute_transcribe

__all__ = [
    "DEFAULT_CLASS_FOR_TYPE",
    "EXECUTORS",
    "PAYLOAD_SCHEMAS",
    "ExecContext",
    "ExecResult",
    "TaskError",
    "run_task",
    "uses_model",
    "validate_payload",
]

log = logging.getLogger(__name__)

P = TypeVar("P", bound=Payload)
# An executor as the table holds it: any payload model, the one its type's schema made.
Executor = Callable[[Payload, ExecContext], ExecResult]


def _executor(schema: type[P], execute: Callable[[P, ExecContext], ExecResult]) -> Executor:
    """``execute`` as a table entry, once mypy has checked it takes ``schema``'s model.

    The cast holds because ``run_task`` only calls ``EXECUTORS[task_type]`` with what
    ``PAYLOAD_SCHEMAS[task_type]`` (the table's ``payload``) validated, and each entry
    below names that schema.
    """
    return cast(Executor, execute)


# One executor per name of ``airig.common.task_types.TASK_TYPES`` (the table declares the
# type; ``tests/unit/test_task_types.py`` fails on a name missing here or one too many).
EXECUTORS: dict[str, Executor] = {
    "llm": _executor(LlmPayload, execute_llm),
    "embed": _executor(EmbedPayload, execute_embed),
    "transcribe": _executor(TranscribePayload, execute_transcribe),
    "image": _executor(ImagePayload, execute_image),
    "shell": _executor(ShellPayload, execute_shell),
    "resource": _executor(ResourcePayload, execute_resource),
    "noop": _executor(NoopPayload, execute_noop),
    "plan": _executor(PlanPayload, execute_plan),
    "frames": _executor(FramesPayload, execute_frames),
    "pages": _executor(PagesPayload, execute_pages),
    "ocr": _executor(OcrPayload, execute_ocr),
    "note": _executor(NotePayload, execute_note),
    "html": _executor(HtmlPayload, execute_html),
}


def validate_payload(task_type: str, payload: dict) -> Payload:
    """The payload as its type's model, or a non-retryable ``bad_input`` TaskError."""
    schema = PAYLOAD_SCHEMAS.get(task_type)
    if schema is None:
        raise TaskError(
            f"unknown task type {task_type!r}",
            error_type="bad_input",
            retryable=False,
            hint="one of: " + ", ".join(sorted(PAYLOAD_SCHEMAS)),
        )
    try:
        return schema.model_validate(payload)
    except ValidationError as exc:
        errors = [
            {
                "field": ".".join(str(part) for part in error["loc"]) or "payload",
                "msg": error["msg"],
            }
            for error in exc.errors(include_url=False, include_input=False)
        ]
        summary = "; ".join(f"{error['field']}: {error['msg']}" for error in errors[:5])
        raise TaskError(
            f"invalid {task_type} payload: {summary}",
            error_type="bad_input",
            retryable=False,
            details={"errors": errors},
        ) from None


# The types whose executor may run without the payload's model, and whether it will.
_MODEL_OPTIONAL: dict[str, Callable[[Payload, int | None], bool]] = {
    "ocr": lambda payload, gpu: may_use_model(cast(OcrPayload, payload), gpu),
}


def uses_model(task_type: str, payload: dict, gpu_index: int | None) -> bool:
    """Whether this task, run on a worker with ``gpu_index``, may call its model: the
    worker loads a model ahead of a task (``worker/swap.py``) only when it will. A payload
    that does not validate fails in ``run_task`` before any model call: False."""
    decide = _MODEL_OPTIONAL.get(task_type)
    if decide is None:
        return True
    try:
        return decide(validate_payload(task_type, payload), gpu_index)
    except TaskError:
        return False


def run_task(task_type: str, payload: dict, ctx: ExecContext) -> ExecResult:
    """Validate and run one attempt; only TaskError escapes, with an exact error_type."""
    model = validate_payload(task_type, payload)
    ctx.check()
    start = time.monotonic()
    try:
        result = EXECUTORS[task_type](model, ctx)
    except TaskError:
        raise
    except Exception as exc:
        # A bug or an unforeseen library error: keep the worker alive, report it, log it.
        log.exception("executor %s failed unexpectedly", task_type)
        raise TaskError(
            f"{task_type} executor failed: {type(exc).__name__}: {str(exc)[:300]}",
            error_type="executor_error",
        ) from None
    result.metrics.setdefault("wall_ms", elapsed_ms(start))
    return result
