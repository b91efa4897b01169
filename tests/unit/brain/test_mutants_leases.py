"""Leases and fencing as a worker and the brain see them: replayed, differing and late
reports, how long an attempt may run, what a finished attempt leaves behind.

Written against the mutants that survived ``benchmarks/mutation/run.sh``: each test pins a
behaviour some mutant of ``airig/brain/leases.py`` or ``states.py`` changed unnoticed.
"""

from __future__ import annotations

import json

import brain_helpers as h
import pytest

from airig.brain import leases
from airig.brain.leases import StaleLease
from airig.brain.scheduling import reaper
from airig.brain.store import payloads, states
from airig.common.protocol import CompleteRequest, FailRequest

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

T0 = 1000.0
WHISPER = "whisper-small.en"
QWEN = "qwen2.5:7b"


# ------------------------------------------------------------------ helpers
def complete(brain, plan, key, now, worker="w1", lease=None, **body):
    """The worker's completion report for the task's current attempt (or ``lease``)."""
    task = h.row(brain, plan, key)
    report = CompleteRequest(**(lease or h.ref(task)).model_dump(), **body)
    return brain.write(
        lambda conn, outbox, _: leases.complete(
            conn, outbox, states.get_task(conn, task["id"]), worker, report, now, brain.settings
        )
    )


def fail(brain, plan, key, now, worker="w1", lease=None, **body):
    """The worker's failure report for the task's current attempt (or ``lease``)."""
    task = h.row(brain, plan, key)
    report = FailRequest(**(lease or h.ref(task)).model_dump(), **body)
    return brain.write(
        lambda conn, outbox, _: leases.fail(
            conn,
            outbox,
            states.get_task(conn, task["id"]),
            worker,
            report,
            now,
            brain.retry,
            brain.settings,
        )  # fmt: skip
    )


def start(brain, plan, key, now, worker="w1", lease=None):
    """Start the attempt; (the row, the metrics the start recorded)."""
    task = h.row(brain, plan, key)

    def change(conn, outbox, _):
        current = states.get_task(conn, task["id"])
        started = leases.start(conn, outbox, current, worker, lease or h.ref(task), now,
                               brain.settings)  # fmt: skip
        return started, list(outbox.metrics)

    return brain.write(change)


def reap(brain, now) -> None:
    brain.write(lambda conn, outbox, _: reaper.reap(conn, outbox, now, brain.retry))


def bodies(brain, plan, kind) -> list[dict]:
    with brain.db.read() as conn:
        rows = conn.execute(
            "SELECT body_json FROM events WHERE plan_id = ? AND event_type = ? ORDER BY id",
            (plan, kind),
        )
        return [json.loads(row["body_json"]) for row in rows]


def samples(brain) -> list[dict]:
    path = brain.settings.training_file
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def brain(tmp_path):
    # A long lease: these tests are about the attempt deadline, not about heartbeats.
    made = h.make_brain(tmp_path, BRAIN_LEASE_S=1000, BRAIN_RUNTIME_GRACE_S=3)
    yield made
    made.stop()


# ------------------------------------------------------------------ replays of a failure
def test_a_replayed_retryable_failure_is_answered_again_and_charged_once(brain):
    plan = h.submit(brain, [h.noop("a", retry_count=3)])
    h.claim(brain, T0)
    first = fail(brain, plan, "a", T0, error_type="service_unavailable", message="down")
    again = fail(brain, plan, "a", T0 + 5, error_type="service_unavailable", message="down")
    assert (again["state"], again["attempt"], again["task_errors"]) == ("RETRY_WAIT", 1, 1)
    assert again["not_before"] == first["not_before"]
    assert again["reason"].startswith("task error 1, retry in ")  # the task's budget, not infra
    assert h.events(brain, plan).count("task_retry_scheduled") == 1


def test_a_replayed_final_failure_is_answered_again_and_recorded_once(brain):
    plan = h.submit(brain, [h.noop("a", retry_count=5), h.noop("b", ["a"])])
    h.claim(brain, T0)
    fail(brain, plan, "a", T0, error_type="bad_input", message="no", retryable=False)
    again = fail(brain, plan, "a", T0 + 5, error_type="bad_input", message="no", retryable=False)
    assert (again["state"], again["error"], again["task_errors"]) == ("FAILED", "no", 1)
    assert h.events(brain, plan).count("task_failed") == 1
    assert h.state_of(brain, plan) == {"a": "FAILED", "b": "UPSTREAM_FAILED"}


def test_a_failure_whose_words_hold_a_nul_is_stored_escaped_and_replays_as_itself(brain):
    """A worker's error is stored as text, where PostgreSQL refuses a NUL: the report (and
    each retry of it) failed whole, the task stuck in its lease. Escaped, it is recorded
    on either engine, and the same report again is still its replay."""
    plan = h.submit(brain, [h.noop("a", retry_count=5), h.noop("b", ["a"])])
    h.claim(brain, T0)
    words = {"error_type": "bad\x00input", "message": "no\x00pe\n", "retryable": False}
    failed = fail(brain, plan, "a", T0, **words)
    again = fail(brain, plan, "a", T0 + 5, **words)
    assert (again["state"], again["error"], again["error_type"]) == (
        "FAILED", "no\\x00pe\n", "bad\\x00input",
    )  # fmt: skip
    assert again["task_errors"] == failed["task_errors"] == 1
    assert h.events(brain, plan).count("task_failed") == 1


def test_a_release_reason_holding_a_nul_is_stored_escaped(brain):
    plan = h.submit(brain, [h.noop("a")])
    h.claim(brain, T0)
    task = h.row(brain, plan, "a")
    released = brain.write(lambda conn, outbox, _: leases.release(
        conn, outbox, states.get_task(conn, task["id"]), "w1", h.ref(task), "stop\x00now",
        T0 + 1,
    ))  # fmt: skip
    assert (released["state"], released["reason"]) == ("READY", "stop\\x00now")


@pytest.mark.parametrize(
    "different",
    [
        {"error_type": "service_unavailable", "message": "another message"},
        {"error_type": "timeout", "message": "down"},
    ],
)
def test_a_different_failure_after_the_attempt_ended_is_stale(brain, different):
    plan = h.submit(brain, [h.noop("a", retry_count=3)])
    h.claim(brain, T0)
    fail(brain, plan, "a", T0, error_type="service_unavailable", message="down")
    with pytest.raises(StaleLease):
        fail(brain, plan, "a", T0 + 1, **different)
    task = h.row(brain, plan, "a")
    assert (task["state"], task["task_errors"], task["error"]) == ("RETRY_WAIT", 1, "down")


def test_a_different_final_failure_after_the_attempt_ended_is_stale(brain):
    plan = h.submit(brain, [h.noop("a", retry_count=0)])
    h.claim(brain, T0)
    fail(brain, plan, "a", T0, error_type="boom", message="first")
    assert h.row(brain, plan, "a")["state"] == "FAILED"
    with pytest.raises(StaleLease):
        fail(brain, plan, "a", T0 + 1, error_type="boom", message="second")
    with pytest.raises(StaleLease):
        complete(brain, plan, "a", T0 + 1, output={"text": "late"})
    assert h.row(brain, plan, "a")["error"] == "first"


def test_a_completion_is_never_taken_for_the_replay_of_a_failure(brain):
    plan = h.submit(brain, [h.noop("a", retry_count=0)])
    h.claim(brain, T0)
    fail(brain, plan, "a", T0, error_type="boom", message="it broke")
    with pytest.raises(StaleLease):  # a report that never was sent is not a replay
        complete(brain, plan, "a", T0 + 1, output={"error_type": "boom", "m": "it broke"})


# ------------------------------------------------------------------ replays of a completion
def test_a_completion_replay_must_carry_the_same_files(brain):
    plan = h.submit(brain, [h.noop("a")])
    h.claim(brain, T0)
    done = complete(brain, plan, "a", T0, output={"text": "x"}, files=["out/a.png"])
    again = complete(brain, plan, "a", T0 + 5, output={"text": "x"}, files=["out/a.png"])
    assert (again["state"], again["finished_at"]) == ("SUCCEEDED", done["finished_at"])
    with pytest.raises(StaleLease):
        complete(brain, plan, "a", T0 + 5, output={"text": "x"}, files=["out/b.png"])
    with pytest.raises(StaleLease):
        complete(brain, plan, "a", T0 + 5, output={"text": "x"}, files=[])
    assert json.loads(h.row(brain, plan, "a")["files_json"]) == ["out/a.png"]
    assert h.events(brain, plan).count("task_completed") == 1


@pytest.mark.parametrize("other", [{"worker": "w2"}, {"attempt": 2}, {"lease_id": "not-the-lease"}])
def test_only_the_attempt_that_completed_may_replay_it(brain, other):
    plan = h.submit(brain, [h.noop("a")])
    task, _ = h.claim(brain, T0)
    complete(brain, plan, "a", T0, output={"text": "x"})
    worker = other.get("worker", "w1")
    lease = h.ref(task).model_copy(update={k: v for k, v in other.items() if k != "worker"})
    with pytest.raises(StaleLease):
        complete(brain, plan, "a", T0 + 1, worker=worker, lease=lease, output={"text": "x"})
    with pytest.raises(StaleLease):
        fail(brain, plan, "a", T0 + 1, worker=worker, lease=lease, error_type="boom")


def test_a_stale_write_names_the_task_the_attempt_and_the_live_state(brain):
    plan = h.submit(brain, [h.noop("a")])
    task, _ = h.claim(brain, T0)
    with pytest.raises(StaleLease) as caught:
        complete(brain, plan, "a", T0, worker="w2", output={})
    assert str(caught.value) == (
        f"task {task['id']} attempt 1 is not leased to w2 (state LEASED, attempt 1)"
    )


@pytest.mark.parametrize("action", ["start", "release", "renew"])
@pytest.mark.parametrize("other", [{"worker": "w2"}, {"attempt": 2}, {"lease_id": "not-the-lease"}])
def test_start_release_and_renew_are_fenced(brain, action, other):
    plan = h.submit(brain, [h.noop("a")])
    task, _ = h.claim(brain, T0)
    worker = other.get("worker", "w1")
    lease = h.ref(task).model_copy(update={k: v for k, v in other.items() if k != "worker"})
    with pytest.raises(StaleLease):
        if action == "renew":
            brain.write(
                lambda c, o, _: leases.renew(c, h.row(brain, plan, "a"), worker, lease, T0, 10)
            )
        else:
            h.do(brain, plan, "a", action, T0, worker=worker, lease=lease)
    after = h.row(brain, plan, "a")
    assert (after["state"], after["lease_expires_at"]) == ("LEASED", task["lease_expires_at"])


def test_an_ended_attempt_cannot_start_renew_or_release(brain):
    plan = h.submit(brain, [h.noop("a")])
    task, _ = h.claim(brain, T0)
    complete(brain, plan, "a", T0, output={})
    for action in ("start", "release"):
        with pytest.raises(StaleLease):
            h.do(brain, plan, "a", action, T0 + 1, lease=h.ref(task))
    with pytest.raises(StaleLease):
        brain.write(
            lambda c, o, _: leases.renew(c, h.row(brain, plan, "a"), "w1", h.ref(task), T0, 10)
        )
    assert h.row(brain, plan, "a")["state"] == "SUCCEEDED"


# ------------------------------------------------------------------ how long an attempt may run
def test_an_attempt_may_run_its_timeout_plus_the_grace(brain):
    plan = h.submit(brain, [h.noop("a", timeout_s=5, retry_count=0)])
    h.claim(brain, T0)
    reap(brain, T0 + 8)  # 5 s timeout + 3 s grace: exactly at the deadline is still fine
    assert h.row(brain, plan, "a")["state"] == "LEASED"
    reap(brain, T0 + 8.5)
    task = h.row(brain, plan, "a")
    assert (task["state"], task["error_type"]) == ("FAILED", "timeout")


def test_an_attempt_that_loads_a_model_first_gets_twice_the_timeout(brain):
    plan = h.submit(brain, [h.noop("a", model=WHISPER, timeout_s=5, retry_count=0)])
    h.claim(brain, T0)  # the worker holds no model: it must load whisper first
    assert bodies(brain, plan, "task_leased")[0]["load"] == WHISPER
    reap(brain, T0 + 13)  # 2 x 5 s + 3 s grace
    assert h.row(brain, plan, "a")["state"] == "LEASED"
    reap(brain, T0 + 13.5)
    assert h.row(brain, plan, "a")["error_type"] == "timeout"


def test_a_prefetched_attempt_counts_its_time_from_the_start(brain):
    plan = h.submit(brain, [h.noop("a", timeout_s=5, retry_count=0)])
    h.claim(brain, T0)
    started, metrics = start(brain, plan, "a", T0 + 20)
    assert started["state"] == "RUNNING" and started["started_at"] == T0 + 20
    assert ("schedule_to_start", 20.0, {}) in metrics  # READY at T0 (submit), started at +20
    reap(brain, T0 + 28)
    assert h.row(brain, plan, "a")["state"] == "RUNNING"
    reap(brain, T0 + 28.5)
    assert h.row(brain, plan, "a")["error_type"] == "timeout"


def test_a_start_right_after_a_swap_claim_keeps_the_swap_time(brain):
    plan = h.submit(brain, [h.noop("a", model=WHISPER, timeout_s=5, retry_count=0)])
    h.claim(brain, T0)
    start(brain, plan, "a", T0 + 1)  # would end at T0 + 9 counted from the start alone
    reap(brain, T0 + 13)
    assert h.row(brain, plan, "a")["state"] == "RUNNING"


def test_a_second_start_of_a_running_attempt_changes_nothing(brain):
    plan = h.submit(brain, [h.noop("a", timeout_s=5)])
    h.claim(brain, T0)
    first, _ = start(brain, plan, "a", T0 + 1)
    again, metrics = start(brain, plan, "a", T0 + 4)
    assert (again["started_at"], again["attempt_deadline"]) == (
        first["started_at"],
        first["attempt_deadline"],
    )
    assert metrics == [] and h.events(brain, plan).count("task_started") == 1


def test_a_renewed_lease_outlives_its_first_expiry(tmp_path):
    brain = h.make_brain(tmp_path)  # lease 10 s
    plan = h.submit(brain, [h.noop("a", timeout_s=600)])
    task, _ = h.claim(brain, T0)
    expires = brain.write(
        lambda c, o, _: leases.renew(c, h.row(brain, plan, "a"), "w1", h.ref(task), T0 + 8, 10)
    )
    assert expires == T0 + 18
    reap(brain, T0 + 15)
    assert h.row(brain, plan, "a")["state"] == "LEASED"
    reap(brain, T0 + 18.5)
    assert h.row(brain, plan, "a")["error_type"] == "lease_expired"


# ------------------------------------------------------------------ what an attempt leaves
def test_a_completion_records_output_files_metrics_and_its_duration(brain):
    plan = h.submit(brain, [h.noop("a", retry_count=2)])
    h.claim(brain, T0)
    fail(brain, plan, "a", T0, error_type="service_unavailable", message="down")
    h.claim(brain, T0 + 100, worker="w2")
    start(brain, plan, "a", T0 + 101, worker="w2")
    metrics = {"eval_count": 42, "wall_ms": 2500}
    done = complete(brain, plan, "a", T0 + 103.5, worker="w2", output={"text": "fine"},
                    files=["x.txt"], metrics=metrics)  # fmt: skip
    assert (done["state"], done["error"], done["error_type"], done["reason"]) == (
        "SUCCEEDED", None, None, None,
    )  # fmt: skip
    assert json.loads(done["output_json"]) == {"text": "fine"}
    assert json.loads(done["files_json"]) == ["x.txt"]
    assert json.loads(done["metrics_json"]) == metrics
    [event] = bodies(brain, plan, "task_completed")
    assert (event["duration_ms"], event["tokens_generated"], event["worker_id"]) == (
        2500, 42, "w2",
    )  # fmt: skip


def test_tokens_generated_wins_over_eval_count(brain):
    plan = h.submit(brain, [h.noop("a")])
    h.claim(brain, T0)
    complete(brain, plan, "a", T0, metrics={"tokens_generated": 7, "eval_count": 42})
    assert bodies(brain, plan, "task_completed")[0]["tokens_generated"] == 7


def test_a_completion_without_a_start_lasts_zero(brain):
    plan = h.submit(brain, [h.noop("a")])
    h.claim(brain, T0)
    complete(brain, plan, "a", T0 + 30, output={})
    assert bodies(brain, plan, "task_completed")[0]["duration_ms"] == 0


def test_a_big_output_is_stored_as_a_file(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_RESULT_INLINE_BYTES=64)
    echo = {"echo": "{{ tasks.a.output.text }}"}
    plan = h.submit(brain, [h.noop("a"), h.noop("b", ["a"], payload=echo)])
    h.claim(brain, T0)
    done = complete(brain, plan, "a", T0, output={"text": "y" * 200})
    assert done["output_json"] is None and done["output_file"]
    task, payload = h.claim(brain, T0 + 1)
    assert (task["key"], payload) == ("b", {"echo": "y" * 200})


def test_a_release_makes_the_task_ready_again_at_once(brain):
    plan = h.submit(brain, [h.noop("a")])
    h.claim(brain, T0)
    released = h.do(brain, plan, "a", "release", T0 + 7)
    assert (released["state"], released["ready_at"], released["reason"]) == (
        "READY", T0 + 7, "stop",
    )  # fmt: skip
    [event] = bodies(brain, plan, "task_released")
    assert (event["from"], event["to"], event["reason"]) == ("LEASED", "READY", "stop")
    task, _ = h.claim(brain, T0 + 7, worker="w2")
    assert (task["attempt"], task["worker_id"]) == (2, "w2")


# ------------------------------------------------------------------ templates
def test_templates_read_the_upstream_of_their_own_plan(brain):
    first = h.submit(brain, [h.noop("a")])
    h.claim(brain, T0)
    complete(brain, first, "a", T0, output={"text": "from the first plan"})
    second = h.submit(
        brain, [h.noop("a"), h.noop("b", ["a"], payload={"echo": "{{ tasks.a.output.text }}"})]
    )
    h.claim(brain, T0 + 1)
    complete(brain, second, "a", T0 + 1, output={"text": "from the second plan"})
    task, payload = h.claim(brain, T0 + 2)
    assert (task["plan_id"], payload) == (second, {"echo": "from the second plan"})


def test_a_claim_skips_every_broken_template_and_leases_the_next_task(brain):
    tasks = [h.noop("a")]
    tasks += [
        h.noop(f"t{i}", ["a"], priority=9, payload={"echo": "{{ tasks.a.output.nope }}"})
        for i in range(5)
    ]
    tasks.append(h.noop("ok", ["a"], priority=1))
    plan = h.submit(brain, tasks)
    h.claim(brain, T0)
    complete(brain, plan, "a", T0, output={"text": "x"})
    task, payload = h.claim(brain, T0 + 1)
    assert task["key"] == "ok"
    broken = [h.row(brain, plan, f"t{i}") for i in range(5)]
    assert {(t["state"], t["error_type"], t["reason"]) for t in broken} == {
        ("FAILED", "template_error", "payload template")
    }
    assert all("nope" in t["error"] for t in broken)


def test_a_claim_gives_up_after_twenty_broken_templates(brain):
    tasks = [h.noop("a")]
    tasks += [
        h.noop(f"t{i:02}", ["a"], priority=9, payload={"echo": "{{ tasks.a.output.nope }}"})
        for i in range(21)
    ]
    plan = h.submit(brain, tasks)
    h.claim(brain, T0)
    complete(brain, plan, "a", T0, output={"text": "x"})
    assert h.claim(brain, T0 + 1) is None
    states_now = h.state_of(brain, plan)
    assert sum(s == "FAILED" for s in states_now.values()) == 20  # one claim's worth
    assert h.claim(brain, T0 + 2) is None
    assert sum(s == "FAILED" for s in h.state_of(brain, plan).values()) == 21


def test_a_claim_carries_payloads_up_to_exactly_its_byte_budget():
    budget = payloads.ClaimBudget(100)
    budget.take(60)
    budget.take(40)  # fills what is left exactly: still carried
    with pytest.raises(payloads.OverClaimBudget):
        budget.take(1)
    payloads.ClaimBudget(10).take(500)  # a claim's first task goes, however large


def test_a_lease_carries_a_fresh_id_the_claim_worker_and_no_old_result(brain):
    plan = h.submit(brain, [h.noop("a", retry_count=2)])
    first, _ = h.claim(brain, T0)
    fail(brain, plan, "a", T0, error_type="service_unavailable", message="down")
    second, _ = h.claim(brain, T0 + 100, worker="w2")
    assert second["lease_id"] and second["lease_id"] != first["lease_id"]
    assert (second["worker_id"], second["attempt"], second["result_hash"]) == ("w2", 2, None)
    assert second["lease_expires_at"] == T0 + 100 + brain.settings.lease_s
    [_, event] = bodies(brain, plan, "task_leased")
    assert (event["placement"], event["load"], event["evict"]) == ("compatible", None, [])


# ------------------------------------------------------------------ training samples
def llm(task_id: str, deps=None, **fields):
    task = {"id": task_id, "type": "llm", "model": QWEN, "payload": {"prompt": "hi"}}
    return {**task, "depends_on": deps or [], **fields}


def test_a_finished_llm_task_becomes_a_training_sample(brain):
    messages = [{"role": "user", "content": "hello"}]
    plan = h.submit(brain, [llm("p"), llm("m", payload={"messages": messages})])
    for key in ("p", "m"):
        h.claim(brain, T0, classes=("llm",), models=(QWEN,))
        complete(brain, plan, key, T0 + 2, output={"text": f"answer {key}"},
                 metrics={"eval_count": 3})  # fmt: skip
    by_key = {s["task_id"]: s for s in samples(brain)}
    assert by_key["p"] == {
        "timestamp": T0 + 2, "plan": plan, "task_id": "p", "model": QWEN, "prompt": "hi",
        "response": "answer p", "error": None, "outcome": "succeeded",
        "metrics": {"eval_count": 3},
    }  # fmt: skip
    assert json.loads(by_key["m"]["prompt"]) == messages


def test_a_failed_llm_attempt_is_a_training_sample_too(brain):
    plan = h.submit(brain, [llm("p", retry_count=0), h.noop("n")])
    h.claim(brain, T0, classes=("llm",), models=(QWEN,))
    fail(brain, plan, "p", T0 + 1, error_type="boom", message="model crashed")
    h.claim(brain, T0 + 2)
    complete(brain, plan, "n", T0 + 3, output={"text": "not a sample"})
    [sample] = samples(brain)
    assert (sample["task_id"], sample["outcome"], sample["error"], sample["response"]) == (
        "p", "failed", "model crashed", None,
    )  # fmt: skip
    assert (sample["prompt"], sample["model"], sample["metrics"]) == ("hi", QWEN, {})


def test_a_sample_holds_the_prompt_the_model_saw_and_the_model_it_ran(brain):
    said = {"prompt": "summarise: {{ tasks.a.output.text }}"}
    tasks = [h.noop("a"), llm("ok", ["a"], model="qwen", payload=said)]
    tasks.append(llm("bad", ["a"], model="qwen", payload=said, retry_count=0))
    plan = h.submit(brain, tasks)
    h.claim(brain, T0)
    complete(brain, plan, "a", T0, output={"text": "the news"})
    for _ in range(2):
        h.claim(brain, T0 + 1, classes=("llm",), models=("qwen:latest",))
    complete(brain, plan, "ok", T0 + 2, output={"text": "short"})
    fail(brain, plan, "bad", T0 + 2, error_type="boom", message="crashed")
    by_key = {s["task_id"]: s for s in samples(brain)}
    for key in ("ok", "bad"):  # the placed name: Ollama's "qwen" is "qwen:latest"
        assert (by_key[key]["prompt"], by_key[key]["model"]) == (
            "summarise: the news",
            "qwen:latest",
        )


def test_a_sample_records_an_empty_prompt_as_given(brain):
    plan = h.submit(brain, [llm("p", payload={"prompt": ""})])
    h.claim(brain, T0, classes=("llm",), models=(QWEN,))
    complete(brain, plan, "p", T0, output={"text": "?"})
    [sample] = samples(brain)
    assert json.loads(sample["prompt"]) == ""


def test_a_sensitive_llm_task_leaves_no_text_in_its_sample(brain):
    plan = h.submit(brain, [llm("p", sensitive=True)])
    h.claim(brain, T0, classes=("llm",), models=(QWEN,))
    complete(brain, plan, "p", T0, output={"text": "secret answer"})
    [sample] = samples(brain)
    assert (sample["prompt"], sample["response"], sample["redacted"]) == (
        None, None, "sensitive",
    )  # fmt: skip


# ------------------------------------------------------------------ a worker that went away
def test_a_worker_that_registers_again_loses_its_live_attempts_only(brain):
    plan = h.submit(brain, [h.noop(k, retry_count=2) for k in ("a", "b", "c", "d")])
    h.claim(brain, T0, worker="w1")
    h.claim(brain, T0, worker="w1")
    h.do(brain, plan, "b", "start", T0)
    h.claim(brain, T0, worker="w2")
    h.claim(brain, T0, worker="w1")
    h.do(brain, plan, "d", "complete", T0)
    brain.write(lambda c, o, now: leases.drop_leases(c, o, brain.retry, "w1", T0 + 1, "stopped"))
    assert h.state_of(brain, plan) == {
        "a": "RETRY_WAIT", "b": "RETRY_WAIT", "c": "LEASED", "d": "SUCCEEDED",
    }  # fmt: skip
    for key, attempt in (("a", 1), ("b", 1)):
        task = h.row(brain, plan, key)
        assert (task["error_type"], task["infra_errors"], task["task_errors"]) == (
            "worker_restarted", 1, 0,
        )  # fmt: skip
        assert task["error"] == f"worker w1 stopped during attempt {attempt}"


def test_a_restart_is_the_default_reason_for_dropped_leases(brain):
    plan = h.submit(brain, [h.noop("a")])
    h.claim(brain, T0)
    brain.write(lambda c, o, now: leases.drop_leases(c, o, brain.retry, "w1", T0 + 1))
    assert h.row(brain, plan, "a")["error"] == "worker w1 registered again during attempt 1"


# ------------------------------------------------------------------ states: the fence's guard
@pytest.mark.parametrize("task_id", [0, -1, 2**63, 2**64])
def test_ids_outside_sqlite_integers_name_no_task(brain, task_id):
    h.submit(brain, [h.noop(f"t{i}") for i in range(130)])
    with brain.db.read() as conn:
        assert states.get_task(conn, task_id) is None
        assert states.get_task(conn, 1)["key"] == "t0"
        assert states.get_task(conn, 130)["key"] == "t129"
        assert states.get_task(conn, 2**63 - 1) is None  # in range, no such row


def test_a_finished_task_never_moves_again(brain):
    plan = h.submit(brain, [h.noop("a")])
    h.claim(brain, T0)
    complete(brain, plan, "a", T0, output={})
    for target in ("READY", "LEASED", "RUNNING", "FAILED", "SUCCEEDED", "CANCELLED"):
        with pytest.raises(states.InvalidTransition, match=r"task \d+: SUCCEEDED -> "):
            brain.write(
                lambda c, o, now, t=target: states.transition(
                    c, o, h.row(brain, plan, "a"), t, now, "x"
                )
            )
    assert h.row(brain, plan, "a")["state"] == "SUCCEEDED"


def test_a_transition_records_its_event_and_finishes_only_terminal_moves(brain):
    plan = h.submit(brain, [h.noop("a"), h.noop("b")])
    h.claim(brain, T0)
    started, _ = start(brain, plan, "a", T0 + 1)
    assert started["finished_at"] is None
    h.do(brain, plan, "a", "complete", T0 + 2)
    assert h.row(brain, plan, "a")["finished_at"] == T0 + 2
    [event] = bodies(brain, plan, "task_started")
    assert (event["from"], event["to"], event["worker_id"], event["reason"]) == (
        "LEASED", "RUNNING", "w1", None,
    )  # fmt: skip
    cancelled = brain.write(
        lambda c, o, _: states.transition(
            c, o, h.row(brain, plan, "b"), "CANCELLED", T0 + 3, "task_cancelled",
            {"note": 1}, reason="user", finished_at=T0 + 99,
        )
    )  # fmt: skip
    assert (cancelled["finished_at"], cancelled["reason"]) == (T0 + 99, "user")
    [event] = bodies(brain, plan, "task_cancelled")
    assert (event["reason"], event["note"], event["to"]) == ("user", 1, "CANCELLED")


def test_only_a_move_to_ready_wakes_waiting_claims(brain):
    plan = h.submit(brain, [h.noop("a"), h.noop("b", ["a"])])
    h.claim(brain, T0)

    def woke(change) -> bool:
        return brain.write(lambda c, o, now: (change(c, o, now), o.work_ready)[1])

    assert not woke(lambda c, o, now: leases.start(
        c, o, h.row(brain, plan, "a"), "w1", h.ref(h.row(brain, plan, "a")), now, brain.settings
    ))  # fmt: skip
    # The completion makes b READY.
    assert woke(lambda c, o, now: leases.complete(
        c, o, h.row(brain, plan, "a"), "w1",
        CompleteRequest(**h.ref(h.row(brain, plan, "a")).model_dump()), now, brain.settings,
    ))  # fmt: skip
