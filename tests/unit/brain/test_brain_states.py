"""The state machine on a real SQLite store: every transition, fencing, cascade."""

from __future__ import annotations

import brain_helpers as h
import pytest

from airig.brain.leases import StaleLease
from airig.brain.scheduling import reaper
from airig.brain.store import states
from airig.common.protocol import LeaseRef

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

T0 = 1000.0


def test_submit_makes_roots_ready_and_dependents_pending(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a"), h.noop("b", ["a"]), h.noop("c", ["b"])])
    assert h.state_of(brain, plan) == {"a": "READY", "b": "PENDING", "c": "PENDING"}


def test_happy_path_leases_runs_succeeds_and_releases_dependents(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a"), h.noop("b", ["a"]), h.noop("c", ["a"])])
    task, payload = h.claim(brain, T0)
    assert (task["key"], task["state"], task["attempt"], task["worker_id"]) == (
        "a",
        "LEASED",
        1,
        "w1",
    )
    assert task["lease_expires_at"] == T0 + brain.settings.lease_s
    assert h.do(brain, plan, "a", "start", T0 + 1)["state"] == "RUNNING"
    assert h.do(brain, plan, "a", "complete", T0 + 2)["state"] == "SUCCEEDED"
    assert h.state_of(brain, plan) == {"a": "SUCCEEDED", "b": "READY", "c": "READY"}
    kinds = h.events(brain, plan)
    assert kinds.count("task_completed") == 1 and kinds.count("task_leased") == 1


def test_dependent_waits_for_every_upstream(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a"), h.noop("b"), h.noop("c", ["a", "b"])])
    h.claim(brain, T0)
    h.do(brain, plan, "a", "complete", T0)
    assert h.state_of(brain, plan)["c"] == "PENDING"
    h.claim(brain, T0)
    h.do(brain, plan, "b", "complete", T0)
    assert h.state_of(brain, plan)["c"] == "READY"


@pytest.mark.parametrize(
    "lease_change",
    [
        {"attempt": 2},
        {"lease_id": "someone-elses-lease"},
        {"worker": "w2"},
    ],
)
def test_fencing_refuses_a_write_from_another_attempt_lease_or_worker(tmp_path, lease_change):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a")])
    task, _ = h.claim(brain, T0)
    change = dict(lease_change)  # the parameter is shared by every run of this test
    worker = change.pop("worker", "w1")
    lease = h.ref(task).model_copy(update=change)
    with pytest.raises(StaleLease):
        h.do(brain, plan, "a", "complete", T0, worker=worker, lease=lease)
    assert h.state_of(brain, plan)["a"] == "LEASED"


def test_replayed_completion_is_idempotent_and_a_different_one_is_stale(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a")])
    task, _ = h.claim(brain, T0)
    lease = h.ref(task)
    h.do(brain, plan, "a", "complete", T0, lease=lease, output={"text": "x"})
    again = h.do(brain, plan, "a", "complete", T0 + 5, lease=lease, output={"text": "x"})
    assert again["state"] == "SUCCEEDED"
    assert h.events(brain, plan).count("task_completed") == 1
    with pytest.raises(StaleLease):
        h.do(brain, plan, "a", "complete", T0, lease=lease, output={"text": "other"})


def test_old_attempt_cannot_complete_after_its_lease_expired(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a")])
    first, _ = h.claim(brain, T0)
    brain.write(lambda c, o, _: reaper.reap(c, o, T0 + 11, brain.retry))
    task = h.row(brain, plan, "a")
    assert (task["state"], task["infra_errors"], task["task_errors"]) == ("RETRY_WAIT", 1, 0)
    second, _ = h.claim(brain, T0 + 100, worker="w2")
    assert second["attempt"] == 2
    with pytest.raises(StaleLease):
        h.do(brain, plan, "a", "complete", T0 + 101, lease=h.ref(first))
    h.do(brain, plan, "a", "complete", T0 + 101, worker="w2")
    assert h.row(brain, plan, "a")["worker_id"] == "w2"


def test_retryable_error_waits_then_becomes_ready(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a", retry_count=2)])
    h.claim(brain, T0)
    after = h.do(brain, plan, "a", "fail", T0, error_type="service_unavailable", message="down")
    assert after["state"] == "RETRY_WAIT"
    assert T0 <= after["not_before"] <= T0 + brain.settings.retry_initial_s
    if after["not_before"] > T0:  # full jitter may pick 0
        assert h.claim(brain, T0) is None
    task, _ = h.claim(brain, T0 + 5)
    assert (task["key"], task["attempt"]) == ("a", 2)


def test_task_budget_exhausted_fails_and_cascades_transitively(tmp_path):
    brain = h.make_brain(tmp_path)
    tasks = [h.noop("a", retry_count=1, priority=9), h.noop("b", ["a"]), h.noop("c", ["b"])]
    tasks.append(h.noop("d", priority=1))
    plan = h.submit(brain, tasks)
    for attempt in range(2):
        h.claim(brain, T0 + attempt * 100)
        h.do(brain, plan, "a", "fail", T0 + attempt * 100, error_type="boom", message="it broke")
    assert h.state_of(brain, plan) == {
        "a": "FAILED", "b": "UPSTREAM_FAILED", "c": "UPSTREAM_FAILED", "d": "READY",
    }  # fmt: skip
    c = h.row(brain, plan, "c")
    assert c["reason"] == "upstream a FAILED" and c["error"] == "it broke"
    assert "retry budget (1) used up" in h.row(brain, plan, "a")["reason"]


def test_non_retryable_error_fails_at_once(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a", retry_count=5)])
    h.claim(brain, T0)
    h.do(brain, plan, "a", "fail", T0, error_type="oops", message="m", retryable=False)
    assert h.state_of(brain, plan)["a"] == "FAILED"


def test_listed_error_type_is_not_retried_even_if_the_worker_says_so(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a", retry_count=5)])
    h.claim(brain, T0)
    h.do(brain, plan, "a", "fail", T0, error_type="bad_input", message="m", retryable=True)
    assert h.state_of(brain, plan)["a"] == "FAILED"


def test_infrastructure_budget_is_separate_from_the_task_budget(tmp_path):
    brain = h.make_brain(tmp_path)  # infra budget 2
    plan = h.submit(brain, [h.noop("a", retry_count=0)])
    now = T0
    for _ in range(2):
        h.claim(brain, now)
        now += 20
        brain.write(lambda c, o, _, n=now: reaper.reap(c, o, n, brain.retry))
        assert h.state_of(brain, plan)["a"] == "RETRY_WAIT"
        now += 10
    h.claim(brain, now)
    brain.write(lambda c, o, _: reaper.reap(c, o, now + 20, brain.retry))
    task = h.row(brain, plan, "a")
    assert (task["state"], task["infra_errors"], task["task_errors"]) == ("FAILED", 3, 0)


def test_runtime_limit_is_a_task_error_even_while_heartbeating(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_RUNTIME_GRACE_S=0)
    plan = h.submit(brain, [h.noop("a", timeout_s=5, retry_count=0)])
    task, _ = h.claim(brain, T0)
    h.do(brain, plan, "a", "start", T0)
    brain.write(
        lambda c, o, _: h.leases.renew(c, h.row(brain, plan, "a"), "w1", h.ref(task), T0 + 4, 10)
    )
    brain.write(lambda c, o, _: reaper.reap(c, o, T0 + 6, brain.retry))
    failed = h.row(brain, plan, "a")
    assert (failed["state"], failed["error_type"], failed["task_errors"]) == (
        "FAILED",
        "timeout",
        1,
    )


def test_release_returns_the_task_without_charging_a_budget(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a")])
    h.claim(brain, T0)
    h.do(brain, plan, "a", "start", T0)
    released = h.do(brain, plan, "a", "release", T0 + 1)
    assert (released["state"], released["task_errors"], released["infra_errors"]) == ("READY", 0, 0)


def test_cancel_task_cancels_it_and_fails_its_dependents(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a"), h.noop("b", ["a"]), h.noop("x")])
    task, _ = h.claim(brain, T0)
    assert brain.write(
        lambda c, o, now: states.cancel_task(c, o, h.row(brain, plan, "a"), now, "user")
    )
    assert h.state_of(brain, plan) == {"a": "CANCELLED", "b": "UPSTREAM_FAILED", "x": "READY"}
    with pytest.raises(StaleLease):  # the worker's lease died with the cancel
        h.do(brain, plan, "a", "complete", T0, lease=h.ref(task))
    assert not brain.write(
        lambda c, o, now: states.cancel_task(c, o, h.row(brain, plan, "a"), now, "again")
    )


def test_cancel_plan_cancels_every_unfinished_task(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a"), h.noop("b", ["a"]), h.noop("c")])
    h.claim(brain, T0)
    h.do(brain, plan, "a", "complete", T0)
    count = brain.write(lambda c, o, now: states.cancel_plan(c, o, plan, now))
    assert count == 2
    assert h.state_of(brain, plan) == {"a": "SUCCEEDED", "b": "CANCELLED", "c": "CANCELLED"}


def test_restart_extends_live_leases_once(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a")])
    h.claim(brain, T0)
    with brain.db.tx() as conn:
        assert reaper.extend_live_leases(conn, T0 + 50, brain.settings.lease_s) == 1
    brain.write(lambda c, o, _: reaper.reap(c, o, T0 + 55, brain.retry))
    assert h.state_of(brain, plan)["a"] == "LEASED"
    assert h.row(brain, plan, "a")["lease_expires_at"] == T0 + 50 + brain.settings.lease_s


def test_transitions_outside_the_machine_are_refused(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a"), h.noop("b", ["a"])])
    with pytest.raises(states.InvalidTransition):
        brain.write(
            lambda c, o, now: states.transition(
                c, o, h.row(brain, plan, "b"), "SUCCEEDED", now, "x"
            )
        )
    assert h.state_of(brain, plan)["b"] == "PENDING"  # rolled back whole


def test_claim_templates_upstream_output_into_the_payload(tmp_path):
    brain = h.make_brain(tmp_path)
    tasks = [h.noop("a"), h.noop("b", ["a"], payload={"echo": "said: {{ tasks.a.output }}"})]
    plan = h.submit(brain, tasks)
    h.claim(brain, T0)
    h.do(brain, plan, "a", "complete", T0, output={"text": "hello"})
    task, payload = h.claim(brain, T0)
    assert task["key"] == "b" and payload == {"echo": "said: hello"}


def test_a_template_naming_a_missing_field_fails_the_task_at_claim(tmp_path):
    brain = h.make_brain(tmp_path)
    tasks = [h.noop("a"), h.noop("b", ["a"], payload={"echo": "{{ tasks.a.output.nope }}"})]
    plan = h.submit(brain, tasks)
    h.claim(brain, T0)
    h.do(brain, plan, "a", "complete", T0, output={"text": "hello"})
    assert h.claim(brain, T0) is None
    assert h.row(brain, plan, "b")["error_type"] == "template_error"


def test_stale_worker_cannot_renew_a_lease(tmp_path):
    brain = h.make_brain(tmp_path)
    plan = h.submit(brain, [h.noop("a")])
    task, _ = h.claim(brain, T0)
    bad = LeaseRef(attempt=task["attempt"], lease_id="x")
    with pytest.raises(StaleLease):
        brain.write(lambda c, o, _: h.leases.renew(c, h.row(brain, plan, "a"), "w1", bad, T0, 10))
