"""The external tier, brain side: criteria, budget arithmetic, the ledger, the sender's
state transitions (answer, breakdown, unusable reply, retries, budget, rate limit,
restart) with a recording gateway client in place of HTTP (tests/integration has the real
HTTP path)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from airig.brain.escalation import budget, criteria, handoff, ledger, reply, review
from airig.brain.escalation.client import CallResult
from airig.brain.escalation.sender import MAX_ATTEMPTS, Sender
from airig.brain.plans.validate import Limits, PlanInvalid, validate_plan
from airig.brain.store import escalations
from airig.common.spotlight import UNTRUSTED_CLOSE, UNTRUSTED_OPEN
from tests.unit import brain_helpers as h

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ON = {"AIRIG_ESCALATION": "on", "AIRIG_GATEWAY_TOKEN": "gateway-token-for-tests"}


class Recorder:
    """A gateway client that answers from a list and keeps every request it was sent."""

    def __init__(self, *answers: CallResult) -> None:
        self.answers = list(answers)
        self.sent: list[dict] = []

    def complete(self, body: dict) -> CallResult:
        self.sent.append(body)
        return self.answers.pop(0)


def said(text: str, tokens_in: int = 1000, tokens_out: int = 200) -> CallResult:
    return CallResult(ok=True, body={
        "request_id": "x", "provider": "anthropic", "model": "claude-test", "text": text,
        "input_tokens": tokens_in, "output_tokens": tokens_out, "stop_reason": "end_turn",
    })  # fmt: skip


def sender(brain, client: Recorder) -> Sender:
    return Sender(brain.write, brain.settings, brain.retry, client)  # type: ignore[arg-type]


def fail_twice(brain, plan: str, key: str = "a", now: float = 1000.0) -> None:
    for attempt in range(2):
        h.claim(brain, now + attempt * 10)
        h.do(brain, plan, key, "fail", now + attempt * 10 + 1, error_type="boom",
             message=f"local attempt {attempt + 1} broke")  # fmt: skip
        brain.write(lambda c, o, _: c.execute("UPDATE tasks SET not_before = 0"))


def calls(brain) -> list[dict]:
    with brain.db.read() as conn:
        return ledger.calls(conn)


# ---------------------------------------------------------------- budget arithmetic
def test_cost_is_per_million_tokens():
    assert budget.cost(1_000_000, 0, 3.0, 15.0) == 3.0
    assert budget.cost(2000, 1000, 3.0, 15.0) == pytest.approx(0.006 + 0.015)
    assert budget.estimate_tokens("a" * 9) == 3


def test_over_budget_names_the_period_and_the_numbers():
    limits = budget.Budget(daily=1.0, monthly=5.0)
    assert budget.over_budget(0.5, budget.Spend(today=0.5, month=0.5), limits) is None
    daily = budget.over_budget(0.6, budget.Spend(today=0.5, month=0.5), limits)
    assert daily and daily.startswith("over daily budget") and "1.0000" in daily
    monthly = budget.over_budget(0.6, budget.Spend(today=0.0, month=4.5), limits)
    assert monthly and monthly.startswith("over monthly budget")
    assert budget.over_budget(0.01, budget.Spend(0, 0), budget.Budget(0, 0)) is not None


def test_periods_are_utc_days_and_months():
    now = datetime(2026, 12, 31, 23, 30, tzinfo=UTC).timestamp()
    assert budget.day_start(now) == datetime(2026, 12, 31, tzinfo=UTC).timestamp()
    assert budget.month_start(now) == datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    assert budget.next_month_start(now) == datetime(2027, 1, 1, tzinfo=UTC).timestamp()
    # a waiting call looks again within a minute, or at the turn of the day if sooner
    assert budget.recheck_at(now, "over daily budget") == now + 60
    late = datetime(2026, 12, 31, 23, 59, 30, tzinfo=UTC).timestamp()
    assert budget.recheck_at(late, "over daily budget") == late + 30


def test_rate_limit_window():
    assert budget.rate_limited([100.0, 110.0], 120.0, 3) is None
    assert budget.rate_limited([100.0, 110.0, 115.0], 120.0, 3) == 160.0
    assert budget.rate_limited([10.0, 110.0, 115.0], 120.0, 3) is None  # 10 is out of the window


def test_backoff_grows_and_jitters_within_the_cap(tmp_path):
    policy = h.make_brain(tmp_path).retry
    rng = random.Random(7)
    delays = [policy.backoff(n, rng) for n in (1, 2, 3, 10)]
    assert all(0 <= d <= c for d, c in zip(delays, (1, 2, 4, 4), strict=True))
    assert len({round(policy.backoff(3, rng), 6) for _ in range(5)}) > 1


# ---------------------------------------------------------------- plan format
def test_flags_are_validated_and_sensitive_needs_allow_external():
    plan, _ = validate_plan({"tasks": [h.noop("a", escalate="on_failure")]}, Limits())
    assert (plan.tasks[0].escalate, plan.tasks[0].allow_external) == ("on_failure", False)
    with pytest.raises(PlanInvalid) as refused:
        validate_plan({"tasks": [h.noop("a", escalate="sometimes")]}, Limits())
    assert refused.value.errors[0]["task"] == "a"
    with pytest.raises(PlanInvalid) as secret:
        validate_plan({"tasks": [h.noop("a", escalate="always", sensitive=True)]}, Limits())
    assert "allow_external" in secret.value.errors[0]["message"]
    validate_plan(
        {"tasks": [h.noop("a", escalate="always", sensitive=True, allow_external=True)]}, Limits()
    )


# ---------------------------------------------------------------- criteria
def test_on_failure_escalates_after_two_local_failures(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="on_failure"), h.noop("b", ["a"])])
    h.claim(brain, 1000)
    h.do(brain, plan, "a", "fail", 1001, error_type="boom", message="first")
    assert h.state_of(brain, plan)["a"] == "RETRY_WAIT"
    brain.write(lambda c, o, _: c.execute("UPDATE tasks SET not_before = 0"))
    h.claim(brain, 1010)
    h.do(brain, plan, "a", "fail", 1011, error_type="boom", message="second")
    task = h.row(brain, plan, "a")
    assert (task["state"], task["task_errors"], task["error"]) == ("ESCALATED", 2, "second")
    assert "failed 2 times locally" in task["reason"]
    assert h.state_of(brain, plan)["b"] == "PENDING"
    assert [c["state"] for c in calls(brain)] == ["queued"]
    assert h.claim(brain, 1020) is None  # not claimable
    assert "task_escalated" in h.events(brain, plan)


def test_on_failure_with_no_retries_left_escalates_at_its_last_failure(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="on_failure", retry_count=0)])
    h.claim(brain, 1000)
    h.do(brain, plan, "a", "fail", 1001, error_type="boom", message="only")
    assert h.state_of(brain, plan)["a"] == "ESCALATED"


def test_escalation_off_fails_the_task_saying_so(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a", escalate="on_failure", retry_count=1)])
    fail_twice(brain, plan)
    task = h.row(brain, plan, "a")
    assert task["state"] == "FAILED" and "escalation is off" in task["reason"]
    always = h.submit(brain, [h.noop("x", escalate="always")])
    assert h.claim(brain, 2000) is None
    task = h.row(brain, always, "x")
    assert task["state"] == "FAILED" and "escalation is off" in task["error"]
    assert calls(brain) == []


def test_never_is_the_default_and_retries_as_before(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", retry_count=1)])
    fail_twice(brain, plan)
    assert h.state_of(brain, plan)["a"] == "FAILED" and calls(brain) == []


def test_always_is_diverted_before_any_worker_gets_it(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always"), h.noop("b")])
    got = h.claim(brain, 1000)
    assert got is not None and got[0]["key"] == "b"
    assert h.state_of(brain, plan)["a"] == "ESCALATED"
    assert h.claim(brain, 1001) is None


def test_a_prompt_over_the_local_window_escalates_before_running(tmp_path):
    brain = h.make_brain(tmp_path, AIRIG_LOCAL_CONTEXT_TOKENS=256, **ON)
    long_prompt = "word " * 400  # 2000 characters: ~500 tokens
    tasks = [
        {"id": "long", "type": "llm", "model": "m:1", "escalate": "on_failure",
         "payload": {"prompt": long_prompt}},
        {"id": "short", "type": "llm", "model": "m:1", "escalate": "on_failure",
         "payload": {"prompt": "hi"}},
    ]  # fmt: skip
    plan = h.submit(brain, tasks)
    got = h.claim(brain, 1000, classes=("llm",), models=("m:1",))
    assert got is not None and got[0]["key"] == "short"
    task = h.row(brain, plan, "long")
    assert task["state"] == "ESCALATED" and "over the local window of 256" in task["reason"]
    assert 500 <= task["context_tokens"] <= 502  # the prompt, plus the payload's model name
    short = criteria.prompt_tokens({"prompt": "hi", "model": "m:1"})
    assert h.row(brain, plan, "short")["context_tokens"] == short  # estimated once, kept


def test_the_partial_index_serves_the_divert_query(tmp_path):
    # SQLite's store pinned: EXPLAIN QUERY PLAN is SQLite's (PostgreSQL's test is below)
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL="")
    with brain.db.read() as conn:
        plan = conn.execute(
            f"EXPLAIN QUERY PLAN SELECT * FROM tasks WHERE state = 'READY' "
            f"AND ({criteria.DUE_WHERE})"
        ).fetchall()
    assert "tasks_escalation_due" in " ".join(str(tuple(r)) for r in plan)


def test_the_partial_indexes_serve_the_divert_and_review_queries_on_postgresql(tmp_path, pg_url):
    """PostgreSQL, too, proves the queries' WHERE implies its partial indexes' (the same
    words): neither query reads the whole tasks table."""
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL=pg_url)
    try:
        with brain.db.read() as conn:
            # a test's empty table is cheaper to scan: priced out, so that the plan shows
            # whether the partial index can serve the query at all
            conn.execute("SET LOCAL enable_seqscan = off")
            divert, review = (
                " ".join(r[0] for r in conn.execute(f"EXPLAIN SELECT * FROM tasks {where}"))
                for where in (
                    f"WHERE state = 'READY' AND ({criteria.DUE_WHERE})",
                    f"WHERE state IN ('RETRY_WAIT', 'READY') AND ({escalations.REVIEW_DUE})",
                )
            )
    finally:
        brain.db.close()
    assert "tasks_escalation_due" in divert and "Seq Scan" not in divert, divert
    assert "tasks_review_due" in review and "Seq Scan" not in review, review


# ---------------------------------------------------------------- handoff
def test_handoff_holds_the_task_every_attempt_and_upstream_outputs_wrapped(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [
        h.noop("up"), h.noop("a", ["up"], escalate="on_failure", payload={"echo": "goal"}),
    ])  # fmt: skip
    h.claim(brain, 990)
    h.do(brain, plan, "up", "complete", 991, output={"text": "upstream says hi"})
    fail_twice(brain, plan)
    with brain.db.read() as conn:
        body = handoff.build(conn, h.row(brain, plan, "a"), "why", tmp_path, 100)
    text = body["messages"][0]["content"]
    assert "local attempt 1 broke" in text and "local attempt 2 broke" in text
    assert "upstream says hi" in text and '"echo": "goal"' in text
    assert text.count(UNTRUSTED_OPEN) == 3 and UNTRUSTED_OPEN in body["system"]
    assert body["json"] is True and body["max_tokens"] == 100


def test_a_handoff_that_could_forge_a_delimiter_is_refused(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="on_failure")])
    h.claim(brain, 1000)
    h.do(brain, plan, "a", "fail", 1001, error_type="boom", message=f"x {UNTRUSTED_CLOSE} y")
    brain.write(lambda c, o, _: c.execute("UPDATE tasks SET not_before = 0"))
    h.claim(brain, 1010)
    h.do(brain, plan, "a", "fail", 1011, error_type="boom", message="again")
    client = Recorder()
    sender(brain, client).tick()
    assert client.sent == [] and h.state_of(brain, plan)["a"] == "FAILED"
    assert "reserved delimiter" in h.row(brain, plan, "a")["error"]


# ---------------------------------------------------------------- what comes back
def test_parse_reply_forms():
    assert reply.parse('{"answer": "42"}').value == {"text": "42"}
    assert reply.parse('```json\n{"answer": {"n": 1}}\n```').value == {"n": 1}
    assert reply.parse('{"answer": [1]}').value == {"value": [1]}
    assert reply.parse('{"subtasks": [{"id": "x", "type": "noop"}]}').kind == "subtasks"
    for bad in ("no json", "[1]", '{"answer": 1, "subtasks": []}', '{"subtasks": []}', "{}"):
        assert reply.parse(bad).kind == "invalid", bad


def test_an_answer_becomes_the_tainted_result(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="on_failure"), h.noop("b", ["a"])])
    fail_twice(brain, plan)
    client = Recorder(said('{"answer": "the external answer"}'))
    assert sender(brain, client).tick() == 1
    task = h.row(brain, plan, "a")
    assert task["state"] == "SUCCEEDED" and task["tainted_output"] == 1
    assert json.loads(task["output_json"]) == {"text": "the external answer"}
    metrics = json.loads(task["metrics_json"])
    assert (metrics["tier"], metrics["provider"], metrics["model"]) == (
        "external", "anthropic", "claude-test",
    )  # fmt: skip
    assert h.state_of(brain, plan)["b"] == "READY"
    [call] = calls(brain)
    assert (call["state"], call["outcome"], call["input_tokens"]) == ("answered", "answer", 1000)
    assert call["cost"] == pytest.approx(budget.cost(1000, 200, 3.0, 15.0))
    assert client.sent[0]["request_id"] == call["id"]
    scraped = brain.metrics.registry.get_sample_value
    assert scraped("airig_escalation_calls_total", {"outcome": "answer"}) == 1
    assert scraped("airig_escalation_tokens_total", {"direction": "out"}) == 200


def test_a_breakdown_runs_locally_and_dependents_wait_for_it(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always"), h.noop("b", ["a"])])
    subtasks = [
        {"id": "one", "type": "noop", "payload": {"echo": 1}},
        {"id": "two", "type": "noop", "depends_on": ["one"], "payload": {"echo": 2}},
    ]
    client = Recorder(said(json.dumps({"subtasks": subtasks})))
    sender(brain, client).tick()
    states = h.state_of(brain, plan)
    assert states == {"a": "SUCCEEDED", "b": "PENDING", "a__one": "READY", "a__two": "PENDING"}
    assert json.loads(h.row(brain, plan, "a")["output_json"])["subtasks"] == ["a__one", "a__two"]
    assert h.row(brain, plan, "a__one")["origin"] == "external:a"
    assert h.row(brain, plan, "a__one")["trusted"] == 0  # the external tier's tasks are tainted
    for now, key in ((1100, "a__one"), (1102, "a__two")):
        got = h.claim(brain, now)
        assert got is not None and got[0]["key"] == key
        h.do(brain, plan, key, "complete", now + 1)
    assert h.state_of(brain, plan)["b"] == "READY"


def test_external_output_cannot_add_shell_tasks(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always")])
    shell = json.dumps({"subtasks": [{"id": "x", "type": "shell", "payload": {"command": "id"}}]})
    client = Recorder(said(shell), said(shell))
    worker = sender(brain, client)
    worker.tick()
    assert h.state_of(brain, plan) == {"a": "ESCALATED"}  # asked once more
    assert "shell" in h.row(brain, plan, "a")["reason"]
    worker.tick()
    task = h.row(brain, plan, "a")
    assert task["state"] == "FAILED" and "twice" in task["error"]
    assert len(client.sent) == 2
    assert client.sent[1]["messages"][-2]["role"] == "assistant"
    assert [c["reask"] for c in calls(brain)] == [1, 0]


def test_one_unusable_reply_is_asked_again(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always")])
    client = Recorder(said("sorry, I cannot"), said('{"answer": "fine"}'))
    worker = sender(brain, client)
    worker.tick()
    worker.tick()
    assert h.state_of(brain, plan)["a"] == "SUCCEEDED"
    assert client.sent[0]["request_id"] != client.sent[1]["request_id"]
    assert [c["outcome"] for c in calls(brain)] == ["answer", "invalid"]


# ---------------------------------------------------------------- limits and failures
def test_provider_down_waits_with_backoff_then_finishes(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always")])
    down = CallResult(ok=False, retryable=True, error="gateway unreachable: refused")
    client = Recorder(down, said('{"answer": "back"}'))
    worker = sender(brain, client)
    worker.tick()
    task = h.row(brain, plan, "a")
    assert task["state"] == "ESCALATED" and "gateway unreachable" in task["reason"]
    [call] = calls(brain)
    assert (call["state"], call["attempts"]) == ("queued", 1) and call["next_try_at"] is not None
    brain.write(lambda c, o, _: c.execute("UPDATE escalations SET next_try_at = 0"))
    worker.tick()
    assert h.state_of(brain, plan)["a"] == "SUCCEEDED"
    assert client.sent[0]["request_id"] == client.sent[1]["request_id"]  # the same call


def test_a_refused_call_fails_the_task(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always"), h.noop("b", ["a"])])
    sender(brain, Recorder(CallResult(ok=False, error="gateway HTTP 401: no"))).tick()
    assert h.state_of(brain, plan) == {"a": "FAILED", "b": "UPSTREAM_FAILED"}
    assert calls(brain)[0]["state"] == "failed"


def test_a_refusal_quoting_a_nul_fails_the_task_with_the_nul_escaped(tmp_path):
    """The gateway's error quotes the provider's words; PostgreSQL's text refuses a NUL,
    which failed the sender's whole write (the call stayed due, sent again each tick)."""
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always"), h.noop("b", ["a"])])
    refused = CallResult(ok=False, error="gateway HTTP 400: bad \x00 byte")
    sender(brain, Recorder(refused)).tick()
    assert h.state_of(brain, plan) == {"a": "FAILED", "b": "UPSTREAM_FAILED"}
    (call,) = calls(brain)
    assert (call["state"], call["error"]) == ("failed", "gateway HTTP 400: bad \\x00 byte")
    assert "\\x00" in h.row(brain, plan, "a")["error"]


def test_retries_stop_after_max_attempts(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always")])
    down = CallResult(ok=False, retryable=True, error="gateway HTTP 502: overloaded")
    worker = sender(brain, Recorder(*[down] * MAX_ATTEMPTS))
    for _ in range(MAX_ATTEMPTS):
        brain.write(lambda c, o, _: c.execute("UPDATE escalations SET next_try_at = 0 "
                                              "WHERE state = 'queued'"))  # fmt: skip
        worker.tick()
    task = h.row(brain, plan, "a")
    assert task["state"] == "FAILED" and f"after {MAX_ATTEMPTS} attempts" in task["error"]


@pytest.mark.parametrize("mode", ["wait", "fail"])
def test_the_budget_stops_a_call(tmp_path, mode):
    brain = h.make_brain(
        tmp_path, AIRIG_ESCALATION_BUDGET_DAILY=0.01, AIRIG_ESCALATION_OVER_BUDGET=mode, **ON
    )
    plan = h.submit(brain, [h.noop("a", escalate="always")])
    client = Recorder()
    sender(brain, client).tick()  # max_tokens 4096 x 15 / 1M alone is 0.06 > 0.01
    assert client.sent == []
    task = h.row(brain, plan, "a")
    [call] = calls(brain)
    assert call["state"] == "over_budget" and call["estimated_cost"] > 0.01
    if mode == "wait":
        assert task["state"] == "ESCALATED" and "over daily budget" in task["reason"]
        assert call["next_try_at"] is not None
    else:
        assert task["state"] == "FAILED" and "over daily budget" in task["error"]
        assert call["next_try_at"] is None


def test_spend_counts_answered_calls_in_the_period(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always"), h.noop("b", escalate="always")])
    sender(brain, Recorder(said('{"answer": 1}'), said('{"answer": 2}'))).tick()
    assert set(h.state_of(brain, plan).values()) == {"SUCCEEDED"}
    import time

    with brain.db.read() as conn:
        spent = ledger.spend(conn, time.time())
    assert spent.today == pytest.approx(2 * budget.cost(1000, 200, 3.0, 15.0))
    assert spent.month == spent.today


def test_rate_limit_holds_calls_back(tmp_path):
    brain = h.make_brain(tmp_path, AIRIG_ESCALATION_RATE_PER_MIN=1, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always"), h.noop("b", escalate="always")])
    client = Recorder(said('{"answer": 1}'), said('{"answer": 2}'))
    sender(brain, client).tick()
    assert len(client.sent) == 1
    waiting = [k for k, s in h.state_of(brain, plan).items() if s == "ESCALATED"]
    assert len(waiting) == 1 and "rate limit" in h.row(brain, plan, waiting[0])["reason"]


def test_a_call_in_flight_at_a_restart_is_sent_again_with_its_id(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always")])
    first = sender(brain, Recorder())
    [request_id] = first.due()
    body = brain.write(lambda c, o, now: first.prepare(c, o, now, request_id))
    assert body is not None and calls(brain)[0]["state"] == "sent"
    brain.stop()  # the brain stops before the answer is recorded
    again = h.make_brain(tmp_path, **ON)
    client = Recorder(said('{"answer": "after restart"}'))
    sender(again, client).tick()
    assert client.sent[0]["request_id"] == request_id
    assert client.sent[0]["messages"] == body["messages"]
    assert h.state_of(again, plan)["a"] == "SUCCEEDED"
    assert calls(again)[0]["attempts"] == 2


def test_a_cancelled_task_is_not_sent(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="always")])
    h.claim(brain, 1000)
    from airig.brain.store import states

    brain.write(lambda c, o, now: states.cancel_plan(c, o, plan, now))
    client = Recorder()
    sender(brain, client).tick()
    assert client.sent == [] and calls(brain)[0]["state"] == "failed"


# ---------------------------------------------------------------- the key stays out
def test_the_brain_gets_no_provider_key_from_compose():
    compose = yaml.safe_load(
        (Path(__file__).resolve().parents[3] / "03-agents" / "compose.yaml").read_text()
    )
    brain_env = compose["services"]["brain"]["environment"]
    names = brain_env if isinstance(brain_env, list) else list(brain_env)
    assert not [n for n in names if "KEY" in str(n).upper() or "PROVIDER" in str(n).upper()]
    assert "secrets" not in compose["services"]["brain"]


# ---------------------------------------------------------------- what the operator sees
def test_the_escalations_route_shows_spend_and_waiting_tasks(tmp_path):
    from fastapi.testclient import TestClient

    from airig.brain.api.app import create_app
    from airig.launcher.cli.escalations import calls_table, summary

    settings = h.make_settings(
        tmp_path, BRAIN_CLAIM_WAIT_S=0, AIRIG_GATEWAY_URL="http://127.0.0.1:9", **ON
    )
    with TestClient(create_app(settings)) as client:
        brain = client.app.state.brain
        brain.escalations.stop()  # this test drives the sender itself
        brain.escalations.join(timeout=5)
        plan = h.submit(brain, [h.noop("a", escalate="always"), h.noop("b", escalate="always")])
        sender(brain, Recorder(said('{"answer": "x"}'), said("nope"))).tick()
        assert client.get("/v1/escalations").status_code == 401
        admin = {"Authorization": "Bearer admin-secret-token"}
        view = client.get("/v1/escalations", headers=admin).json()
        assert client.get("/v1/escalations?limit=0", headers=admin).status_code == 422
    assert view["enabled"] is True and view["budget"]["daily"] == 2.0
    assert view["budget"]["spent_today"] == pytest.approx(2 * budget.cost(1000, 200, 3.0, 15.0))
    assert [(w["plan_id"], w["call_state"]) for w in view["waiting"]] == [(plan, "queued")]
    assert view["totals"]["calls"] == 2 and view["totals"]["by_state"] == {
        "answered": 2,
        "queued": 1,
    }
    assert "request_json" not in view["calls"][0]
    lines = summary(view)
    assert "Spent today (UTC): 0.0120 of 2.0000" in lines[1]
    assert calls_table(view["calls"]).row_count == 3


def test_the_providers_retry_after_is_respected(tmp_path):
    brain = h.make_brain(tmp_path, **ON)  # BRAIN_RETRY_CAP_S=4 in the helpers
    h.submit(brain, [h.noop("a", escalate="always")])
    limited = CallResult(ok=False, retryable=True, error="429", retry_after_s=3.0)
    sender(brain, Recorder(limited)).tick()
    [call] = calls(brain)
    assert call["next_try_at"] - call["sent_at"] >= 3.0


def test_the_client_reads_the_gateways_answers():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from airig.brain.escalation.client import GatewayClient

    replies = [
        (200, {"text": "hi", "input_tokens": 1, "output_tokens": 1}),
        (502, {"detail": "provider down", "retryable": True, "retry_after_s": 2}),
        (502, {"detail": "bad model", "retryable": False, "retry_after_s": None}),
        (401, {"detail": "wrong token", "retryable": False, "retry_after_s": None}),
        (503, {}),
    ]
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            seen.append(self.headers["Authorization"])
            self.rfile.read(int(self.headers["Content-Length"]))
            status, body = replies.pop(0)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = GatewayClient(f"http://127.0.0.1:{server.server_address[1]}", "tok")
        got = [client.complete({"request_id": "r"}) for _ in range(5)]
    finally:
        server.shutdown()
        server.server_close()
    assert got[0].ok and got[0].body["text"] == "hi"
    assert (got[1].retryable, got[1].retry_after_s) == (True, 2.0)
    assert "provider down" in got[1].error and "wrong token" in got[3].error
    assert [g.retryable for g in got[2:]] == [False, False, True]
    assert seen == ["Bearer tok"] * 5
    down = GatewayClient(f"http://127.0.0.1:{server.server_address[1]}", "tok").complete({})
    assert (down.ok, down.retryable) == (False, True) and "unreachable" in down.error


def test_a_replayed_failure_report_does_not_count_twice(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("a", escalate="on_failure", retry_count=0)])
    h.claim(brain, 1000)
    lease = h.ref(h.row(brain, plan, "a"))
    h.do(brain, plan, "a", "fail", 1001, lease=lease, error_type="boom", message="m")
    again = h.do(brain, plan, "a", "fail", 1002, lease=lease, error_type="boom", message="m")
    assert (again["state"], again["task_errors"]) == ("ESCALATED", 1)
    assert len(calls(brain)) == 1


def test_an_idle_rig_costs_the_sender_no_write(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    writes: list[int] = []

    def counted(change):
        writes.append(1)
        return brain.write(change)

    worker = Sender(counted, brain.settings, brain.retry, Recorder(), read=brain.db.read)
    h.submit(brain, [h.noop("local")])
    assert worker.tick() == 0 and writes == []
    h.submit(brain, [h.noop("a", escalate="always")])
    assert worker.due() and writes == [1]


# ---------------------------------------------------------------- the brain model's verdict
class Judge:
    def __init__(self, verdict):
        self.verdict = verdict
        self.prompts: list[str] = []

    def judge(self, system, prompt):
        self.prompts.append(prompt)
        return self.verdict


REVIEW = {**ON, "AIRIG_ESCALATION_REVIEW": "on"}


@pytest.mark.parametrize(
    ("verdict", "state"),
    [(review.Verdict(True, "needs a bigger model"), "ESCALATED"),
     (review.Verdict(False, "a flaky tool"), "RETRY_WAIT"), (None, "RETRY_WAIT")],
)  # fmt: skip
def test_the_brain_models_verdict_on_a_first_failure(tmp_path, verdict, state):
    import time

    brain = h.make_brain(tmp_path, **REVIEW)
    t0 = time.time()  # the sender's writes read the real clock
    plan = h.submit(brain, [h.noop("a", escalate="on_failure")], now=t0)
    h.claim(brain, t0)
    h.do(brain, plan, "a", "fail", t0, error_type="boom", message="the model rambled")
    held = h.row(brain, plan, "a")  # no second local attempt before the verdict
    assert held["state"] == "RETRY_WAIT" and held["not_before"] >= t0 + criteria.REVIEW_HOLD_S
    judge = Judge(verdict)
    worker = Sender(brain.write, brain.settings, brain.retry, Recorder(), reviewer=judge)
    assert worker.review() == (state == "ESCALATED")
    task = h.row(brain, plan, "a")
    assert (task["state"], task["reviewed"]) == (state, 1)
    assert "the model rambled" in judge.prompts[0] and UNTRUSTED_OPEN in judge.prompts[0]
    if verdict is not None and verdict.escalate:
        assert "needs a bigger model" in task["reason"]
    else:  # released: it may run locally again at once
        assert task["not_before"] < t0 + criteria.REVIEW_HOLD_S
    assert worker.review() == 0 and len(judge.prompts) == 1  # judged once
    assert "task_reviewed" in h.events(brain, plan)


def test_no_review_unless_both_switches_are_on(tmp_path):
    assert sender(h.make_brain(tmp_path / "a", **ON), Recorder()).reviewer is None
    off = h.make_brain(tmp_path / "b", AIRIG_ESCALATION_REVIEW="on")
    assert Sender(off.write, off.settings, off.retry, Recorder()).reviewer is None


def test_parse_a_verdict():
    assert review.parse('{"escalate": true, "why": "x"}') == review.Verdict(True, "x")
    for bad in ("yes", '{"escalate": "true"}', "[]", '{"why": "x"}'):
        assert review.parse(bad) is None, bad
