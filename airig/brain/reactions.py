"""What the brain does with a task of a given type beyond storing it: the hooks a
``TaskType`` names in ``brain_hooks`` (``airig/common/task_types.py``), registered here
by name and run by ``leases.py`` in the table's order:

- ``planner`` (``plan``): the catalogue put into its payload when a worker claims it
  (``planner/catalogue.py``); its answer taken before its success is stored, the
  proposed tasks joining the graph or the draft awaiting approval (``planner/hook.py``);
- ``index`` (``embed``): an index's vectors written before its success is stored
  (``store/vectors.py``);
- ``training_sample`` (``llm``): each finished or failed attempt one line of the
  training-sample log.

A hook that runs before a success may refuse it: it returns the task's row after the
failed attempt, and the success is not stored. ``leases.claim`` and ``complete`` name no
type; the shell taint guard there stays explicit (a command never runs tainted input).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from airig.brain.planner import catalogue
from airig.brain.planner import hook as planner_hook
from airig.brain.settings import BrainSettings
from airig.brain.store import plans, results, states, tokens, vectors
from airig.brain.store.events import Outbox
from airig.brain.store.payloads import rendered_payload
from airig.brain.store.retry import TASK, RetryPolicy
from airig.common.protocol import CompleteRequest, FailRequest
from airig.common.task_types import TASK_TYPES

log = logging.getLogger("airig.brain.reactions")


class Reaction:
    """One hook; each step does nothing unless a hook overrides it."""

    def on_claim(
        self, conn: sqlite3.Connection, task: sqlite3.Row, payload: dict[str, Any],
        settings: BrainSettings, now: float,
    ) -> dict[str, Any]:  # fmt: skip
        """The payload the worker is handed (the rendered one, or what the hook adds)."""
        return payload

    def before_success(
        self, conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row,
        report: CompleteRequest, now: float, settings: BrainSettings, tainted: int,
        digest: str,
    ) -> sqlite3.Row | None:  # fmt: skip
        """None to go on; else the task's row after its failed attempt (nothing stored)."""
        return None

    def after_success(
        self, conn: sqlite3.Connection, outbox: Outbox, done: sqlite3.Row,
        report: CompleteRequest, settings: BrainSettings,
    ) -> None:  # fmt: skip
        """After the task is SUCCEEDED and its dependents released."""

    def after_failure(
        self, conn: sqlite3.Connection, outbox: Outbox, after: sqlite3.Row,
        report: FailRequest, settings: BrainSettings,
    ) -> None:  # fmt: skip
        """After a failed attempt was recorded (retry, escalation or the end)."""


class Planner(Reaction):
    def on_claim(
        self, conn: sqlite3.Connection, task: sqlite3.Row, payload: dict[str, Any],
        settings: BrainSettings, now: float,
    ) -> dict[str, Any]:  # fmt: skip
        # the brain's catalogue: types, models, input files
        return catalogue.fill(conn, task, payload, settings, now)

    def before_success(
        self, conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row,
        report: CompleteRequest, now: float, settings: BrainSettings, tainted: int,
        digest: str,
    ) -> sqlite3.Row | None:  # fmt: skip
        # the model's tasks join the graph first, or the attempt fails
        output = results.value_of(report.output)
        return planner_hook.accept(conn, outbox, task, output, now, settings, bool(tainted), digest)


class Index(Reaction):
    def before_success(
        self, conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row,
        report: CompleteRequest, now: float, settings: BrainSettings, tainted: int,
        digest: str,
    ) -> sqlite3.Row | None:  # fmt: skip
        # an index's vectors go in first, or the attempt fails
        return index_embeddings(conn, outbox, task, report, now, settings, tainted, digest)


class TrainingSample(Reaction):
    def after_success(
        self, conn: sqlite3.Connection, outbox: Outbox, done: sqlite3.Row,
        report: CompleteRequest, settings: BrainSettings,
    ) -> None:  # fmt: skip
        outbox.samples.append(training_sample(conn, done, report, settings, "succeeded"))

    def after_failure(
        self, conn: sqlite3.Connection, outbox: Outbox, after: sqlite3.Row,
        report: FailRequest, settings: BrainSettings,
    ) -> None:  # fmt: skip
        outbox.samples.append(training_sample(conn, after, report, settings, "failed"))


REACTIONS: Mapping[str, Reaction] = MappingProxyType(
    {"planner": Planner(), "index": Index(), "training_sample": TrainingSample()}
)


def of(task_type: str) -> tuple[Reaction, ...]:
    """The hooks of this type, in the table's order (none for an unknown type)."""
    spec = TASK_TYPES.get(task_type)
    return tuple(REACTIONS[name] for name in spec.brain_hooks) if spec is not None else ()


def index_embeddings(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, report: CompleteRequest,
    now: float, settings: BrainSettings, tainted: int, digest: str,
) -> sqlite3.Row | None:  # fmt: skip
    """An embed task with an ``index``: its vectors replace the ones it put there before.
    None when written (or no index); else the task's row after its failed attempt: another
    model than the index's, another owner's index, an untrusted output and no index yet,
    or an output that does not pair texts with vectors or holds a vector with no
    direction, fails for good; an index file that cannot be written is retried. Tainted
    output is indexed into an index that exists, its rows marked untrusted (search
    results show it). Whatever the index meets fails this attempt alone, never the
    exchange that carried the report with its neighbours."""
    payload = json.loads(task["payload_json"])
    name = payload.get("index")
    if not isinstance(name, str):
        return None
    # The payload names the model (validated at submission); the worker only says which
    # answered, and one that names another is refused: an untrusted rig's word never
    # fixes an index's model.
    model = str(payload.get("model") or task["model"])
    output = results.value_of(report.output)  # built here: the vectors are read
    answered = output.get("model")
    plan = plans.by_id(conn, task["plan_id"])
    owner = plan["owner"] if plan is not None else None
    writer = vectors.Writer(owner, tokens.owner_is_admin(conn, owner), bool(tainted))
    try:
        if "{{" in model:  # a template: the model as the claim rendered it
            model = str(rendered_payload(conn, task, settings).get("model"))
        if isinstance(answered, str) and not vectors.same_model(answered, model):
            raise vectors.IndexRefused(
                f"the payload asks for {model!r} and the worker answered vectors of "
                f"{answered!r}: embed with {model!r}",
                "index_model_mismatch",
            )
        entries = vectors.entries_of(output)
        vectors.replace_task(
            vectors.index_path(settings.data_dir), name, model, task["plan_id"], task["key"],
            entries, writer, now,
        )  # fmt: skip
        return None
    except vectors.IndexRefused as exc:
        error_type, message, retryable = exc.error_type, str(exc), False
    except vectors.IndexUnavailable as exc:
        error_type, message, retryable = "index_unavailable", str(exc), True
    except Exception as exc:  # noqa: BLE001 - the index is a file of its own and sqlite-vec
        # a C extension: what they raise is not all known, and must not sink the exchange
        log.exception("search index %r: %s", name, type(exc).__name__)
        error_type, retryable = "index_unavailable", True
        message = f"cannot write the search index ({type(exc).__name__}): see the brain's log"
    policy = RetryPolicy(
        initial_s=settings.retry_initial_s, cap_s=settings.retry_cap_s,
        infra_budget=settings.infra_retries,
    )  # fmt: skip
    return states.retry_or_fail(
        conn, outbox, task, now, policy, TASK, error_type, message, retryable,
        result_hash=digest,
    )  # fmt: skip


def training_sample(
    conn: sqlite3.Connection, task: sqlite3.Row, report: Any, settings: BrainSettings,
    outcome: str,
) -> dict[str, Any]:  # fmt: skip
    payload = rendered_payload(conn, task, settings)
    output = results.value_of(getattr(report, "output", None) or {})
    return {
        "timestamp": task["finished_at"],
        "plan": task["plan_id"],
        "task_id": task["key"],
        "model": task["model"] or payload.get("model"),
        "prompt": payload.get("prompt") or json.dumps(payload.get("messages", "")),
        "response": output.get("text"),
        "error": getattr(report, "message", None),
        "outcome": outcome,
        "metrics": getattr(report, "metrics", {}),
        "sensitive": bool(task["sensitive"]),
    }
