"""Template amplification (issue 15, part 3): what templates add to one payload and what
one claim carries are bounded, counted before anything is built, and an oversized task
fails when its upstream finishes, not when a worker claims it.

The attack: a 48 KB plan, one 1 MB result, 32 tasks naming it 15 times each; one claim
used to build 480 MB. Memory under it is measured by ``benchmarks/templates.py``.
"""

from __future__ import annotations

import json
import tracemalloc

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from airig.brain.api.app import create_app
from airig.brain.api.fastpath import ExchangeFastPath
from airig.brain.store import results
from airig.common.protocol import TaskState as S

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

T0 = 1000.0
MB = 1_000_000
ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}


def hostile(readers: int = 32, repeats: int = 15) -> list[dict]:
    echo = " ".join(["{{ tasks.a.output }}"] * repeats)
    return [h.noop("a")] + [
        h.noop(f"r{i:02}", ["a"], payload={"echo": echo}) for i in range(readers)
    ]


# ------------------------------------------------------------------ counting
def test_the_size_is_counted_before_anything_is_built():
    output = {"text": "x" * MB}
    loaded = []
    uses = results.template_uses({"echo": "{{ tasks.a.output }}" * 15, "n": ["{{tasks.a.output}}"]})
    assert uses == {"a": {"": 16}}
    tracemalloc.start()
    try:
        with pytest.raises(results.RenderTooLarge) as caught:
            results.fill_texts(uses, lambda key: loaded.append(key) or output, 4 * MB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert loaded == ["a"] and peak < MB // 2  # the output's own text, nothing repeated
    message = str(caught.value)
    assert "renders to more than 4000000 bytes (BRAIN_MAX_RENDERED_BYTES)" in message
    assert "16 x {{ tasks.a.output }} of 1000000 bytes" in message
    assert "file on the shared data volume" in message


def test_fields_are_counted_one_by_one_and_the_render_matches_the_count():
    output = {"text": "héllo", "n": 3, "nested": {"list": [1, "two"]}}
    payload = {"a": ["{{ tasks.u.output }}/{{tasks.u.output.n}}", 1],
               "b": {"c": "{{ tasks.u.output.nested }} {{ tasks.u.output }}"}}  # fmt: skip
    uses = results.template_uses(payload)
    assert uses == {"u": {"": 2, ".n": 1, ".nested": 1}}
    texts, added = results.fill_texts(uses, lambda key: output, 1000)
    nested = json.dumps('{"list":[1,"two"]}')[1:-1]  # its quotes escaped on the wire
    assert added == 2 * len("héllo".encode()) + 1 + len(nested)
    rendered = results.substitute(payload, texts)
    assert rendered == {"a": ["héllo/3", 1], "b": {"c": '{"list":[1,"two"]} héllo'}}
    assert results.render(payload, lambda key: output) == rendered


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),  # fmt: skip
    max_leaves=20,
)


def test_texts_are_counted_as_they_go_on_the_wire():
    """A control character is six bytes in a JSON answer: counted so, without the copy."""
    control = "\x01" * 1000
    texts, added = results.fill_texts({"a": {"": 3}}, lambda key: {"text": control}, 6000 * 3)
    assert added == 6000 * 3
    with pytest.raises(results.RenderTooLarge, match="3 x .* of 6000 bytes"):
        results.fill_texts({"a": {"": 3}}, lambda key: {"text": control}, 6000 * 3 - 1)
    for text in ["", "plain", 'q"b\\s\n\t\x00\x1f\x7f', "héllo 😀 \u2028"]:
        wire = json.dumps({"p": text}, ensure_ascii=False).encode()
        assert results.wire_len(text) == len(wire) - len(b'{"p": ""}')


@settings(max_examples=200, deadline=None)
@given(output=st.dictionaries(st.sampled_from(["text", "f", "g"]), JSON, max_size=3))
def test_twice_the_stored_result_bounds_any_text_taken_from_it(output):
    """The release check's shortcut: 2 x stored bytes x references is an upper bound."""
    stored = len(results.canonical_json(output).encode())
    for path in ["", *(f".{key}" for key in output)]:
        text = results._as_text(results._lookup(output, path))
        assert results.wire_len(text) <= 2 * stored
        if isinstance(results._lookup(output, path), str):
            assert results.wire_len(text) <= stored


# ------------------------------------------------------------------ at release
def test_an_oversized_task_fails_when_its_upstream_finishes_not_at_claim(tmp_path):
    brain = h.make_brain(tmp_path)
    tasks = [*hostile(readers=3), h.noop("after", ["r00"])]
    plan = h.submit(brain, tasks)
    h.claim(brain, T0)
    h.do(brain, plan, "a", "complete", T0, output={"text": "x" * MB})  # stored as a file
    assert h.row(brain, plan, "a")["output_file"]
    for key in ("r00", "r01", "r02"):
        row = h.row(brain, plan, key)
        assert (row["state"], row["error_type"], row["reason"]) == (
            S.FAILED, "template_error", "payload template",
        )  # fmt: skip
        assert f"renders to more than {results.MAX_RENDERED_BYTES} bytes" in row["error"]
        assert "15 x {{ tasks.a.output }} of 1000000 bytes" in row["error"]
        assert row["attempt"] == 0  # never leased
    assert h.row(brain, plan, "after")["state"] == S.UPSTREAM_FAILED
    assert h.claim(brain, T0 + 1) is None


def test_a_small_field_of_a_large_result_is_released_and_rendered(tmp_path):
    """Stored size x references passes the limit, the texts themselves do not."""
    brain = h.make_brain(tmp_path, BRAIN_MAX_RENDERED_BYTES=100_000)
    reader = h.noop("b", ["a"], payload={"echo": "{{ tasks.a.output.n }}" * 50})
    plan = h.submit(brain, [h.noop("a"), reader])
    h.claim(brain, T0)
    h.do(brain, plan, "a", "complete", T0, output={"text": "x" * 200_000, "n": 7})
    assert h.row(brain, plan, "b")["state"] == S.READY
    task, payload = h.claim(brain, T0)
    assert (task["key"], payload) == ("b", {"echo": "7" * 50})


def test_the_limit_is_inclusive_and_configurable(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_MAX_RENDERED_BYTES=3000)
    tasks = [h.noop("a"), h.noop("fits", ["a"], payload={"echo": "{{ tasks.a.output }}" * 3}),
             h.noop("over", ["a"], payload={"echo": "{{ tasks.a.output }}" * 4})]  # fmt: skip
    plan = h.submit(brain, tasks)
    h.claim(brain, T0)
    h.do(brain, plan, "a", "complete", T0, output={"text": "y" * 1000})
    assert h.row(brain, plan, "fits")["state"] == S.READY
    over = h.row(brain, plan, "over")
    assert over["state"] == S.FAILED
    assert "more than 3000 bytes" in over["error"] and "4 x " in over["error"]


def test_a_missing_field_is_still_reported_by_the_claim(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_MAX_RENDERED_BYTES=10)
    reader = h.noop("b", ["a"], payload={"echo": "{{ tasks.a.output.nope }}" * 5})
    plan = h.submit(brain, [h.noop("a"), reader])
    h.claim(brain, T0)
    h.do(brain, plan, "a", "complete", T0, output={"text": "x" * 100})
    assert h.row(brain, plan, "b")["state"] == S.READY  # not a size problem
    assert h.claim(brain, T0) is None
    assert "nope" in h.row(brain, plan, "b")["error"]


# ------------------------------------------------------------------ one claim's bound
@pytest.fixture(params=["fastapi-route", "fast-path"])
def client(tmp_path, request):
    app = create_app(h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0,
                                     BRAIN_MAX_CLAIM_BYTES=250_000))  # fmt: skip
    served = ExchangeFastPath(app) if request.param == "fast-path" else app
    with TestClient(served) as made:
        yield made


def register(client, name):
    answer = client.post("/v1/workers/register", headers=BOOT,
                         json={"name": name, "classes": ["cpu"]})  # fmt: skip
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def submit(client, tasks):
    answer = client.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": tasks})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def exchange(client, worker, reports=(), **claim):
    """The reports, and a claim when asked for (``max_tasks=…``)."""
    body = {"reports": list(reports), "claim": {"wait_s": 0, **claim} if claim else None}
    answer = client.post("/v1/exchange", headers=worker, json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def finish_a(client, plan, text):
    worker = register(client, "upstream")
    [task] = exchange(client, worker, max_tasks=1)["assignments"]
    assert task["key"] == "a"
    report = {"action": "complete", "task_id": task["task_id"], "attempt": task["attempt"],
              "lease_id": task["lease_id"], "output": {"text": text}}  # fmt: skip
    assert exchange(client, worker, [report])["results"][0]["status"] == 200


def test_a_claim_stops_adding_tasks_at_its_bound(client):
    plan = submit(client, hostile(readers=8, repeats=1))
    finish_a(client, plan, "z" * 100_000)  # each reader renders to about 100 KB
    carried = []
    for n in range(5):
        got = exchange(client, register(client, f"w{n}"), max_tasks=8)["assignments"]
        assert all(len(t["payload"]["echo"]) == 100_000 for t in got)
        carried.append(len(got))
    assert carried == [2, 2, 2, 2, 0]  # a third would pass 250 000 bytes


def test_the_first_task_of_a_claim_always_goes(client):
    plan = submit(client, hostile(readers=2, repeats=3))
    finish_a(client, plan, "z" * 100_000)  # 300 KB each: over the claim bound alone
    for n in range(2):
        got = exchange(client, register(client, f"w{n}"), max_tasks=8)["assignments"]
        assert [len(t["payload"]["echo"]) for t in got] == [300_000 + 2 * len(" ")]


def test_a_normal_plan_is_unaffected(client):
    tasks = [{"id": "a", "type": "noop"}] + [
        {"id": f"r{i}", "type": "noop", "depends_on": ["a"],
         "payload": {"echo": "got {{ tasks.a.output }} and {{ tasks.a.output.n }}"}}
        for i in range(6)
    ]  # fmt: skip
    plan = submit(client, tasks)
    worker = register(client, "w1")
    [task] = exchange(client, worker, max_tasks=1)["assignments"]
    report = {"action": "complete", "task_id": task["task_id"], "attempt": task["attempt"],
              "lease_id": task["lease_id"], "output": {"text": "hi", "n": 2}}  # fmt: skip
    got = exchange(client, worker, [report], max_tasks=4)["assignments"]
    assert [t["payload"] for t in got] == [{"echo": "got hi and 2"}] * 4
    view = client.get(f"/v1/plans/{plan}", headers=ADMIN).json()
    assert sorted(t["state"] for t in view["tasks"]) == ["LEASED"] * 4 + ["READY"] * 2 + [
        "SUCCEEDED"
    ]
    assert json.dumps(got).count("{{") == 0
