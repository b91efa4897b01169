"""The noop executor: returns its payload. Measures dispatch overhead; drives tests."""

from __future__ import annotations

from airig.common.task_schemas import NoopPayload
from airig.executors.context import ExecContext, ExecResult, TaskError


def execute_noop(payload: NoopPayload, ctx: ExecContext) -> ExecResult:
    if payload.sleep_s:
        # Sleep the way real work would: stoppable by cancel, bounded by the deadline.
        ctx.cancel.wait(min(payload.sleep_s, ctx.remaining()))
        ctx.check()
    if payload.fail is not None:
        raise TaskError(
            payload.fail.message,
            error_type=payload.fail.error_type,
            retryable=payload.fail.retryable,
        )
    return ExecResult(output=payload.model_dump(mode="json"))
