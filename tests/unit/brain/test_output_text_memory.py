"""A worker's output kept as the JSON text it came in (issue 36 §1, ``jsonsafe_text``).

A completion of four million small numbers (7.8 MB of JSON) was held as a list of four
million pointers (31 MB, 62 MB while the parser built it) and its canonical JSON was made
twice more (for the result's hash, for the file): the brain peaked 75 MB above idle. The
exchange now keeps a large flat part of an output (a long list of scalars, a long plain
text) as the body's bytes: checked by pieces, hashed and stored from them, built as
objects only for a consumer that reads them, and a ``from`` group counts it unbuilt.

What is accepted, refused, stored and hashed must be exactly what the whole parse gave:
these tests compare both paths, bodies crafted against the scanner included.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import brain_helpers as h
import pytest
from pydantic import ValidationError
from pydantic_core import from_json

from airig.brain import leases
from airig.brain.api.fastpath import read_request
from airig.brain.plans import fanout as expand
from airig.brain.plans.fanout import validate_with_fanout
from airig.brain.plans.submit import insert_plan
from airig.brain.plans.validate import Limits
from airig.brain.store import results
from airig.common.jsonsafe_text import LARGE, MAX_STRINGS, OutputText, defer_large
from airig.common.protocol import ExchangeRequest

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

MB = 1_000_000
HEAD = b'{"reports": [{"action": "complete", "task_id": 7, "attempt": 1, "lease_id": "x", '


def body_of(output: bytes, files: bytes = b"[]", tail: bytes = b"") -> bytes:
    return (
        HEAD + b'"files": ' + files + b', "output": ' + output + b"}" + tail + b'], "claim": null}'
    )


def whole(raw: bytes) -> ExchangeRequest:
    """What the exchange parsed before: the body whole, as objects."""
    return ExchangeRequest.model_validate(from_json(raw, allow_inf_nan=True))


def outcome(parse: Callable[[bytes], ExchangeRequest], raw: bytes) -> Any:
    """What a body comes to: each completion's hash, stored text and value, or the error."""
    try:
        request = parse(raw)
    except (ValueError, ValidationError) as exc:
        return type(exc).__name__, str(exc)
    found = []
    for report in request.reports:
        output = getattr(report, "output", None)
        if output is None:
            found.append(report.model_dump())
            continue
        found.append((
            results.result_hash(output, report.files),
            b"".join(results.output_pieces(output)),
            results.value_of(output),
        ))  # fmt: skip
    return found


def numbers(count: int, sep: bytes = b",") -> bytes:
    return b"[" + sep.join(b"%d" % (n % 10) for n in range(count)) + b"]"


BIG = LARGE * 2  # elements enough for a part past the threshold

SAME = {
    "digits": b'{"v": ' + numbers(BIG) + b"}",
    "spaced, signed, floats": b'{"v": ['
    + b", ".join(
        b"%s" % x
        for x in [
            b"-0",
            b"1.0",
            b"1e5",
            b"-2.50",
            b"1E-7",
            b"true",
            b"null",
            b"false",
            b"123456789012345678",
        ]
        * (LARGE // 4)
    )
    + b"]}",
    "whitespace inside": b'{"v": [ ' + b" ,\n ".join([b"3"] * BIG) + b" ] }",
    "two lists and a text": b'{"b": '
    + numbers(BIG)
    + b', "a": {"deep": '
    + numbers(BIG)
    + b'}, "t": "'
    + b"x y/z" * LARGE
    + b'"}',
    "a text with escapes is parsed as before": b'{"t": "' + b"\\u00e9\\n" * LARGE + b'"}',
    "non-ASCII text": b'{"t": "' + "é".encode() * LARGE + b'"}',
    "a duplicate key drops a deferred list": b'{"v": ' + numbers(BIG) + b', "v": 1}',
    "a duplicate key keeps the later list": b'{"v": 1, "v": ' + numbers(BIG) + b"}",
    "a marker-like text": b'{"t": "\\u0000airig-00000000000000000000000000000000-0", "v": '
    + numbers(BIG)
    + b"}",
    "lists of lists": b'{"v": [' + b",".join([numbers(BIG // 2)] * 3) + b"]}",
    "the key is the long text": b'{"' + b"k" * BIG + b'": 1}',
    "an empty long list": b'{"v": [' + b" " * BIG + b"]}",
    "many texts before a long list": b'{"s": ['
    + b'"a",' * MAX_STRINGS
    + b'"b"], "v": '
    + numbers(BIG)
    + b"}",
    "a few texts before a long list": b'{"s": ['
    + b'"a",' * 100
    + b'"b"], "v": '
    + numbers(BIG)
    + b"}",
}

REFUSED = {
    "NaN in a long list": b'{"v": [' + b"1," * BIG + b"NaN]}",
    "an integer past 64 bits": b'{"v": [' + b"1," * BIG + b"99999999999999999999]}",
    "two commas": b'{"v": [' + b"1," * BIG + b",2]}",
    "a comma at the end": b'{"v": [' + b"1," * BIG + b"]}",
    "a comma first": b'{"v": [,' + b"1," * BIG + b"2]}",
    "a word": b'{"v": [' + b"1," * BIG + b"nope]}",
    "a colon": b'{"v": [' + b"1," * BIG + b"1:2]}",
    "an unterminated text": b'{"v": "' + b"x" * BIG,
    "an unterminated list": b'{"v": [' + b"1," * BIG + b"1",
    "a leading zero": b'{"v": [' + b"1," * BIG + b"01]}",
    "not an object": numbers(BIG),
}


# Parsed whole, as before: nothing large and plain, or a part no output holds once.
WHOLE = {
    "a text with escapes is parsed as before", "non-ASCII text",
    "a duplicate key drops a deferred list", "the key is the long text",
    "many texts before a long list",
}  # fmt: skip


@pytest.mark.parametrize("name", SAME)
def test_an_output_kept_as_text_hashes_stores_and_reads_as_the_whole_parse(name):
    raw = body_of(SAME[name])
    assert outcome(read_request, raw) == outcome(whole, raw)
    (report,) = read_request(raw).reports
    assert isinstance(report.output, OutputText) == (name not in WHOLE)


@pytest.mark.parametrize("output", REFUSED.values(), ids=REFUSED.keys())
def test_a_bad_output_is_refused_with_the_whole_parses_error(output):
    raw = body_of(output)
    expected = outcome(whole, raw)
    assert isinstance(expected, tuple) and expected[0] in ("ValidationError", "ValueError")
    assert outcome(read_request, raw) == expected


def test_a_long_list_outside_an_output_is_parsed_as_before():
    # files are strings: a long list of numbers there is the schema's refusal, as before
    raw = body_of(b'{"a": 1}', files=numbers(BIG))
    assert outcome(read_request, raw) == outcome(whole, raw)
    assert outcome(read_request, raw)[0] == "ValidationError"
    # in metrics, or in a report that is not a completion (its output ignored)
    for tail in (b', {"action": "start", "task_id": 8, "attempt": 1, "lease_id": "y", '
                 b'"output": {"v": ' + numbers(BIG) + b"}}",
                 b', {"action": "complete", "task_id": 9, "attempt": 1, "lease_id": "z", '
                 b'"metrics": {"v": ' + numbers(BIG) + b"}}"):  # fmt: skip
        raw = body_of(b'{"v": ' + numbers(BIG) + b"}", tail=tail)
        assert outcome(read_request, raw) == outcome(whole, raw)


def test_a_long_list_at_the_depth_limit_is_refused_as_before():
    # the output lies 3 levels down; a list at level 64 holds elements past the limit
    for levels in (59, 60, 61):
        output = b'{"a": ' * levels + numbers(BIG) + b"}" * levels
        raw = body_of(output)
        assert outcome(read_request, raw) == outcome(whole, raw), levels
    refused = outcome(read_request, body_of(b'{"a": ' * 61 + numbers(BIG) + b"}" * 61))
    assert refused[0] == "ValidationError" and "nested deeper than 64" in refused[1]


def test_a_small_body_is_parsed_whole():
    assert defer_large(body_of(b'{"v": ' + numbers(100) + b"}")) is None


def peak(call: Callable[[], Any]) -> int:
    """Bytes ``call`` allocated at its peak beyond what was held before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        call()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_a_completion_of_4m_numbers_holds_less_than_its_body(tmp_path):
    # The benchmark's case (a): 7.8 MB of one-digit numbers. Read, hashed and stored, it
    # held 62 MB of list at the parse and two canonical copies of 7.8 MB after.
    raw = body_of(b'{"values": ' + numbers(3_900_000) + b"}")
    stored: list[Any] = []

    def complete() -> None:
        request = read_request(raw)
        (report,) = request.reports
        digest = results.result_hash(report.output, report.files)
        stored.append((digest, results.store_output(tmp_path, "p1", "a", report.output, 65536)))

    used = peak(complete)
    assert used < len(raw), (used, len(raw))
    (digest, (inline, name)), = stored  # fmt: skip
    assert inline is None and name == "p1/a/output.json"
    value = json.loads(raw)["reports"][0]["output"]
    assert (tmp_path / name).read_text() == results.canonical_json(value)
    assert digest == results.result_hash(value, [])


def test_a_completion_of_one_long_text_holds_no_copy_of_it(tmp_path):
    # The benchmark's case (d1): 1 MB of text. Its parsed text, then its canonical JSON
    # twice (hash, file) with their encodings, were 4 copies of the body.
    raw = body_of(b'{"text": "' + b"x" * MB + b'"}')
    (report,) = read_request(raw).reports
    assert isinstance(report.output, OutputText)
    used = peak(lambda: (
        results.result_hash(report.output, report.files),
        results.store_output(tmp_path, "p1", "a", report.output, 65536),
    ))  # fmt: skip
    assert used < MB // 10, used
    assert json.loads((tmp_path / "p1/a/output.json").read_text()) == {"text": "x" * MB}


def test_a_small_deferred_output_is_stored_inline(tmp_path):
    raw = body_of(b'{"v": ' + numbers(BIG) + b"}")
    (report,) = read_request(raw).reports
    inline, name = results.store_output(tmp_path, "p1", "a", report.output, 10 * MB)
    assert name is None and inline == results.canonical_json(
        json.loads(raw)["reports"][0]["output"]
    )


# ---- a `from` group on a completion kept as text -------------------------------------------
def submit(brain, tasks, now=1000.0):
    plan, tainted = validate_with_fanout({"name": "f", "tasks": tasks}, Limits(), None)
    return brain.write(
        lambda conn, outbox, _: insert_plan(
            conn, outbox, plan, tainted, now, submitted_by="test", digest="d",
            idempotency_key=None, default_timeout_s=60.0,
        )
    )  # fmt: skip


FROM_PLAN = [
    {"id": "find", "type": "noop"},
    {"id": "g", "for_each": {"from": "{{ tasks.find.output.files }}"},
     "tasks": [{"id": "a", "type": "noop", "payload": {"echo": "{{ item }}"}}]},
]  # fmt: skip


def complete_from_body(brain, plan_id: str, files: bytes) -> Callable[[], None]:
    h.claim(brain, 1001)
    h.do(brain, plan_id, "find", "start", 1001)
    task = h.row(brain, plan_id, "find")
    raw = (b'{"reports": [{"action": "complete", "task_id": %d, "attempt": %d, "lease_id": '
           b'"%s", "output": {"files": %s}}]}') % (
        task["id"], task["attempt"], task["lease_id"].encode(), files)  # fmt: skip

    def complete() -> None:
        (report,) = read_request(raw).reports
        brain.write(lambda conn, outbox, _: leases.complete(
            conn, outbox, h.leases.states.get_task(conn, task["id"]), "w1", report, 1002,
            brain.settings))  # fmt: skip

    return complete


def test_a_from_group_on_4m_numbers_is_refused_by_their_count_unbuilt(tmp_path, monkeypatch):
    # The benchmark's case (c): the list was built (32 MB of pointers) to count it.
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, FROM_PLAN)
    complete = complete_from_body(brain, plan_id, numbers(4_000_000))
    monkeypatch.setattr(expand, "read_list", lambda *a: pytest.fail("the list was built"))
    used = peak(complete)
    assert used < 8 * MB, used  # the body is 8 MB
    states = h.state_of(brain, plan_id)
    assert states["find"] == "SUCCEEDED" and states["g"] == "FAILED"
    assert h.row(brain, plan_id, "g")["error"].startswith(
        "group g: {{ tasks.find.output.files }} holds 4000000 items x 1 tasks = 4000000 tasks;"
    )
    row = h.row(brain, plan_id, "find")
    stored = Path(brain.settings.results_dir, row["output_file"]).read_text()
    assert stored == results.canonical_json({"files": [n % 10 for n in range(4_000_000)]})


def test_a_from_group_within_the_cap_still_expands_from_the_text(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, FROM_PLAN)
    # 1500 items (the cap is 2000), spaced out to be a part kept as text
    files = b"[" + (b"7" + b" " * 60 + b",") * 1499 + b"8]"
    assert len(files) > LARGE
    complete = complete_from_body(brain, plan_id, files + b', "pad": "' + b"x" * LARGE + b'"')
    complete()
    states = h.state_of(brain, plan_id)
    assert states["g"] == "RUNNING" or states["g"] == "PENDING", h.row(brain, plan_id, "g")
    items = [key for key in states if key.startswith("g__")]
    assert len(items) == 1500
    assert json.loads(h.row(brain, plan_id, "g__1499__a")["payload_json"])["echo"] == "8"


def test_reading_outputs_kept_as_text_leaves_nothing_behind_per_request():
    # A pattern compiled per request's marker went into ``re``'s cache: about 1 KB kept
    # per completion, up to its 512 entries.
    import re

    raw = body_of(b'{"v": ' + numbers(BIG) + b', "t": "' + b"x" * LARGE + b'"}')
    for _ in range(3):  # the first reads fill what every read shares
        b"".join(results.output_pieces(read_request(raw).reports[0].output))
    cached = len(re._cache)  # type: ignore[attr-defined]
    for _ in range(40):
        b"".join(results.output_pieces(read_request(raw).reports[0].output))
    assert len(re._cache) == cached  # type: ignore[attr-defined]


# ---- over HTTP: the fast path, its body read, a replay -------------------------------------
def test_a_large_completion_over_the_fast_path_is_stored_and_replayed_as_before(tmp_path):
    from fastapi.testclient import TestClient

    from airig.brain.api.app import create_app
    from airig.brain.api.fastpath import ExchangeFastPath

    admin = {"Authorization": "Bearer admin-secret-token"}
    app = create_app(h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0))
    with TestClient(ExchangeFastPath(app)) as client:
        boot = {"Authorization": "Bearer bootstrap-secret-token"}
        token = client.post("/v1/workers/register", json={"name": "w1"}, headers=boot).json()
        worker = {"Authorization": f"Bearer {token['token']}", "content-type": "application/json"}
        plan = {"name": "p", "tasks": [{"id": "a", "type": "noop", "task_class": "cpu"}]}
        plan_id = client.post("/v1/plans", headers=admin, json=plan).json()["id"]
        (task,) = client.post("/v1/exchange", headers=worker,
                              json={"claim": {"wait_s": 0}}).json()["assignments"]  # fmt: skip
        output = b'{"values": ' + numbers(300_000, b", ") + b', "note": "' + b"n" * BIG + b'"}'
        raw = (b'{"reports": [{"action": "complete", "task_id": %d, "attempt": %d, "lease_id": '
               b'"%s", "output": %s}]}') % (task["task_id"], task["attempt"],
                                            task["lease_id"].encode(), output)  # fmt: skip
        for _ in range(2):  # the second is the replay of the first: answered the same
            answer = client.post("/v1/exchange", headers=worker, content=raw)
            assert answer.status_code == 200, answer.text
            assert answer.json()["results"][0]["state"] == "SUCCEEDED"
        got = client.get(f"/v1/plans/{plan_id}/tasks/a/result", headers=admin)
        assert got.status_code == 200
        assert got.json()["output"] == json.loads(output)
        # a different output for the same lease is no replay: 409
        other = raw.replace(b'"n', b'"m', 1)
        assert client.post("/v1/exchange", headers=worker, content=other).json()["results"][0][
            "status"] == 409  # fmt: skip
