"""Nothing derived from a sensitive task reaches the external tier unless that flow was
allowed (issue 23 §1). The rule holds for what a handoff *sends* (the outputs of the tasks
the escalating one depends on), not for the escalating task's own flag: checked when a
plan is submitted, again when a task would be sent, and once more when the handoff is
built, so tasks that arrive later (a planner's, the external tier's) are held to it too."""

from __future__ import annotations

import json

import pytest

from airig.brain.escalation import criteria, handoff
from airig.brain.escalation.client import CallResult
from airig.brain.escalation.sender import Sender
from airig.brain.planner.grow import add_subtasks
from airig.brain.plans.validate import Limits, PlanInvalid, validate_plan
from tests.unit import brain_helpers as h

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ON = {"AIRIG_ESCALATION": "on", "AIRIG_GATEWAY_TOKEN": "gateway-token-for-tests"}
SECRET = "PASSWORD=hunter2-TOPSECRET"


class Recorder:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def complete(self, body: dict) -> CallResult:
        self.sent.append(body)
        return CallResult(ok=True, body={
            "request_id": "x", "provider": "anthropic", "model": "m", "text": '{"answer": "ok"}',
            "input_tokens": 10, "output_tokens": 2, "stop_reason": "end_turn",
        })  # fmt: skip


def refused(tasks: list[dict]) -> str:
    with pytest.raises(PlanInvalid) as caught:
        validate_plan({"tasks": tasks}, Limits())
    return " ".join(e["message"] for e in caught.value.errors)


def test_a_sensitive_producer_upstream_needs_allow_external_on_the_escalating_task():
    chain = [
        h.noop("secret", sensitive=True),
        h.noop("plain", ["secret"]),
        h.noop("send", ["plain"], escalate="always"),
    ]
    assert "sensitive task 'secret'" in refused(chain)
    chain[2]["allow_external"] = True
    validate_plan({"tasks": chain}, Limits())  # the flow was allowed, on the task that sends


def test_a_template_reader_of_a_sensitive_task_may_not_escalate_either():
    tasks = [
        h.noop("secret", sensitive=True),
        h.noop("send", ["secret"], escalate="on_failure",
               payload={"echo": "{{ tasks.secret.output }}"}),
    ]  # fmt: skip
    assert "allow_external" in refused(tasks)


def test_a_task_reading_one_item_of_a_sensitive_output_may_not_escalate():
    """The kit has no fan-out construct; its nearest, a template on one field (an item)
    of the producer's output, reads the producer's data: the same rule."""
    tasks = [
        h.noop("secret", sensitive=True),
        h.noop("each", ["secret"], escalate="always",
               payload={"echo": "{{ tasks.secret.output.items }}"}),
    ]  # fmt: skip
    assert "allow_external" in refused(tasks)


def grown_leak(tmp_path, deps=("secret",), **grown_fields):
    """A `plan` task adds a task that depends on a sensitive one (by default)."""
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("secret", sensitive=True), h.noop("planner")])
    h.claim(brain, 990)
    h.do(brain, plan, "secret", "complete", 991, output={"text": SECRET})
    proposal = [{"id": "leak", "type": "noop", "depends_on": list(deps), **grown_fields}]
    parent = h.row(brain, plan, "planner")
    brain.write(lambda conn, outbox, now: add_subtasks(
        conn, outbox, brain.settings, parent, proposal, "plan", now, False,
    ))  # fmt: skip
    return brain, plan


def test_a_planner_added_task_keeps_its_escalate_field(tmp_path):
    brain, plan = grown_leak(tmp_path, deps=(), escalate="on_failure")
    assert h.row(brain, plan, "planner__leak")["escalate"] == "on_failure"


def test_a_planner_added_task_upstream_of_a_secret_is_never_sent(tmp_path):
    with pytest.raises(PlanInvalid):  # refused when proposed: a stand-in carries 'sensitive'
        grown_leak(tmp_path, escalate="always")
    brain, plan = grown_leak(tmp_path / "later")
    # what the validator cannot see: an escalate flag that arrives another way
    brain.write(lambda c, o, _: c.execute(
        "UPDATE tasks SET escalate = 'always' WHERE key = 'planner__leak'"))  # fmt: skip
    with brain.db.read() as conn:
        task = h.row(brain, plan, "planner__leak")
        assert "sensitive tasks" in (criteria.blocked(conn, task, brain.settings) or "")
        with pytest.raises(handoff.HandoffRefused):
            handoff.build(conn, task, "why", tmp_path, 100)
    client = Recorder()
    h.claim(brain, 1000)  # the claim diverts what is due for the external tier
    Sender(brain.write, brain.settings, brain.retry, client).tick()  # type: ignore[arg-type]
    assert client.sent == []
    leak = h.row(brain, plan, "planner__leak")
    assert leak["state"] == "FAILED" and "sensitive" in leak["error"]


def test_a_grown_task_cannot_grant_itself_allow_external(tmp_path):
    brain, plan = grown_leak(tmp_path, allow_external=True)
    assert h.row(brain, plan, "planner__leak")["allow_external"] == 0


def test_the_provider_never_receives_the_secret_through_a_dependency(tmp_path):
    """The issue's reproduction, with the submission check bypassed (an older store)."""
    brain = h.make_brain(tmp_path, **ON)
    plan = h.submit(brain, [h.noop("secret", sensitive=True), h.noop("plain")])
    h.claim(brain, 990)
    h.do(brain, plan, "secret", "complete", 991, output={"text": SECRET})
    brain.write(lambda c, o, _: c.execute(
        """INSERT INTO deps (task_id, depends_on) SELECT p.id, s.id FROM tasks p, tasks s
           WHERE p.key = 'plain' AND s.key = 'secret'""",
    ))  # fmt: skip
    brain.write(
        lambda c, o, _: c.execute("UPDATE tasks SET escalate = 'always' WHERE key = 'plain'")
    )
    client = Recorder()
    h.claim(brain, 1000)
    Sender(brain.write, brain.settings, brain.retry, client).tick()  # type: ignore[arg-type]
    assert SECRET not in json.dumps(client.sent)
    assert h.row(brain, plan, "plain")["state"] == "FAILED"
