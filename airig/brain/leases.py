"""Claims and the fenced worker writes (start, renew, complete, fail, release), and the
end of every attempt of a worker that restarted, stopped or was cut off (``drop_leases``).

Every write names (task id, attempt, lease id) and the calling worker; anything else than
the live lease of that worker raises ``StaleLease`` (HTTP 409) and changes nothing. The
exact report that ended an attempt may be replayed (a worker retrying after a timeout)
and is answered as if it were new, without a second commit.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from typing import Any

from airig.brain import reactions
from airig.brain.escalation import criteria
from airig.brain.planner import fanout
from airig.brain.scheduling.placement import Placement
from airig.brain.scheduling.residency import Decision
from airig.brain.scheduling.workers import WorkerView
from airig.brain.settings import BrainSettings
from airig.brain.store import reaping, results, reuse, states, trust, workers
from airig.brain.store.events import Outbox
from airig.brain.store.payloads import (
    ClaimBudget,
    OverClaimBudget,
    refuse_oversized,
    rendered_payload,
)
from airig.brain.store.retry import INFRA, TASK, RetryPolicy, failure_kind
from airig.common.protocol import CompleteRequest, FailRequest, LeaseRef
from airig.common.protocol import TaskState as S

log = logging.getLogger("airig.brain.leases")


class StaleLease(Exception):
    """The write does not belong to the live lease of this worker."""


def check_fence(task: sqlite3.Row, worker_id: str, ref: LeaseRef) -> None:
    if (
        task["state"] not in S.LIVE_LEASE
        or task["worker_id"] != worker_id
        or task["attempt"] != ref.attempt
        or task["lease_id"] != ref.lease_id
    ):
        raise StaleLease(
            f"task {task['id']} attempt {ref.attempt} is not leased to {worker_id} "
            f"(state {task['state']}, attempt {task['attempt']})"
        )


def is_replay(task: sqlite3.Row, worker_id: str, ref: LeaseRef, report_hash: str) -> bool:
    return (
        task["state"] not in S.LIVE_LEASE
        and task["worker_id"] == worker_id
        and task["attempt"] == ref.attempt
        and task["lease_id"] == ref.lease_id
        and task["result_hash"] == report_hash
    )


# Tasks failed for a broken payload template within one claim before giving up on it.
MAX_TEMPLATE_FAILURES = 20


def claim(
    conn: sqlite3.Connection,
    outbox: Outbox,
    worker_id: str,
    view: WorkerView,
    now: float,
    settings: BrainSettings,
    placement: Placement,
    lease_id: str | None = None,
    budget: ClaimBudget | None = None,
) -> tuple[sqlite3.Row, dict[str, Any], Decision] | None:
    """Lease the task the residency policy picks for this worker: (row, payload, decision,
    whose load / evict the worker carries out before running it), or None. None too when
    the task's payload would not fit in the claim's ``budget`` (it stays READY)."""
    states.promote_due(conn, outbox, now)
    # Tasks for the external tier leave READY before any worker can be handed them.
    criteria.divert(conn, outbox, now, settings, lambda t: rendered_payload(conn, t, settings))
    for _ in range(MAX_TEMPLATE_FAILURES):
        decision = placement.choose(conn, worker_id, view, now)
        if decision is None:
            return None
        # A READY candidate the placement just read in this transaction.
        task = states.require_task(conn, decision.task.task_id)
        tainted = trust.tainted_sources(conn, task)  # read untrusted output: run untrusted
        if tainted and task["type"] == "shell":
            error = trust.tainted_command(tainted)
            states.fail_terminal(conn, outbox, task, now, "tainted_command", error, "tainted input")
            continue
        try:
            payload = rendered_payload(conn, task, settings, budget)
        except OverClaimBudget:
            return None
        except (KeyError, OSError, ValueError) as exc:
            states.fail_terminal(
                conn, outbox, task, now, "template_error", str(exc), "payload template"
            )
            continue
        for reaction in reactions.of(task["type"]):  # the plan task's catalogue
            payload = reaction.on_claim(conn, task, payload, settings, now)
        placed = {"placement": decision.reason, "load": decision.load, "evict": decision.evict}
        # A GPU worker swaps first, within the task's timeout_s, then runs the task.
        runtime_s = task["timeout_s"] * (2 if decision.load or decision.evict else 1)
        leased = states.transition(
            conn, outbox, task, S.LEASED, now, "task_leased", placed,
            attempt=task["attempt"] + 1, lease_id=lease_id or uuid.uuid4().hex, worker_id=worker_id,
            lease_expires_at=now + settings.lease_s, result_hash=None,
            attempt_deadline=now + runtime_s + settings.runtime_grace_s,
            trusted=0 if tainted else task["trusted"],
        )  # fmt: skip
        workers.claimed(conn, worker_id, now)
        return leased, payload, decision
    return None


def start(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, worker_id: str,
    ref: LeaseRef, now: float, settings: BrainSettings,
) -> sqlite3.Row:  # fmt: skip
    check_fence(task, worker_id, ref)
    if task["state"] == S.RUNNING:
        return task
    outbox.metric("schedule_to_start", now - (task["ready_at"] or now))
    # A prefetched task waited on its worker: its runtime limit counts from now, not the claim.
    runtime_end = now + task["timeout_s"] + settings.runtime_grace_s
    deadline = max(task["attempt_deadline"] or 0, runtime_end)
    return states.transition(
        conn, outbox, task, S.RUNNING, now, "task_started",
        started_at=now, attempt_deadline=deadline,
    )  # fmt: skip


def renew(
    conn: sqlite3.Connection, task: sqlite3.Row, worker_id: str, ref: LeaseRef,
    now: float, lease_s: float,
) -> float:  # fmt: skip
    check_fence(task, worker_id, ref)
    expires = now + lease_s
    reaping.renew_lease(conn, task["id"], expires)
    return expires


def _tokens(metrics: dict[str, Any]) -> Any:
    return metrics.get("tokens_generated", metrics.get("eval_count"))


def complete(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, worker_id: str,
    report: CompleteRequest, now: float, settings: BrainSettings,
) -> sqlite3.Row:  # fmt: skip
    digest = results.result_hash(report.output, report.files)
    if is_replay(task, worker_id, report, digest):
        return task
    check_fence(task, worker_id, report)
    tainted_output = int(not task["trusted"] or not trust.worker_trusted(conn, worker_id))
    hooks = reactions.of(task["type"])
    for hook in hooks:  # a plan's tasks join the graph, an index's vectors go in: first
        refused = hook.before_success(
            conn, outbox, task, report, now, settings, tainted_output, digest
        )
        if refused is not None:  # or the attempt fails
            return refused
    output_json, output_file = results.store_output(
        settings.results_dir, task["plan_id"], task["key"], report.output,
        settings.result_inline_bytes,
    )  # fmt: skip
    started = task["started_at"] or now
    done = states.transition(
        conn, outbox, task, S.SUCCEEDED, now, "task_completed",
        {"duration_ms": round((now - started) * 1000), "tokens_generated": _tokens(report.metrics)},
        output_json=output_json, output_file=output_file, result_hash=digest,
        files_json=json.dumps(report.files), metrics_json=json.dumps(report.metrics),
        error=None, error_type=None, reason=None,
        tainted_output=tainted_output,
    )  # fmt: skip
    if done["fingerprint"] is not None:  # what a later submit checks before reusing it
        reuse.record_written(conn, done, report.output, settings.data_dir)
    for ready in states.release_dependents(conn, outbox, done, now):
        refuse_oversized(conn, outbox, ready, now, settings)
    # a `from` group on this output, read from the report: not loaded back beside it
    fanout.start_groups(conn, outbox, done, now, settings, report.output)
    for hook in hooks:  # an llm task's training sample
        hook.after_success(conn, outbox, done, report, settings)
    return done


def fail(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, worker_id: str,
    report: FailRequest, now: float, policy: RetryPolicy, settings: BrainSettings,
    placement: Placement | None = None,
) -> sqlite3.Row:  # fmt: skip
    digest = results.failure_hash(report.error_type, report.message)
    if is_replay(task, worker_id, report, digest):
        return task
    check_fence(task, worker_id, report)
    if failure_kind(report.error_type) == INFRA:
        # The worker's compute service did not answer (down, restarting): the task goes
        # back to the queue on the infra budget, never counted against its retry_count nor
        # escalated, and that service's tasks are held back from this worker a while.
        if placement is not None:
            placement.suspect(worker_id, task, now)
        return states.retry_or_fail(
            conn, outbox, task, now, policy, INFRA, report.error_type, report.message,
            report.retryable, result_hash=digest,
        )  # fmt: skip
    if placement is not None:  # the task's own failure: its key's learned failure rate
        placement.observe_failure(conn, task, worker_id, now)
    # escalate: on_failure hands the task to the external tier instead of retrying it.
    after = criteria.on_failure(
        conn, outbox, task, now, policy, settings, report.error_type, report.message,
        report.retryable, digest,
    ) or states.retry_or_fail(
        conn, outbox, task, now, policy, TASK, report.error_type, report.message,
        report.retryable, result_hash=digest,
    )  # fmt: skip
    for hook in reactions.of(task["type"]):
        hook.after_failure(conn, outbox, after, report, settings)
    return after


def release(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, worker_id: str,
    ref: LeaseRef, reason: str, now: float,
) -> sqlite3.Row:  # fmt: skip
    check_fence(task, worker_id, ref)
    return states.transition(
        conn, outbox, task, S.READY, now, "task_released", ready_at=now, reason=reason
    )


def drop_leases(
    conn: sqlite3.Connection,
    outbox: Outbox,
    policy: RetryPolicy,
    worker_id: str,
    now: float,
    why: str = "registered again",
) -> None:
    """A worker that registers again has restarted (or has stopped): its attempts are dead."""
    rows = reaping.leases_of(conn, worker_id)
    for task in rows:
        states.retry_or_fail(
            conn, outbox, task, now, policy, INFRA, "worker_restarted",
            f"worker {worker_id} {why} during attempt {task['attempt']}",
        )  # fmt: skip
