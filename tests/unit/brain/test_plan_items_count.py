"""A plan's ``items`` list past the task cap refused by its count, unbuilt (issue 36 §1, b).

A 1 MB plan listing half a million small numbers peaked 6.6 MB above the brain's idle:
the body joined from its chunks, decoded into text, and the list of half a million
numbers built before ``too_many`` counted it. ``load_plan`` now scans an ASCII JSON body
for long lists of scalars (``jsonsafe_text.defer_large``, read by windows with the plan's
own JSON reader), and when each is a group's ``items`` list refused by its count, refuses
the plan from the counts. Anything else reads the body whole: these tests compare both
paths' answers, for bodies crafted against the scan too.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.plans import load
from airig.brain.plans.fanout import validate_with_fanout
from airig.brain.plans.load import decode_body, load_plan
from airig.brain.plans.parse import PlanSyntaxError, detect_format, parse_plan
from airig.brain.plans.submit import body_hash
from airig.brain.plans.validate import Limits, PlanInvalid

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

MB = 1_000_000
ADMIN = {"Authorization": "Bearer admin-secret-token", "Content-Type": "application/json"}
CAP = Limits(plan_max_tasks=1000)
ROOMY = Limits(max_tasks=500, plan_max_tasks=20_000)


def numbers(count: int) -> bytes:
    return b"[" + b",".join(b"%d" % (i % 10) for i in range(count)) + b"]"


def wide(count: int) -> bytes:
    """Fewer items past the scan's threshold: the equal expansions stay quick."""
    return b"[" + b",".join(b"%d" % (10**11 + i) for i in range(count)) + b"]"


def group(items: bytes, key: str = "g", extra: bytes = b"") -> bytes:
    return (
        b'{"id": "' + key.encode() + b'", "tasks": [{"id": "t", "type": "noop", '
        b'"task_class": "cpu", "payload": {"echo": "{{ item }}"}}], '
        b'"for_each": {"items": ' + items + b"}" + extra + b"}"
    )


def plan(*tasks: bytes, name: bytes = b'"items"') -> bytes:
    return b'{"name": ' + name + b', "tasks": [' + b", ".join(tasks) + b"]}"


def whole(raw: bytes, content_type: str | None, limits: Limits) -> Any:
    """What ``load_plan`` did before: the body decoded, parsed and expanded whole."""
    body = decode_body(raw)
    data = parse_plan(body, detect_format(content_type, body))
    found, tainted = validate_with_fanout(data, limits, None)
    return found, tainted, body_hash(body)


def outcome(
    read: Callable[[bytes, str | None, Limits], Any],
    raw: bytes,
    limits: Limits = CAP,
    content_type: str | None = "application/json",
) -> Any:
    try:
        found, tainted, digest = read(raw, content_type, limits)
    except PlanInvalid as exc:
        return "invalid", exc.errors, exc.fixes, exc.too_large
    except PlanSyntaxError as exc:
        return "syntax", str(exc)
    return found.model_dump(), sorted(tainted), digest


def scanned(raw: bytes, content_type: str | None, limits: Limits) -> Any:
    return load_plan(raw, content_type, limits)


def peak(call: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        call()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


# 68 KB: past the scan's threshold (64 KB), past CAP's 1000 tasks, within ROOMY's
BIG = wide(5200)
BODIES = {
    "over the cap": plan(group(BIG)),
    "over, bytearray": bytearray(plan(group(BIG))),
    "one-digit numbers": plan(group(numbers(33_000))),
    "scalars of every kind": plan(
        group(
            b"["
            + b", ".join(
                [b"-1.5e3", b"true", b"null", b"false", b"0", b"-0", b"12345678901234567890"] * 6000
            )
            + b"]"
        )
    ),  # fmt: skip
    "two groups over": plan(group(BIG), group(BIG, "h")),
    "one within, then one over": plan(group(numbers(10), "a"), group(BIG)),
    "an error in another group": plan(group(b'"x"', "a"), group(BIG)),
    "and a plain task": plan(b'{"id": "p", "type": "noop"}', group(BIG)),
    "unknown group field": plan(group(BIG, extra=b', "retry": 1')),
    "glob and items": plan(group(BIG[:-1] + b'], "glob": "*.txt"')),
    "a NUL item": plan(group(BIG[:-1] + b',"a\\u0000b"]')),
    "a nested item": plan(group(b"[[1]," + BIG[1:])),
    "an object item": plan(group(b'[{"a": 1},' + BIG[1:])),
    "a long integer": plan(group(BIG[:-1] + b"," + b"9" * 101 + b"]")),
    "past 64 bits": plan(group(BIG[:-1] + b",9223372036854775808]")),
    "huge float": plan(group(BIG[:-1] + b",1e400]")),
    "NaN": plan(group(BIG[:-1] + b",NaN]")),
    "trailing comma": plan(group(BIG[:-1] + b",]")),
    "empty element": plan(group(BIG[:20000] + b",," + BIG[20000:])),
    "a space-separated pair": plan(group(BIG[:-1] + b",1 2]")),
    "a leading zero": plan(group(BIG[:-1] + b",01]")),
    "a vertical tab": plan(group(BIG[:-1] + b",\x0b1]")),
    "duplicate items key": plan(group(BIG[:-1] + b'], "items": ' + BIG)),
    "duplicate for_each": plan(group(BIG, extra=b', "for_each": {"items": [1]}')),
    "a fake marker": plan(group(BIG), name=b'"\\u0000airig-' + b"0" * 32 + b'-0"'),
    "a long list in a payload": plan(
        b'{"id": "p", "type": "noop", "payload": {"v": ' + BIG + b"}}", group(BIG)
    ),
    "the list as a task's items": plan(
        b'{"id": "p", "type": "noop", "for_each": {"items": ' + BIG + b"}}"
    ),
    "a long text item list": plan(group(b'"' + b"x" * 70_000 + b'"')),
    "too many tasks": plan(*[b'{"id": "p%d", "type": "noop"}' % n for n in range(600)], group(BIG)),
    "not ascii": plan(group(BIG), name=b'"\xc3\xa9t\xc3\xa9"'),
    "not UTF-8": plan(group(BIG), name=b'"\xff"'),
    "leading spaces": b" \n\x1c\x1f" + plan(group(BIG)),
    "broken elsewhere": plan(group(BIG))[:-1],
    "no tasks": b'{"name": "x", "tasks": [], "v": ' + BIG + b"}",
    "nested deep": plan(group(BIG), name=b"[" * 70 + b"1" + b"]" * 70),
}


@pytest.mark.parametrize("name", list(BODIES))
@pytest.mark.parametrize("limits", [CAP, ROOMY], ids=["cap", "roomy"])
def test_the_scan_answers_what_the_whole_parse_did(name, limits):
    raw = BODIES[name]
    assert outcome(scanned, raw, limits) == outcome(whole, raw, limits)


@pytest.mark.parametrize("content_type", [None, "application/yaml", "text/markdown"])
def test_a_body_read_as_another_format_answers_as_before(content_type):
    raw = plan(group(numbers(33_000)))
    assert outcome(scanned, raw, CAP, content_type) == outcome(whole, raw, CAP, content_type)


def test_the_refusal_names_the_group_and_its_count():
    kind, errors, _, too_large = outcome(scanned, plan(group(BIG), group(BIG, "h")))
    assert (kind, too_large) == ("invalid", False)
    assert [(e["task"], e["field"]) for e in errors] == [
        ("g", "for_each.items"),
        ("h", "for_each.items"),
    ]
    assert errors[0]["message"].startswith("5200 items x 1 tasks = 5200 tasks;")
    assert errors[1]["message"].startswith("5200 items x 1 tasks = 5200 tasks;")


HEAD = plan(group(b"[]"))
COUNT = (MB - len(HEAD)) // 2


def benchmark_body() -> bytes:
    """``benchmarks/brain_memory.py`` case b: one group listing 1 MB of digits."""
    return HEAD.replace(b"[]", numbers(COUNT))


def test_a_1mb_items_plan_is_refused_holding_less_than_its_body(monkeypatch):
    raw = benchmark_body()
    limits = Limits(plan_max_tasks=10_000)
    held = peak(lambda: pytest.raises(PlanInvalid, load_plan, raw, "application/json", limits))
    # It decoded the body (1 MB of text) and built the list (4 MB of pointers): 5.2 MB.
    assert held < len(raw), held
    # ... and never made the body's text
    monkeypatch.setattr(load, "decode_body", lambda raw: pytest.fail("decoded"))
    with pytest.raises(PlanInvalid) as refused:
        load_plan(raw, "application/json", limits)
    assert refused.value.errors[0]["message"].startswith(f"{COUNT} items x 1 tasks")


def test_the_route_refuses_a_1mb_items_plan_as_before(tmp_path):
    raw = benchmark_body()
    settings = h.make_settings(tmp_path, AIRIG_PLAN_MAX_TASKS=10_000)
    chunks = [raw[at : at + 65536] for at in range(0, len(raw), 65536)]
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        answer = client.post("/v1/plans", headers=ADMIN, content=iter(chunks))
        again = client.post("/v1/plans", headers=ADMIN, content=raw)
        assert answer.status_code == again.status_code == 422
        assert answer.json() == again.json()
        (error,) = answer.json()["detail"]["errors"]
        assert error["message"].startswith(f"{COUNT} items x 1 tasks = {COUNT} tasks;")
        # a plan within the limit still goes in, read from the same buffer
        small = plan(group(numbers(3)))
        assert client.post("/v1/plans", headers=ADMIN, content=small).status_code == 201
        assert json.loads(small)["name"] == "items"
