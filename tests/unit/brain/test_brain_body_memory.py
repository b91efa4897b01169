"""Memory a message can make the brain spend (issue 36 §1): the JSON-value check every
request body passes, the exchange's parse, and nesting deeper than any parser reads.

A 7.8 MB worker output of small numbers made the brain peak at 889 MB: the check kept a
pending entry with its own path text for every node, and ran again for every model nested
in the body. The benchmark is ``benchmarks/brain_memory.py``; these tests hold the causes.
"""

from __future__ import annotations

import enum
import json
import random
import tracemalloc
from decimal import Decimal
from pathlib import Path
from typing import Any

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from airig.brain.api.app import create_app
from airig.brain.api.fastpath import ExchangeFastPath, read_request
from airig.brain.store import results
from airig.common import protocol
from airig.common.jsonsafe import INT64_MAX, INT64_MIN, UnsafeJson, check_json_value
from airig.common.protocol import CompleteRequest, ExchangeRequest

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}


def refusal(value: Any, **options: Any) -> str | None:
    try:
        check_json_value(value, **options)
    except UnsafeJson as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------ the walk's memory
def traced_peak(value: Any) -> int:
    """Bytes the check allocated at its peak, beyond what ``value`` already holds."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        check_json_value(value)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "value",
    [
        {"v": [n % 10 for n in range(1_000_000)]},  # a worker's list of small numbers
        [{"a": n % 10, "b": "x", "c": [1.5, None]} for n in range(30_000)],  # records
        {f"k{n}": n for n in range(200_000)},  # one wide mapping
    ],
    ids=["numbers", "records", "wide-mapping"],
)
def test_the_check_holds_nothing_per_node(value):
    # It held a pending (node, path text, depth) for every node: 132 MB for the million
    # numbers, 4 MB for the records. Now one iterator per open container.
    assert traced_peak(value) < 64 * 1024


def test_nesting_far_past_the_limit_is_one_refusal_not_a_recursion():
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert refusal({"x": deep}) == "$.x" + "[0]" * 64 + ": nested deeper than 64 levels"
    assert refusal(deep, max_depth=2) == "$[0][0][0]: nested deeper than 2 levels"


# ------------------------------------------------------- same rules, named the same way
class Wide(enum.IntEnum):
    BIG = 2**64


BAD = 2**63
SURROGATE = "ab\ud800"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1] * 40 + [BAD] + [2] * 9, "$[40]: integer 9223372036854775808… is outside 64 bits"),
        ([1.5] * 17 + [float("nan")] + [2], "$[17]: nan is not a JSON number"),
        ([0.5] * 20 + [float("-inf")], "$[20]: -inf is not a JSON number"),
        ([0.5] * 20 + [10**400], "$[20]: integer 10000000000000000000… is outside 64 bits"),
        (["x"] * 30 + [SURROGATE], "$[30]: character 2 is a lone surrogate, not valid Unicode"),
        ({"v": ["é"] * 20 + [SURROGATE]},
         "$.v[20]: character 2 is a lone surrogate, not valid Unicode"),
        (dict([*((f"k{n}", n) for n in range(20)), (7, 1)]), "$: key 7 is not a string"),
        ({**{f"k{n}": n for n in range(20)}, "\udfffk": 1},
         "$.'\\udfffk': character 0 is a lone surrogate, not valid Unicode"),
        ({f"k{n}": n for n in range(20)} | {"k5": BAD},
         "$.k5: integer 9223372036854775808… is outside 64 bits"),
        ([1] * 5 + [Decimal(1)] + [1] * 20, "$[5]: a Decimal is not a JSON value"),
        ([1] * 20 + [Wide.BIG], "$[20]: integer 18446744073709551616… is outside 64 bits"),
        (tuple([1] * 20 + [-BAD - 1]), "$[20]: integer -9223372036854775809… is outside 64 bits"),
        ([1, "a", None, True] * 10 + [{1, 2}], "$[40]: a set is not a JSON value"),
        ({"a" * 50: [BAD]},
         "$." + "a" * 40 + "[0]: integer 9223372036854775808… is outside 64 bits"),
    ],
    ids=["int", "nan", "inf", "int-past-floats", "text", "text-in-mapping", "key-type",
         "key-text", "mapping-value", "decimal", "int-subclass", "tuple", "mixed", "long-key"],
)  # fmt: skip
def test_a_bad_value_among_many_plain_ones_is_named_by_its_path(value, message):
    # Long lists of plain scalars are checked by loops in C; a doubt walks them one by
    # one, so the bad one is still named.
    assert refusal(value) == message


@pytest.mark.parametrize(
    "value",
    [
        [INT64_MIN, INT64_MAX] * 10,  # the bounds themselves, whose sizes sum past 64 bits
        [1e308] * 20,  # a sum that overflows to inf, of finite numbers
        [1.5e19] * 20,  # floats past 64 bits are floats, not integers
        [True, False, None] * 10,
        [1, 2.5] * 10,
        {"v": ["plain", "é", "日本"] * 10, "w": []},
    ],
    ids=["int64-bounds", "float-sum-overflow", "large-floats", "bool-none", "mixed", "text"],
)
def test_long_lists_of_good_values_pass(value):
    assert refusal(value) is None


def test_ints_are_left_to_their_fields_when_asked():
    assert refusal([0.5] * 20 + [10**400], bound_ints=False) is None
    assert refusal([BAD] * 20, bound_ints=False) is None


def reference(value: Any, where: str = "$", depth: int = 0) -> str | None:
    """The rules, read plainly: in document order, a mapping's keys before its values."""
    if depth > 64:
        return f"{where}: nested deeper than 64 levels"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"{where}: character {exc.start} is a lone surrogate, not valid Unicode"
        return None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            return f"{where}: integer {str(value)[:20]}… is outside 64 bits"
        return None
    if isinstance(value, float):
        return None if value == value and abs(value) != float("inf") else (
            f"{where}: {value} is not a JSON number")  # fmt: skip
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                return f"{where}: key {key!r} is not a string"
            found = reference(key, f"{where}.{key[:40]!r}", 0)
            if found:
                return found
        children = [(f"{where}.{key[:40]}", inner) for key, inner in value.items()]
    elif isinstance(value, list | tuple):
        children = [(f"{where}[{n}]", inner) for n, inner in enumerate(value)]
    else:
        return f"{where}: a {type(value).__name__} is not a JSON value"
    for path, inner in children:
        found = reference(inner, path, depth + 1)
        if found:
            return found
    return None


def random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice([0, -3, 7, 2**62, 1.5, -0.25, 1e300, "a", "é", "", True, None,
                           [], {}])  # fmt: skip
    if roll < 0.5:  # long and plain: the lists checked in C
        kind = rng.choice([lambda: rng.randint(-9, 9), lambda: rng.random(),
                           lambda: rng.choice("xyé")])  # fmt: skip
        return [kind() for _ in range(rng.randint(16, 24))]
    if roll < 0.75:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {f"{rng.choice('abé')}{n}": random_value(rng, depth + 1)
            for n in range(rng.randint(0, 6))}  # fmt: skip


def spoil(rng: random.Random, value: Any) -> Any:
    """``value`` with one node somewhere replaced by one the rules refuse."""
    bad = rng.choice([2**63, -(2**63) - 1, float("nan"), float("inf"), "x\udc80", Decimal(2),
                      {1: 2}, {"\ud800": 0}, b"bytes"])  # fmt: skip
    if isinstance(value, list) and value and rng.random() < 0.8:
        at = rng.randrange(len(value))
        return [*value[:at], spoil(rng, value[at]), *value[at + 1 :]]
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(list(value))
        return {**value, key: spoil(rng, value[key])}
    return bad


def test_the_check_says_what_the_plain_rules_say_for_many_values():
    rng = random.Random(36)
    for _ in range(2000):
        value = random_value(rng)
        assert refusal(value) is None is reference(value)
        spoiled = spoil(rng, value)
        assert refusal(spoiled) == reference(spoiled)
        twice = spoil(rng, spoiled)  # two bad nodes: the first in document order is named
        assert refusal(twice) == reference(twice)


# --------------------------------------------------------- one check per request body
def counting(monkeypatch) -> list[tuple[Any, bool]]:
    calls: list[tuple[Any, bool]] = []
    real = check_json_value

    def check(value: Any, *args: Any, **options: Any) -> Any:
        calls.append((value, options.get("bound_ints", True)))
        return real(value, *args, **options)

    monkeypatch.setattr(protocol, "check_json_value", check)
    return calls


def complete_report(task_id: int, output: Any) -> dict[str, Any]:
    return {"action": "complete", "task_id": task_id, "attempt": 1, "lease_id": "x",
            "output": output}  # fmt: skip


def test_an_exchange_is_checked_whole_once_and_its_outputs_for_their_numbers(monkeypatch):
    # Each report (an ``Inbound`` too) was walked again after the whole body, a third walk
    # of every output on top of the whole body's and the output's own.
    calls = counting(monkeypatch)
    outputs = [{"n": list(range(20))} for _ in range(3)]
    body = {"reports": [complete_report(n, out) for n, out in enumerate(outputs)],
            "claim": {"wait_s": 0, "resident_models": ["qwen2.5:7b"]}}  # fmt: skip
    ExchangeRequest.model_validate(body)
    unbounded = [value for value, bound in calls if not bound]
    assert unbounded == [body]  # the whole body, once: not each report, not the claim
    bounded = [value for value, bound in calls if bound]
    assert [value for value in bounded if value] == outputs  # metrics are empty here


def test_what_a_nested_model_skips_is_still_checked_by_the_whole():
    body = {"reports": [{**complete_report(1, {}), "files": ["a\ud800"]}]}
    with pytest.raises(ValidationError, match=r"reports\[0\]\.files\[0\]: character 1"):
        ExchangeRequest.model_validate(body)
    # The skip ends with the body: a model validated on its own checks itself again,
    # after a body that passed and after one that was refused.
    ExchangeRequest.model_validate({"reports": [complete_report(1, {"ok": 1})]})
    with pytest.raises(ValidationError, match=r"\$\.files\[0\]: character 0 is a lone"):
        CompleteRequest.model_validate({"attempt": 1, "lease_id": "x", "files": ["\udfff"]})


# ------------------------------------------------------------------- the exchange's parse
def peak_growth_mb(action) -> float:
    """How far the process's peak resident memory rose above its memory now, in MB."""
    status = Path("/proc/self/status")

    def field(name: str) -> float:
        line = next(x for x in status.read_text().splitlines() if x.startswith(name))
        return int(line.split()[1]) / 1024

    Path("/proc/self/clear_refs").write_text("5")  # the peak from here on
    before = field("VmRSS:")
    action()
    return field("VmHWM:") - before


def test_an_exchange_body_is_parsed_into_its_objects_only():
    # 8 MB of one-digit numbers: four million values, 32 MB of list. ``model_validate_json``
    # built its own tree of the document beside the objects: 150 MB at the peak; then the
    # objects alone were 62 MB at the parse. The list is now never built: it stays the
    # body's text (``jsonsafe_text``), checked by pieces.
    body = b'{"reports": [{"action": "complete", "task_id": 1, "attempt": 1, "lease_id": "x",'
    body += b' "output": {"v": [' + b"0,1,2,3,4,5,6,7,8,9," * 400_000 + b"0]}}]}"
    kept: list[ExchangeRequest] = []
    growth = peak_growth_mb(lambda: kept.append(read_request(body)))
    output = kept[0].reports[0].output
    assert results.value_of(output)["v"] == [i % 10 for i in range(4_000_001)]
    assert growth < 8, growth  # the body is 8 MB: less than itself again


# ------------------------------------------------------- nesting no parser can read
@pytest.fixture
def client(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_a_body_nested_100k_deep_is_one_refusal_on_every_route(client):
    token = client.post("/v1/workers/register", headers=BOOT, json={"name": "w1"}).json()
    worker = {"Authorization": f"Bearer {token['token']}", "content-type": "application/json"}
    client.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": [h.noop("a")]})
    task = client.post("/v1/claims", headers=worker, json={"wait_s": 0}).json()
    deep = b"[" * 100_000 + b"]" * 100_000
    lease = b'"attempt": %d, "lease_id": "%s"' % (task["attempt"], task["lease_id"].encode())
    report = b'{"action": "complete", "task_id": %d, %s, "output": {"x": %s}}' % (
        task["task_id"], lease, deep)  # fmt: skip
    # FastAPI reads these with json.loads, whose recursion gives out: that was a 400
    # "There was an error parsing the body".
    for url, body in [
        (f"/v1/tasks/{task['task_id']}/complete", b"{%s, \"output\": {\"x\": %s}}" % (lease, deep)),
        ("/v1/workers/heartbeat", b'{"gpus": %s}' % deep),
        ("/v1/exchange", b'{"reports": [%s]}' % report),
    ]:  # fmt: skip
        answer = client.post(url, headers=worker, content=body)
        assert answer.status_code == 400, (url, answer.text)
        assert answer.json()["detail"] == (
            "the body nests JSON too deep to read (at most 64 levels)"), url  # fmt: skip
    # The fast path parses on its own (``read_request``): its parser's refusal, as before.
    fast = TestClient(ExchangeFastPath(client.app))
    for body, message in [
        (b'{"reports": [%s]}' % report, "Invalid JSON: recursion limit exceeded at line 1"),
        (b'{"reports": [', "Invalid JSON: EOF while parsing a list at line 1 column 13"),
    ]:
        answer = fast.post("/v1/exchange", headers=worker, content=body)
        assert answer.status_code == 422, answer.text
        (error,) = answer.json()["detail"]
        assert error["type"] == "json_invalid" and error["msg"].startswith(message), error
    # Nesting any parser reads is refused by the check, naming where.
    nested = b"[" * 100 + b"]" * 100
    answer = fast.post("/v1/exchange", headers=worker,
                       content=b'{"reports": [%s]}' % report.replace(deep, nested))  # fmt: skip
    (error,) = answer.json()["detail"]
    assert error["msg"].endswith("[0]: nested deeper than 64 levels")
    assert client.get(f"/v1/plans/{task['plan_id']}", headers=ADMIN).json()["tasks"][0][
        "state"] == "LEASED"  # fmt: skip
    json.loads(answer.text)  # the refusal is JSON
