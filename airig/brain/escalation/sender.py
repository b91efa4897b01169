"""The thread that sends queued escalations to the gateway and applies what comes back.

Each call is three steps: approve and mark it ``sent`` in one transaction (budget, rate
limit, the handoff built once and stored), the HTTP call with no transaction open (claims
and reports go on meanwhile), then one transaction that records the call and moves the
task. A brain that stops between the first and the last step finds the row ``sent`` when
it starts again and sends it again under the same request id, which the gateway answers
without a second provider call. Retryable errors (gateway or provider down) back off
exponentially with full jitter (``RetryPolicy.backoff``) while the task waits ESCALATED
with the reason in view; after ``MAX_ATTEMPTS`` the task fails.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, Protocol, TypeVar

from airig.brain.escalation import budget, criteria, handoff, images, ledger, reply, review
from airig.brain.escalation.client import CallResult, GatewayClient
from airig.brain.planner.grow import GrowthRefused
from airig.brain.settings import BrainSettings
from airig.brain.store import escalations, payloads, states
from airig.brain.store.events import Outbox, record
from airig.brain.store.retry import RetryPolicy
from airig.brain.store.unwritable import StoreUnwritable
from airig.common.external_images import ImageRefused
from airig.common.protocol import TaskState as S

log = logging.getLogger("airig.brain.escalation")

T = TypeVar("T")
MAX_ATTEMPTS = 20  # sends of one call before its task fails (about 1.5 h at the 300 s cap)
INTERVAL_S = 0.5


class Writer(Protocol):
    def __call__(self, change: Callable[[sqlite3.Connection, Outbox, float], T]) -> T: ...


def _say(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, now: float, reason: str
) -> None:
    """Show why an escalated task waits (its ``reason``; an event when it changes)."""
    if task["reason"] == reason:
        return
    escalations.set_reason(conn, task["id"], reason)
    record(conn, outbox, "task_escalation_waiting", task, now, reason=reason)


def _fail(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, now: float,
    error_type: str, error: str,
) -> None:  # fmt: skip
    if task["state"] == S.ESCALATED:
        states.fail_terminal(conn, outbox, task, now, error_type, error, error)


class Sender(threading.Thread):
    def __init__(
        self, write: Writer, settings: BrainSettings, policy: RetryPolicy,
        client: GatewayClient | None = None,
        read: Callable[[], AbstractContextManager[sqlite3.Connection]] | None = None,
        reviewer: review.Reviewer | None = None, leads: Callable[[], bool] = lambda: True,
    ) -> None:  # fmt: skip
        super().__init__(name="escalations", daemon=True)
        self._leads = leads  # brains sharing one store: only the one running its timers sends
        self._write = write
        self.settings = settings
        self.policy = policy
        self.client = client or GatewayClient(settings.gateway_url, settings.gateway_token)
        self._read = read
        # The brain model's verdict on a first failure, only when both switches are on.
        self.reviewer = None
        if settings.escalation and settings.escalation_review:
            self.reviewer = reviewer or review.OllamaReviewer(
                settings.review_ollama_url, settings.planner_model
            )
        self._stop_event = threading.Event()

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        while not self._stop_event.wait(INTERVAL_S):
            try:
                if self._leads():
                    self.tick()
            except StoreUnwritable:
                pass  # said once when it began (store/unwritable.py); tried again next pass
            except Exception:
                log.exception("escalation pass failed")

    def stop(self) -> None:
        self._stop_event.set()

    def tick(self) -> int:
        """One pass: divert what the criteria send, then every due call; calls made."""
        if self.reviewer is not None:
            self.review()
        made = 0
        for request_id in self.due():
            if self._stop_event.is_set():
                break
            made += self.send_one(request_id)
        return made

    def due(self) -> list[str]:
        """Divert READY tasks the criteria send (so they show ESCALATED even when no
        worker claims), then the ids of the calls due now."""
        settings = self.settings
        if self._read is not None and not self._anything_to_do():
            return []  # an idle rig: no write transaction twice a second

        def divert(conn: sqlite3.Connection, outbox: Outbox, now: float) -> list[str]:
            criteria.divert(
                conn, outbox, now, settings, lambda t: payloads.rendered_payload(conn, t, settings)
            )
            return [row["id"] for row in ledger.due(conn, now)]

        return self._write(divert)

    def review(self) -> int:
        """Judge the first failures due for the brain model's verdict; how many escalated."""
        assert self.reviewer is not None
        if self._read is not None:
            with self._read() as conn:
                if not review.anything_due(conn):
                    return 0
        escalated = 0
        settings, model = self.settings, self.settings.planner_model
        for task_id, prompt in self._write(lambda c, o, now: review.take_due(c)):
            verdict = self.reviewer.judge(review.SYSTEM, prompt)  # no transaction open
            escalated += self._write(partial(review.apply, task_id=task_id, verdict=verdict,
                                             settings=settings, model=model))  # fmt: skip
        return escalated

    def _anything_to_do(self) -> bool:
        assert self._read is not None
        now = time.time()
        with self._read() as conn:
            ready = escalations.any_due_to_divert(conn)
            return ready or bool(ledger.due(conn, now, limit=1))

    def send_one(self, request_id: str) -> int:
        body = self._write(lambda c, o, now: self.prepare(c, o, now, request_id))
        if body is None:
            return 0
        try:  # the images read whole, with no transaction open
            sent = images.expand(body, self.settings.data_dir)
        except ImageRefused as exc:
            why = str(exc)
            self._write(lambda c, o, now: self.refused(c, o, now, request_id, why))
            return 0
        result = self.client.complete(sent)
        self._write(lambda c, o, now: self.finish(c, o, now, request_id, body, result))
        return 1

    def refused(
        self, conn: sqlite3.Connection, outbox: Outbox, now: float, request_id: str, why: str
    ) -> None:
        """The call may not be sent after all (an image changed or went away)."""
        ledger.update(conn, request_id, state="failed", error=why, next_try_at=None)
        row = ledger.get(conn, request_id)
        task = states.get_task(conn, row["task_id"]) if row is not None else None
        if task is not None:
            _fail(conn, outbox, task, now, "escalation_refused", why)

    # ------------------------------------------------------------------ step 1
    def prepare(
        self, conn: sqlite3.Connection, outbox: Outbox, now: float, request_id: str
    ) -> dict[str, Any] | None:
        """The request to send now (the row marked ``sent``), or None: not due, waiting
        for the budget or the rate limit, or given up on (the task failed)."""
        row = ledger.get(conn, request_id)
        if row is None or row["state"] not in ledger.DUE_STATES or row["next_try_at"] is None:
            return None
        task = states.get_task(conn, row["task_id"])
        if task is None or task["state"] != S.ESCALATED:
            gone = task["state"] if task is not None else "deleted"
            ledger.update(conn, request_id, state="failed", error=f"task {gone}", next_try_at=None)
            return None
        stop = criteria.blocked(conn, task, self.settings)
        if stop:
            ledger.update(conn, request_id, state="failed", error=stop, next_try_at=None)
            _fail(conn, outbox, task, now, "not_escalated", f"not escalated: {stop}")
            return None
        if row["request_json"] is None:
            try:
                handoff.refuse_sensitive(conn, task)  # before an image is even looked at
                refs = images.references(conn, task, self.settings)
                built = handoff.build(
                    conn, task, row["why"], self.settings.results_dir,
                    self.settings.escalation_max_tokens, refs, images.from_outputs(task),
                )  # fmt: skip
            except (handoff.HandoffRefused, ImageRefused) as exc:
                ledger.update(conn, request_id, state="failed", error=str(exc), next_try_at=None)
                _fail(conn, outbox, task, now, "escalation_refused", str(exc))
                return None
            ledger.update(conn, request_id, request_json=json.dumps(built))
            request = built
        else:
            request = json.loads(row["request_json"])
        if row["state"] != "sent" and not self._approve(conn, outbox, row, task, request, now):
            return None
        attempts = row["attempts"] + 1
        ledger.update(conn, request_id, state="sent", sent_at=now, attempts=attempts, error=None)
        _say(conn, outbox, task, now, f"sent to the external tier (call {request_id[:8]}, "
             f"attempt {attempts})")  # fmt: skip
        return {"request_id": request_id, **request}

    def _approve(
        self, conn: sqlite3.Connection, outbox: Outbox, row: sqlite3.Row, task: sqlite3.Row,
        request: dict[str, Any], now: float,
    ) -> bool:  # fmt: skip
        """Budget and rate limit for a call about to be made; False when it may not go."""
        s = self.settings
        tokens_in = budget.estimate_tokens(handoff.request_text(request))
        tokens_in += images.image_tokens(request)
        estimate = budget.cost(
            tokens_in, request["max_tokens"], s.escalation_price_in, s.escalation_price_out
        )
        ledger.update(conn, row["id"], estimated_cost=estimate)
        spent = ledger.spend(conn, now, excluding=row["id"])
        over = budget.over_budget(
            estimate, spent, budget.Budget(s.escalation_budget_daily, s.escalation_budget_monthly)
        )
        if over:
            if row["state"] != "over_budget":
                outbox.metric("escalation_calls", outcome="over_budget")
            if s.escalation_over_budget == "fail":
                ledger.update(conn, row["id"], state="over_budget", error=over, next_try_at=None)
                _fail(conn, outbox, task, now, "over_budget", f"not sent: {over}")
            else:
                ledger.update(
                    conn, row["id"], state="over_budget", error=over,
                    next_try_at=budget.recheck_at(now, over),
                )  # fmt: skip
                _say(conn, outbox, task, now, f"waiting: {over}")
            return False
        recent = ledger.recent_sends(conn, now - budget.RATE_WINDOW_S)
        next_at = budget.rate_limited(recent, now, s.escalation_rate_per_min)
        if next_at is not None:
            why = f"rate limit of {s.escalation_rate_per_min} calls a minute"
            ledger.update(conn, row["id"], state="queued", next_try_at=next_at, error=why)
            _say(conn, outbox, task, now, f"waiting: {why} (AIRIG_ESCALATION_RATE_PER_MIN)")
            return False
        return True

    # ------------------------------------------------------------------ step 3
    def finish(
        self, conn: sqlite3.Connection, outbox: Outbox, now: float, request_id: str,
        body: dict[str, Any], result: CallResult,
    ) -> None:  # fmt: skip
        row = ledger.get(conn, request_id)
        if row is None:
            return
        task = states.get_task(conn, row["task_id"])
        if not result.ok:
            self._failed_call(conn, outbox, now, row, task, result)
            return
        s = self.settings
        answer = result.body
        tokens_in, tokens_out = (
            int(answer.get("input_tokens") or 0),
            int(answer.get("output_tokens") or 0),
        )
        spent = budget.cost(tokens_in, tokens_out, s.escalation_price_in, s.escalation_price_out)
        call = {
            "provider": answer.get("provider"), "model": answer.get("model"),
            "input_tokens": tokens_in, "output_tokens": tokens_out, "cost": spent,
            "escalation_id": request_id,
        }  # fmt: skip
        ledger.update(
            conn, request_id, state="answered", answered_at=now, provider=call["provider"],
            model=call["model"], input_tokens=tokens_in, output_tokens=tokens_out, cost=spent,
            error=None, next_try_at=None,
        )  # fmt: skip
        outbox.metric("escalation_tokens", tokens_in, direction="in")
        outbox.metric("escalation_tokens", tokens_out, direction="out")
        outbox.metric("escalation_cost", spent)
        if task is None or task["state"] != S.ESCALATED:
            ledger.update(
                conn, request_id, outcome="discarded", error="the task was no longer waiting"
            )
            outbox.metric("escalation_calls", outcome="discarded")
            return
        parsed = reply.parse(answer["text"])
        problem = parsed.problem
        if parsed.kind == "answer":
            reply.answer(conn, outbox, task, parsed.value, call, now, s)
        elif parsed.kind == "subtasks":
            try:
                reply.breakdown(conn, outbox, task, parsed.value, call, now, s)
            except GrowthRefused as exc:
                problem = f"the subtasks were refused: {exc}"
        outcome = (
            "invalid" if problem else {"answer": "answer", "subtasks": "breakdown"}[parsed.kind]
        )
        ledger.update(conn, request_id, outcome=outcome)
        outbox.metric("escalation_calls", outcome=outcome)
        if problem:
            self._unusable(conn, outbox, now, row, task, body, answer["text"], problem)

    def _unusable(
        self, conn: sqlite3.Connection, outbox: Outbox, now: float, row: sqlite3.Row,
        task: sqlite3.Row, body: dict[str, Any], text: str, problem: str,
    ) -> None:  # fmt: skip
        ledger.update(conn, row["id"], error=problem[:2000])
        if row["reask"]:
            why = f"the external tier's reply could not be used, twice: {problem}"
            _fail(conn, outbox, task, now, "escalation_unusable", why[:4000])
            return
        request = {k: v for k, v in body.items() if k != "request_id"}
        ledger.enqueue(conn, task, row["why"], now, handoff.reask(request, text, problem), 1)
        _say(conn, outbox, task, now, f"asking the external tier once more: {problem}"[:2000])

    def _failed_call(
        self, conn: sqlite3.Connection, outbox: Outbox, now: float, row: sqlite3.Row,
        task: sqlite3.Row | None, result: CallResult,
    ) -> None:  # fmt: skip
        waiting = task is not None and task["state"] == S.ESCALATED
        if result.retryable and row["attempts"] < MAX_ATTEMPTS and waiting:
            delay = self.policy.backoff(row["attempts"])
            if result.retry_after_s:  # the provider said when; sooner is refused anyway
                delay = max(delay, min(result.retry_after_s, self.policy.cap_s))
            ledger.update(
                conn, row["id"], state="queued", next_try_at=now + delay, error=result.error[:2000]
            )
            outbox.metric("escalation_calls", outcome="retry")
            assert task is not None
            retry = f"retry {row['attempts'] + 1} in {delay:.1f}s"
            _say(conn, outbox, task, now, f"waiting: {result.error[:300]}; {retry}")
            return
        ledger.update(conn, row["id"], state="failed", error=result.error[:2000], next_try_at=None)
        outbox.metric("escalation_calls", outcome="failed")
        if waiting:
            assert task is not None
            tries = f" after {row['attempts']} attempts" if result.retryable else ""
            _fail(conn, outbox, task, now, "escalation_failed",
                  f"the external tier failed{tries}: {result.error}"[:4000])  # fmt: skip
