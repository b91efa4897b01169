"""Routing advice (issue 40 §3): the history built through the brain's own write paths
(submit, claim, fail, escalate, the external tier's answer, a re-run on another model),
and each rule's counts and examples checked against what was stored."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest
from fastapi.testclient import TestClient

from airig.brain import leases
from airig.brain.api.app import create_app
from airig.brain.escalation.client import CallResult
from airig.brain.escalation.sender import Sender
from airig.brain.ops import routing
from airig.brain.plans.submit import insert_plan
from airig.brain.plans.validate import Limits, PlanInvalid, validate_plan
from airig.brain.scheduling.workers import WorkerView
from tests.unit import brain_helpers as h

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ON = {"AIRIG_ESCALATION": "on", "AIRIG_GATEWAY_TOKEN": "gateway-token-for-tests"}
SMALL, LARGE = "qwen2.5:7b", "qwen2.5:14b"
ADMIN = {"Authorization": "Bearer admin-secret-token"}
# The sender stamps the external tier's answers with the clock: the local history is laid
# out before it, on the same clock.
NOW = time.time()


@pytest.fixture(autouse=True)
def _now_is_this_tests_start():
    """Each test's history is laid out back from its own start: the module is imported at
    collection, and on a loaded CI host a test ran 20 minutes later, when `rules_of`'s
    window (read at time.time()) no longer reached the runs placed 1900 s before NOW."""
    global NOW
    NOW = time.time()


class Answers:
    """A gateway client that answers every call with one usable answer."""

    def complete(self, body: dict) -> CallResult:
        return CallResult(ok=True, body={
            "request_id": body["request_id"], "provider": "anthropic", "model": "claude-test",
            "text": '{"answer": "done outside"}', "input_tokens": 10, "output_tokens": 5,
            "stop_reason": "end_turn",
        })  # fmt: skip


def submit(brain, name: str, tasks: list[dict], now: float) -> str:
    plan, tainted = validate_plan({"name": name, "tasks": tasks}, Limits())
    return brain.write(
        lambda conn, outbox, _: insert_plan(
            conn, outbox, plan, tainted, now, submitted_by="test", digest="d",
            idempotency_key=None, default_timeout_s=60.0,
        )
    )  # fmt: skip


def llm(key: str, model: str, prompt: str = "say hi", **fields) -> dict:
    return {"id": key, "type": "llm", "model": model, "payload": {"prompt": prompt}, **fields}


def claim(brain, now: float, model: str):
    view = WorkerView(("llm",), frozenset({model}))
    return brain.write(
        lambda c, o, _: leases.claim(c, o, "w1", view, now, brain.settings, brain.scheduling)
    )


def work(
    brain, model: str, now: float, fail: frozenset[str] | set[str] = frozenset(),
    attempts: int = 99,
) -> float:  # fmt: skip
    """A worker of ``model`` runs what it can claim: the tasks keyed in ``fail`` fail their
    first ``attempts`` attempts (or until they leave the queue: escalated or failed), the
    others succeed. The time after its last report."""
    failed: dict[str, int] = {}
    while True:
        found = claim(brain, now, model)
        if not found:
            brain.write(lambda c, o, _: c.execute("UPDATE tasks SET not_before = 0"))
            found = claim(brain, now, model)
            if not found:
                return now
        task = found[0]
        if task["key"] in fail and failed.get(task["key"], 0) < attempts:
            failed[task["key"]] = failed.get(task["key"], 0) + 1
            h.do(brain, task["plan_id"], task["key"], "fail", now + 1, error_type="boom",
                 message="too hard")  # fmt: skip
        else:
            h.do(brain, task["plan_id"], task["key"], "complete", now + 1)
        now += 2


def answer_outside(brain) -> None:
    Sender(brain.write, brain.settings, brain.retry, Answers()).tick()  # type: ignore[arg-type]


def rules_of(brain, since_s: float = 30 * 86400, min_evidence: int = 3):
    with brain.db.read() as conn:
        return routing.advice(conn, time.time(), since_s, min_evidence)


def history(brain) -> dict:
    """Plan "summaries": four long-prompt tasks fail twice on 7b, escalate and are answered
    outside; one short task succeeds on 7b. Plan "extract", run twice: three tasks fail on
    7b (no retries), then succeed on 14b. Plan "lonely": one anecdote of each kind."""
    long_prompt = "word " * 1200  # ~1500 tokens: the 1k-4k bucket
    keys = ["s1", "s2", "s3", "s4"]
    tasks = [llm(k, SMALL, long_prompt, escalate="on_failure") for k in keys]
    summaries = submit(brain, "summaries", [*tasks, llm("short", SMALL)], NOW - 5000)
    work(brain, SMALL, NOW - 4900, fail=set(keys))
    assert {h.row(brain, summaries, k)["state"] for k in keys} == {"ESCALATED"}
    answer_outside(brain)
    assert {h.row(brain, summaries, k)["state"] for k in keys} == {"SUCCEEDED"}

    extract_keys = ["e1", "e2", "e3"]
    first = submit(
        brain, "extract", [llm(k, SMALL, retry_count=0) for k in extract_keys], NOW - 3000
    )
    work(brain, SMALL, NOW - 2900, fail=set(extract_keys))
    assert {h.row(brain, first, k)["state"] for k in extract_keys} == {"FAILED"}
    submit(brain, "extract", [llm(k, LARGE) for k in extract_keys], NOW - 2000)
    work(brain, LARGE, NOW - 1900)

    lonely = submit(brain, "lonely", [llm("x", SMALL, retry_count=0)], NOW - 1000)
    work(brain, SMALL, NOW - 990, fail={"x"})
    submit(brain, "lonely", [llm("x", LARGE)], NOW - 900)
    work(brain, LARGE, NOW - 890)
    return {"summaries": [f"{summaries}/{k}" for k in keys],
            "extract": [f"{first}/{k}" for k in extract_keys], "lonely": f"{lonely}/x"}  # fmt: skip


def by_use(rules: list[dict]) -> dict[tuple, dict]:
    return {(r["plan"], r["use"]): r for r in rules}


def test_rules_match_the_stored_history(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    ids = history(brain)
    rules = by_use(rules_of(brain))
    # "extract" alone, and "extract" with "lonely": 4 tasks over two plans say more
    assert set(rules) == {("summaries", "external"), ("extract", LARGE), (None, LARGE)}, rules
    outside = rules[("summaries", "external")]
    assert outside["type"] == "llm" and outside["from_model"] == SMALL
    assert (outside["prompt_tokens_over"], outside["prompt_tokens_under"]) == (1000, 4000)
    assert outside["evidence"]["tasks"] == 4
    assert outside["evidence"]["failed_then_succeeded"] == 4
    assert outside["evidence"]["escalated_then_succeeded"] == 4
    assert sorted(outside["evidence"]["examples"]) == sorted(ids["summaries"])
    assert outside["rule"] == (
        'llm tasks of plan "summaries" with prompts of 1000-4000 tokens: use the external '
        'tier instead of "qwen2.5:7b" (4 tasks failed or escalated on "qwen2.5:7b" and then '
        "succeeded on the external tier)"
    )
    larger = rules[("extract", LARGE)]
    assert larger["from_model"] == SMALL and larger["prompt_tokens_over"] is None
    assert larger["prompt_tokens_under"] == 1000
    assert larger["evidence"] == {
        "tasks": 3, "failed_then_succeeded": 3, "escalated_then_succeeded": 0,
        "examples": ids["extract"][::-1],  # the newest success first
    }  # fmt: skip
    spanning = rules[(None, LARGE)]
    assert spanning["evidence"]["tasks"] == 4 and spanning["rule"].startswith(
        "llm tasks with prompts under 1000 tokens: use"
    )
    assert set(spanning["evidence"]["examples"]) == {*ids["extract"], ids["lonely"]}
    assert (None, "external") not in rules  # one plan's evidence: said once, by that plan
    # raising the bar: the spanning rule (4 tasks) stands alone, the rest fall
    assert {(r["plan"], r["use"]) for r in rules_of(brain, min_evidence=4)} == {
        ("summaries", "external"), (None, LARGE),
    }  # fmt: skip
    assert rules_of(brain, min_evidence=5) == []
    # lowering it: the lonely anecdote becomes a rule of its plan
    assert ("lonely", LARGE) in by_use(rules_of(brain, min_evidence=1))


def test_the_window_leaves_older_successes_out(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    history(brain)
    # the external tier answered just now; the 14b runs succeeded 1900 s before NOW
    recent = rules_of(brain, since_s=1000)
    assert [(r["plan"], r["use"]) for r in recent] == [("summaries", "external")]
    assert {(r["plan"], r["use"]) for r in rules_of(brain, since_s=2500)} == {
        ("summaries", "external"), ("extract", LARGE), (None, LARGE),
    }  # fmt: skip


def test_an_empty_history_has_no_rules(tmp_path):
    brain = h.make_brain(tmp_path)
    assert rules_of(brain) == []
    with TestClient(create_app(brain.settings)) as client:
        got = client.get("/v1/report/routing", headers=ADMIN)
    assert got.status_code == 200
    assert got.json() == {"since": "30d", "min_evidence": 3, "rules": []}


def test_the_route_serves_the_rules_to_an_admin_only(tmp_path):
    settings = h.make_settings(tmp_path, **ON)
    with TestClient(create_app(settings)) as client:
        brain = client.app.state.brain
        history(brain)
        # the route reads "now" from the clock: the history lies a month ago or so
        got = client.get("/v1/report/routing?since=3650d&min_evidence=3", headers=ADMIN)
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["since"] == "3650d" and body["rules"] == rules_of(brain)
        assert client.get("/v1/report/routing").status_code == 401


@pytest.mark.parametrize(
    "query",
    [
        "min_evidence=-1",
        "min_evidence=0",
        "min_evidence=1000001",
        "min_evidence=" + "9" * 400,
        "since=abc",
        "since=-5d",
        "since=1.5d",
        "since=30d%00",
        "since=0d",  # no window: the kit's one grammar (airig/common/durations.py)
        "since=%EF%BC%97d",  # a full-width 7
        "since=7D",
        "since=%207d",
        "since=" + "9" * 400 + "d",
    ],
)
def test_bad_parameters_are_422s_naming_the_parameter_in_one_line_each(tmp_path, query):
    """The bounds are the OpenAPI document's (the fuzz test holds the route to it), so the
    refusal is FastAPI's: one error per bad parameter, each on one line."""
    with TestClient(create_app(h.make_settings(tmp_path))) as client:
        got = client.get(f"/v1/report/routing?{query}", headers=ADMIN)
    assert got.status_code == 422
    [error] = got.json()["detail"]
    assert error["loc"] == ["query", query.split("=", 1)[0]], error
    assert "\n" not in error["msg"], error


def test_a_window_past_ten_years_reads_ten_years_and_says_so(tmp_path):
    with TestClient(create_app(h.make_settings(tmp_path))) as client:
        got = client.get("/v1/report/routing?since=99999999d", headers=ADMIN)
    assert got.status_code == 200, got.text
    assert got.json()["since"] == "3650d"


def test_a_min_evidence_that_is_not_a_number_is_a_422(tmp_path):
    with TestClient(create_app(h.make_settings(tmp_path))) as client:
        got = client.get("/v1/report/routing?min_evidence=lots", headers=ADMIN)
    assert got.status_code == 422


def test_hostile_names_are_returned_as_data_and_quoted_in_the_sentence(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    name = 'x</script><img src=x onerror=alert(1)>\n"quoted"\u2028end'
    small, large = "tiny<b>\nmodel:7b", 'big"</script>:14b'  # names a plan may give
    keys = ["a", "b", "c"]
    submit(brain, name, [llm(k, small, retry_count=0) for k in keys], NOW - 300)
    work(brain, small, NOW - 290, fail=set(keys))
    submit(brain, name, [llm(k, large) for k in keys], NOW - 200)
    work(brain, large, NOW - 190)
    [rule] = rules_of(brain)
    assert (rule["plan"], rule["from_model"], rule["use"]) == (name, small, large)  # as stored
    assert len(rule["rule"].splitlines()) == 1 and "\\u2028" in rule["rule"]
    for text in (small, large):
        assert json.dumps(text) in rule["rule"]
    assert '"x</script><img src=x onerror=alert(1)>\\n\\"quoted\\"\\u2028end"' in rule["rule"]
    with TestClient(create_app(brain.settings)) as client:
        body = client.get("/v1/report/routing", headers=ADMIN).json()
    assert body["rules"][0]["plan"] == name  # JSON strings: data, never markup
    with pytest.raises(PlanInvalid):  # a NUL never reaches the store: refused at submit
        submit(brain, "bad\x00name", [llm("a", SMALL)], NOW)


def test_a_sensitive_task_is_named_by_its_id_only(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    secret = "PATIENT-RECORD-4471"
    keys = ["p1", "p2", "p3"]
    tasks = [llm(k, SMALL, f"summarise {secret}", escalate="on_failure", sensitive=True,
                 allow_external=True) for k in keys]  # fmt: skip
    plan = submit(brain, "records", tasks, NOW - 500)
    work(brain, SMALL, NOW - 490, fail=set(keys))
    answer_outside(brain)
    [rule] = rules_of(brain)
    assert sorted(rule["evidence"]["examples"]) == [f"{plan}/{k}" for k in keys]
    assert secret not in json.dumps(rule) and "too hard" not in json.dumps(rule)


def test_escalate_always_is_no_evidence_against_the_local_model(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    keys = ["a", "b", "c"]
    plan = submit(brain, "always", [llm(k, SMALL, escalate="always") for k in keys], NOW - 100)
    claim(brain, NOW - 90, SMALL)  # the claim diverts them before any local attempt
    answer_outside(brain)
    assert {h.row(brain, plan, k)["state"] for k in keys} == {"SUCCEEDED"}
    assert rules_of(brain, min_evidence=1) == []


def test_a_retry_that_succeeds_on_the_same_model_is_no_evidence(tmp_path):
    brain = h.make_brain(tmp_path, **ON)
    keys = ["a", "b", "c"]
    plan = submit(brain, "flaky", [llm(k, SMALL) for k in keys], NOW - 100)
    work(brain, SMALL, NOW - 90, fail=set(keys), attempts=1)
    assert {h.row(brain, plan, k)["task_errors"] for k in keys} == {1}
    assert {h.row(brain, plan, k)["state"] for k in keys} == {"SUCCEEDED"}
    assert rules_of(brain, min_evidence=1) == []


def test_a_100k_event_history_is_grouped_in_the_database(tmp_path, capsys):
    """200 plan runs of 100 tasks (20k tasks, 100k events, 1k escalations), laid in the
    store in bulk: ten plan names run twenty times each, on 7b and 14b by turns. On 7b a
    tenth of the tasks fail and a tenth are answered outside; on 14b all succeed. The
    rules' counts are this layout's, and what the analysis holds in Python is its few
    rows, whatever the history's length: measured here, not asserted (a shared machine)."""
    brain = h.make_brain(tmp_path)
    base = time.time() - 10 * 86400
    plans, tasks, escalated, events = [], [], [], []
    task_id = 0
    for run in range(200):
        name, small = f"bulk-{run % 10}", (run // 10) % 2 == 0
        plan_id = f"plan{run:04d}"
        plans.append((plan_id, name, "h", "test", base + run * 100))
        for k in range(100):
            task_id += 1
            created = base + run * 100 + k * 0.01
            state, errors = "SUCCEEDED", 0
            if small and k % 10 == 0:
                state, errors = "FAILED", 2
            elif small and k % 10 == 1:
                errors = 2
                escalated.append((f"e{task_id}", task_id, plan_id, f"k{k}", created + 1))
            model = SMALL if small else LARGE
            payload = json.dumps({"prompt": f"item {k}", "model": model})
            row = (task_id, plan_id, f"k{k}", f"k{k}", "llm", "llm", payload, model, state)
            tasks.append((*row, errors, created, created + 1))
            events += [("task_submitted", plan_id, task_id, created + i) for i in range(5)]

    def lay(conn, outbox, _):
        conn.executemany(
            "INSERT INTO plans (id, name, body_hash, submitted_by, created_at) VALUES (?,?,?,?,?)",
            plans,
        )
        conn.executemany(
            "INSERT INTO tasks (id, plan_id, key, name, type, task_class, payload_json, model,"
            " priority, trusted, sensitive, timeout_s, retry_count, state, task_errors,"
            " created_at, finished_at) VALUES (?,?,?,?,?,?,?,?,5,1,0,60,3,?,?,?,?)",
            tasks,
        )
        conn.executemany(
            "INSERT INTO escalations (id, task_id, plan_id, task_key, why, state, created_at,"
            " answered_at, outcome) VALUES (?,?,?,?,'failed 2 times locally','answered',?,?,"
            "'answer')",
            [(*row, row[-1]) for row in escalated],
        )
        conn.executemany(
            "INSERT INTO events (event_type, plan_id, task_id, ts, body_json)"
            " VALUES (?,?,?,?,'{}')",
            events,
        )

    brain.write(lay)
    assert (len(tasks), len(events), len(escalated)) == (20_000, 100_000, 1_000)
    tracemalloc.start()
    started = time.perf_counter()
    rules = rules_of(brain)
    took = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    with capsys.disabled():
        engine = "postgresql" if brain.settings.database_url else "sqlite"
        print(f"\nrouting advice over 100k events ({engine}): {took * 1000:.0f} ms, "
              f"Python peak {peak / 1024:.0f} KiB, {len(rules)} rules")  # fmt: skip
    found = {(r["plan"], r["use"]): r["evidence"] for r in rules}
    assert len(found) == len(rules) == 22
    for j in range(10):
        outside, larger = found[(f"bulk-{j}", "external")], found[(f"bulk-{j}", LARGE)]
        assert (outside["tasks"], outside["failed_then_succeeded"]) == (100, 100)
        assert outside["escalated_then_succeeded"] == 100
        assert (larger["tasks"], larger["failed_then_succeeded"]) == (200, 200)
        assert larger["escalated_then_succeeded"] == 100
        assert len(outside["examples"]) == len(larger["examples"]) == 5
    assert found[(None, "external")]["tasks"] == 1000 and found[(None, LARGE)]["tasks"] == 2000
