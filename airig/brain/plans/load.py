"""One call from a submitted body to a plan that can be stored.

Pure and bounded in time and memory by the body's size (the readers refuse aliases,
deep nesting and oversized literals before building anything), so the route runs it in
a worker thread and the event loop never waits on a hostile plan.
"""

from __future__ import annotations

from pathlib import Path

from airig.brain.plans.fanout import validate_with_fanout
from airig.brain.plans.models import PlanSpec
from airig.brain.plans.parse import PlanSyntaxError, detect_format, parse_plan
from airig.brain.plans.submit import body_hash
from airig.brain.plans.validate import Limits


def decode_body(raw: bytes) -> str:
    """The body as text; PlanSyntaxError when it is not UTF-8 (replacing bad bytes would
    store a plan that differs from the one sent). A leading byte-order mark is dropped."""
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise PlanSyntaxError(
            f"plan body is not valid UTF-8 (byte {exc.start}); save the file as UTF-8"
        ) from None


def load_plan(
    raw: bytes, content_type: str | None, limits: Limits, data_dir: Path | None = None
) -> tuple[PlanSpec, set[str], str]:
    """(plan, tainted task ids, body digest); PlanSyntaxError or PlanInvalid. Fan-out
    groups are expanded (``plans/fanout.py``; a ``glob`` reads ``data_dir``)."""
    body = decode_body(raw)
    data = parse_plan(body, detect_format(content_type, body))
    plan, tainted = validate_with_fanout(data, limits, data_dir)
    return plan, tainted, body_hash(body)
