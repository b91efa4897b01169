"""Memory a fan-out group can make the brain spend (issue 36 §1, parts two and three).

An ``items`` group and a ``from`` group were expanded, one dict of fields per item, before
their count was compared with the plan's task cap: a 1 MB plan of half a million numbers
made 150 MB to be refused, a source listing 4 million made 1.3 GB and 20 s inside one
completion. A group's output was built whole to measure it, for a reader's claim and for
``GET …/result``: 120 items of 1 MB, 430 MB. The benchmark is
``benchmarks/brain_memory.py``; these tests hold the causes, by memory (tracemalloc's peak)
or by counting what was built, never by time.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain import leases
from airig.brain.api.app import create_app
from airig.brain.escalation import handoff
from airig.brain.plans import fanout as expand
from airig.brain.plans.fanout import validate_with_fanout
from airig.brain.plans.submit import insert_plan
from airig.brain.plans.validate import Limits, PlanInvalid
from airig.brain.store import fanout, results
from airig.common.protocol import CompleteRequest

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
MB = 1_000_000


def traced_peak(call: Callable[[], Any]) -> int:
    """Bytes ``call`` allocated at its peak beyond what was held before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        call()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


class Built:
    """``item_values`` counted: every item whose fields were built. Past ``stop`` calls
    it raises, so code that builds first fails at once instead of building millions."""

    def __init__(self, stop: int) -> None:
        self.calls, self.stop, self.real = 0, stop, expand.item_values

    def __call__(self, entry: Any, index: int) -> dict[str, Any]:
        self.calls += 1
        if self.calls > self.stop:
            raise AssertionError(f"{self.calls} items built before the count was checked")
        return self.real(entry, index)


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Built:
    counter = Built(stop=1000)
    monkeypatch.setattr(expand, "item_values", counter)
    return counter


def items_plan(entries: list[Any], template: int = 1) -> dict[str, Any]:
    tasks = [{"id": f"t{n}", "type": "noop", "payload": {"echo": "{{ item }}"}}
             for n in range(template)]  # fmt: skip
    return {"name": "f", "tasks": [{"id": "g", "for_each": {"items": entries}, "tasks": tasks}]}


def refusal(data: dict[str, Any], plan_max: int = 200) -> str:
    with pytest.raises(PlanInvalid) as excinfo:
        validate_with_fanout(data, Limits(plan_max_tasks=plan_max), None)
    (error,) = excinfo.value.errors
    assert (error["task"], error["field"]) == ("g", "for_each.items")
    return str(error["message"])


# ---- items ---------------------------------------------------------------------------


def test_a_million_items_are_refused_by_their_count_before_any_is_built(built):
    data = items_plan([n % 10 for n in range(1_000_000)])
    message = refusal(data)
    assert message.startswith("1000000 items x 1 tasks = 1000000 tasks;")
    assert "limit of 200 (AIRIG_PLAN_MAX_TASKS)" in message
    assert built.calls == 0


def test_refusing_an_items_group_holds_nothing_per_item():
    data = items_plan([n % 10 for n in range(200_000)], template=3)
    peak = traced_peak(lambda: refusal(data))
    # It built each item's fields first: ~300 bytes an item, 60 MB here.
    assert peak < 256 * 1024, peak


@pytest.mark.parametrize(
    "entry",
    [
        {"deep": [[[[1]]]]},  # fields that are not scalars
        "x" * 10_000,  # long text
        "a\x00b",  # a NUL
        None,  # not an item at all
        "{{ tasks.secret.output }}",  # a template
    ],
    ids=["nested", "long", "nul", "null", "template"],
)
def test_hostile_entries_past_the_cap_are_refused_by_the_count_alone(built, entry):
    # the count speaks first, whatever each entry holds: none of them is looked at
    message = refusal(items_plan([entry] * 300_000, template=2))
    assert message.startswith("300000 items x 2 tasks = 600000 tasks;")
    assert built.calls == 0


def test_the_cap_counts_the_plans_own_tasks_at_its_edge(built):
    # the group's own row counts: 199 items of one task fill a plan capped at 200
    plan, _ = validate_with_fanout(items_plan(list(range(199))), Limits(plan_max_tasks=200), None)
    assert len(plan.tasks) == 200 and built.calls == 199
    built.calls = 0
    assert refusal(items_plan(list(range(200)))).startswith("200 items x 1 tasks = 200 tasks;")
    assert built.calls == 0


def test_a_second_group_past_the_cap_is_named_with_its_own_count(built):
    small = {"id": "a", "for_each": {"items": [1, 2]},
             "tasks": [{"id": "t", "type": "noop"}]}  # fmt: skip
    data = items_plan(list(range(5000)))
    data["tasks"].insert(0, small)
    assert refusal(data).startswith("5000 items x 1 tasks = 5000 tasks;")
    assert built.calls == 2  # the first group's two items only


# ---- from ----------------------------------------------------------------------------


def submit(brain, tasks, now=1000.0):
    plan, tainted = validate_with_fanout({"name": "f", "tasks": tasks}, Limits(), None)
    return brain.write(
        lambda conn, outbox, _: insert_plan(
            conn, outbox, plan, tainted, now, submitted_by="test", digest="d",
            idempotency_key=None, default_timeout_s=60.0,
        )
    )  # fmt: skip


def run(brain, plan_id, key, now, output):
    got = h.claim(brain, now)
    assert got is not None and got[0]["key"] == key, got and got[0]["key"]
    h.do(brain, plan_id, key, "start", now)
    h.do(brain, plan_id, key, "complete", now, output=output)


def from_plan(after_other: bool = False) -> list[dict[str, Any]]:
    """``find`` lists the items; with ``after_other`` the group also waits for ``other``,
    which runs after ``find``: its completion, not the source's, releases the group."""
    return [
        {"id": "find", "type": "noop"},
        *([{"id": "other", "type": "noop", "depends_on": ["find"]}] if after_other else []),
        {"id": "g", "for_each": {"from": "{{ tasks.find.output.files }}"},
         "depends_on": ["other"] if after_other else [],
         "tasks": [{"id": "a", "type": "noop", "payload": {"echo": "{{ item }}"}},
                   {"id": "b", "type": "noop", "depends_on": ["a"]}]},
        {"id": "report", "type": "noop", "depends_on": ["g"]},
    ]  # fmt: skip


def test_a_from_path_to_4m_items_fails_the_group_by_its_count(tmp_path, built):
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, from_plan())
    files = [n % 10 for n in range(4_000_000)]
    run(brain, plan_id, "find", 1001, {"files": files})
    states = h.state_of(brain, plan_id)
    assert states["find"] == "SUCCEEDED"  # the completion itself stands
    assert states["g"] == "FAILED" and states["report"] == "UPSTREAM_FAILED"
    error = h.row(brain, plan_id, "g")["error"]
    assert error.startswith(
        "group g: {{ tasks.find.output.files }} holds 4000000 items x 2 tasks = 8000000 tasks;"
    ), error
    assert f"the limit is {brain.settings.plan_max_tasks} (AIRIG_PLAN_MAX_TASKS)" in error
    assert built.calls == 0
    assert not any(key.startswith("g__") for key in states)


def test_expanding_from_a_completion_holds_no_second_copy_of_its_list(tmp_path, monkeypatch):
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, from_plan())
    h.claim(brain, 1001)
    h.do(brain, plan_id, "find", "start", 1001)
    task = h.row(brain, plan_id, "find")
    files = [n % 10 for n in range(100_000)]  # 300 KB of JSON, an 800 KB list
    body = CompleteRequest(**h.ref(task).model_dump(), output={"files": files})
    loaded: list[str] = []
    real_load = fanout.load_output
    monkeypatch.setattr(fanout, "load_output",
                        lambda conn, rd, row, *a: loaded.append(row["key"]) or real_load(
                            conn, rd, row, *a))  # fmt: skip

    def complete() -> None:
        brain.write(lambda conn, outbox, _: leases.complete(
            conn, outbox, h.leases.states.get_task(conn, task["id"]), "w1", body, 1002,
            brain.settings))  # fmt: skip

    peak = traced_peak(complete)
    assert h.state_of(brain, plan_id)["g"] == "FAILED"
    assert loaded == []  # the list came from the completion, not read back from its file
    # What a completion costs is mostly ``json.dumps`` making the stored JSON (a few MB
    # of pieces for a list of 100 000 numbers, whatever the code around it); the items'
    # fields (30 MB) built before they were counted are gone.
    assert peak < 10 * MB, peak


def test_a_source_completing_before_the_group_is_released_is_read_from_the_store(tmp_path, built):
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, from_plan(after_other=True))
    run(brain, plan_id, "find", 1000, {"files": ["in/a.txt", "in/b.txt"]})
    assert "g__0__a" not in h.state_of(brain, plan_id)
    # ``other`` releases the group: its own output is not the source's list
    run(brain, plan_id, "other", 1001, {"files": ["wrong.txt"] * 3})
    states = h.state_of(brain, plan_id)
    assert sorted(k for k in states if k.startswith("g__")) == [
        "g__0__a", "g__0__b", "g__1__a", "g__1__b"
    ]  # fmt: skip
    assert json.loads(h.row(brain, plan_id, "g__1__a")["payload_json"])["echo"] == "in/b.txt"
    assert built.calls == 2
    # and from the store too, a list past the cap is refused by its count
    brain = h.make_brain(tmp_path / "second")
    plan_id = submit(brain, from_plan(after_other=True))
    run(brain, plan_id, "find", 1003, {"files": list(range(5000))})
    run(brain, plan_id, "other", 1004, {"text": "x"})
    assert "holds 5000 items x 2 tasks = 10000 tasks" in h.row(brain, plan_id, "g")["error"]
    assert built.calls == 2


# ---- a group's output --------------------------------------------------------------------


def group_plan(count: int, reader: str = "{{ tasks.g.output }}") -> list[dict[str, Any]]:
    return [
        {"id": "g", "for_each": {"items": [f"ünï {n}" for n in range(count)]},
         "tasks": [{"id": "t", "type": "noop"}]},
        {"id": "report", "type": "noop", "depends_on": ["g"], "payload": {"echo": reader}},
    ]  # fmt: skip


def finish_items(brain, plan_id, outputs: list[dict[str, Any] | None], now=1001.0):
    """Each item's task completes with its output, or fails (None)."""
    for n, output in enumerate(outputs):
        key = f"g__{n}__t"
        got = h.claim(brain, now + n)
        assert got is not None and got[0]["key"] == key
        h.do(brain, plan_id, key, "start", now + n)
        if output is None:
            h.do(brain, plan_id, key, "fail", now + n, error_type="bad_input",
                 message='bröken "item"\n', retryable=False)  # fmt: skip
        else:
            h.do(brain, plan_id, key, "complete", now + n, output=output)


def group_row(brain, plan_id):
    return h.row(brain, plan_id, "g")


HOSTILE_OUTPUTS: list[dict[str, Any] | None] = [
    {"text": "x" * 3000},  # a file (past the inline bound below)
    {"text": "short"},  # inline
    None,  # a failed item: null
    {},  # an empty output
    {"text": '\x01"\\' * 700, "n": [1.5, -0.0, 10**18, 1e300], "ü": "☃"},  # escapes
    {"nested": {"b": [None, True], "a": {"output": None}}},  # its own "output" key
]


def test_a_groups_size_is_its_items_stored_sizes_added(tmp_path, monkeypatch):
    brain = h.make_brain(tmp_path, BRAIN_RESULT_INLINE_BYTES=1000)
    plan_id = submit(brain, group_plan(len(HOSTILE_OUTPUTS)))
    finish_items(brain, plan_id, HOSTILE_OUTPUTS)
    group = group_row(brain, plan_id)
    assert group["state"] == "SUCCEEDED"
    with brain.db.read() as conn:
        whole = results.canonical_json(fanout.group_output(conn, brain.settings.results_dir, group))
        assert whole.isascii()
        # nothing loaded: every stored output's reader refuses
        monkeypatch.setattr(fanout, "_stored_text", _refuse, raising=False)
        monkeypatch.setattr(results, "load_output", _refuse)
        assert fanout.group_output_bytes(conn, brain.settings.results_dir, group) == len(whole)
        described = fanout.describe(conn, brain.settings.results_dir, group)
    monkeypatch.undo()
    items = json.loads(whole)["items"]
    assert described.items_bytes == len(results.canonical_json(items))
    assert [i["output"] for i in items] == HOSTILE_OUTPUTS
    assert [i["state"] for i in items] == ["succeeded"] * 2 + ["failed"] + ["succeeded"] * 3


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("an output was loaded to measure the group")


def test_a_reader_whose_group_sums_over_the_cap_fails_at_its_claim_unbuilt(tmp_path):
    limit = 2 * MB
    brain = h.make_brain(tmp_path, BRAIN_MAX_RENDERED_BYTES=limit)
    plan_id = submit(brain, group_plan(12))
    finish_items(brain, plan_id, [{"text": "y" * 250_000}] * 12)  # 3 MB together
    assert h.state_of(brain, plan_id)["report"] == "READY"
    claimed: list[Any] = []
    peak = traced_peak(lambda: claimed.append(h.claim(brain, 1100)))
    assert claimed == [None]
    report = h.row(brain, plan_id, "report")
    assert report["state"] == "FAILED" and report["error_type"] == "template_error"
    size = json.loads(h.row(brain, plan_id, "report")["error"].split(" of ")[1].split()[0])
    assert report["error"].startswith(
        f"payload renders to more than {limit} bytes (BRAIN_MAX_RENDERED_BYTES): "
        f"{{{{ tasks.g.output }}}} of {size} bytes"
    ), report["error"]
    assert size > 12 * 250_000
    # It built the group's output (3 MB of objects and its 3 MB of JSON) to find that.
    assert peak < 512 * 1024, peak


def test_a_reader_of_a_groups_items_list_is_measured_the_same_way(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_MAX_RENDERED_BYTES=100_000)
    plan_id = submit(brain, group_plan(3, "{{ tasks.g.output.items }}"))
    finish_items(brain, plan_id, [{"text": "z" * 40_000}] * 3)
    assert h.claim(brain, 1100) is None
    assert "{{ tasks.g.output.items }} of " in h.row(brain, plan_id, "report")["error"]


@pytest.mark.parametrize("reader", ["{{ tasks.g.output }}", "{{ tasks.g.output.total }}"])
def test_a_reader_within_the_cap_still_gets_the_group_rendered(tmp_path, reader):
    brain = h.make_brain(tmp_path, BRAIN_RESULT_INLINE_BYTES=1000)
    plan_id = submit(brain, group_plan(len(HOSTILE_OUTPUTS), reader))
    finish_items(brain, plan_id, HOSTILE_OUTPUTS)
    got = h.claim(brain, 1100)
    assert got is not None and got[0]["key"] == "report"
    if reader.endswith("total }}"):
        assert got[1]["echo"] == str(len(HOSTILE_OUTPUTS))
    else:
        assert [i["output"] for i in json.loads(got[1]["echo"])["items"]] == HOSTILE_OUTPUTS


# ---- GET …/result --------------------------------------------------------------------------


def test_the_result_of_a_group_is_streamed_item_by_item(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_RESULT_INLINE_BYTES=1000)
    plan_id = submit(brain, group_plan(20))
    finish_items(brain, plan_id, [{"text": f"{n}" * 1_000_000} for n in range(20)])
    group = group_row(brain, plan_id)
    size = 0

    def read_all() -> None:
        nonlocal size
        for chunk in fanout.result_chunks(brain.db.read, brain.settings.results_dir, group):
            size += len(chunk)

    peak = traced_peak(read_all)
    assert size > 20 * MB
    # It built the 20 MB output, then its JSON: what is held now is one chunk of a file.
    assert peak < 3 * MB, peak


def test_the_result_route_answers_what_the_group_holds(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_RESULT_INLINE_BYTES=1000)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        brain = client.app.state.brain
        plan_id = submit(brain, group_plan(len(HOSTILE_OUTPUTS)))
        finish_items(brain, plan_id, HOSTILE_OUTPUTS)
        url = f"/v1/plans/{plan_id}/tasks/g/result"
        answer = client.get(url, headers=ADMIN)
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        with brain.db.read() as conn:
            output = fanout.group_output(conn, settings.results_dir, group_row(brain, plan_id))
        assert answer.json() == {"output": output, "files": []}
        assert [i["output"] for i in output["items"]] == HOSTILE_OUTPUTS
        # an ordinary task's output, inline and from its file, is its stored text
        for n in (0, 1):
            answer = client.get(f"/v1/plans/{plan_id}/tasks/g__{n}__t/result", headers=ADMIN)
            assert answer.json() == {"output": HOSTILE_OUTPUTS[n], "files": []}
        # an item's file gone after the answer's sizes were read: that output reads null
        chunks = fanout.result_chunks(brain.db.read, settings.results_dir,
                                      group_row(brain, plan_id))  # fmt: skip
        text = next(chunks)
        (settings.results_dir / h.row(brain, plan_id, "g__0__t")["output_file"]).unlink()
        text += b"".join(chunks)
        assert json.loads(text)["output"]["items"][0]["output"] is None
        # a task's own file gone: the error before any byte, not a cut answer
        missing = client.get(f"/v1/plans/{plan_id}/tasks/g__0__t/result", headers=ADMIN)
        assert missing.status_code == 500
        assert client.get(url, headers=ADMIN).status_code == 500  # the group measures it
        # not SUCCEEDED: 409 as before
        assert client.get(f"/v1/plans/{plan_id}/tasks/report/result",
                          headers=ADMIN).status_code == 409  # fmt: skip


def test_a_handoff_loads_only_the_outputs_its_clipped_text_shows(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, group_plan(30))
    finish_items(brain, plan_id, [{"text": "w" * 6000}] * 30)  # 180 KB together
    report = h.row(brain, plan_id, "report")
    with brain.db.read() as conn:
        (upstream,) = handoff.upstream(conn, report["id"], brain.settings.results_dir)
    shown = upstream["output"]
    loaded = [i for i in shown["items"] if i["output"] is not None]
    # past MAX_OUTPUT_CHARS (16 000) of outputs the rest stay on disk, counted
    assert len(loaded) == 3 and shown["outputs_omitted"] == 27
    assert (shown["total"], shown["succeeded"]) == (30, 30)
