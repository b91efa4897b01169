"""Plan bodies that used to stall the brain, answer 500 or store a task no worker could
claim (issue 9, items 6 to 9). Each must now be one clear refusal, or render bounded."""

from __future__ import annotations

import json
import textwrap
import tracemalloc

import brain_helpers as h
import pytest
import yaml
from fastapi.testclient import TestClient
from yaml.scanner import ScannerError

from airig.brain.api.app import create_app
from airig.brain.plans import readers
from airig.brain.plans.load import load_plan
from airig.brain.plans.parse import PlanSyntaxError, parse_plan
from airig.brain.plans.validate import MAX_REPORTED_ERRORS, Limits, PlanInvalid
from airig.brain.store import results
from airig.brain.store.engines import open_store
from airig.common.protocol import PlanErrorBody
from airig.common.protocol import TaskState as S

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

T0 = 1000.0


def json_plan(payload: str, name: str = '"p"') -> bytes:
    """A one-task JSON plan whose noop payload is the given JSON text (``echo`` is free)."""
    task = f'{{"id": "a", "type": "noop", "payload": {payload}}}'
    return f'{{"name": {name}, "tasks": [{task}]}}'.encode()


def yaml_plan(payload: str) -> bytes:
    return f"name: p\ntasks:\n- id: a\n  type: noop\n  payload: {payload}\n".encode()


def load(body: bytes, content_type: str | None = None):
    return load_plan(body, content_type, Limits())


def refusal(body: bytes, content_type: str | None = None) -> str:
    with pytest.raises(PlanSyntaxError) as caught:
        load(body, content_type)
    message = str(caught.value)
    assert "\n" not in message, message  # one line, never a traceback or an excerpt
    return message


# ------------------------------------------------------------- 7. YAML alias bomb
LAUGHS = textwrap.dedent(
    """\
    name: laughs
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    tasks:
    - {id: t, type: noop, payload: {echo: *f}}
    """
)


@pytest.mark.parametrize(
    "body",
    [LAUGHS, "name: p\ntasks:\n- &t {id: a, type: noop}\n", "name: &n p\ntasks: [1]\n"],
    ids=["alias-bomb", "anchor", "anchored-scalar"],
)
def test_yaml_anchors_and_aliases_are_refused_before_anything_expands(body):
    # parse_plan alone: without the fix it returned the shared structure, and validation
    # then spent seconds and hundreds of megabytes writing it out.
    with pytest.raises(PlanSyntaxError, match="YAML anchors and aliases are not allowed"):
        parse_plan(body, "yaml")


def test_markdown_fields_and_blocks_refuse_aliases_too():
    body = "# P\n\n## a\n- type: noop\n\n```yaml\nx: &x [1]\ny: *x\n```\n"
    assert "anchors and aliases" in refusal(body.encode(), "text/markdown")


# ------------------------------------------------------------------- 8. depth
def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (json_plan(f'{{"echo": {nested(100)}}}'), "application/json"),
        (json_plan(f'{{"echo": {nested(600)}}}'), "application/json"),  # RecursionError
        (json_plan(f'{{"echo": {nested(100_000)}}}'), "application/json"),
        (yaml_plan(f"{{echo: {nested(100)}}}"), "application/yaml"),
        (yaml_plan(f"{{echo: {nested(100_000)}}}"), "application/yaml"),  # RecursionError
        (f"# P\n\n## a\n- type: noop\n\n```json\n{{\"echo\": {nested(600)}}}\n```\n".encode(),
         "text/markdown"),
    ],
    ids=["json-100", "json-600", "json-100k", "yaml-100", "yaml-100k", "markdown-json-600"],
)  # fmt: skip
def test_deep_nesting_is_refused_in_every_format(body, content_type):
    assert "nested deeper than 64 levels" in refusal(body, content_type)


class ScannerWithANestingLimit(yaml.SafeLoader):
    """A parser that gives up on its own while looking ahead, as the libyaml in PyYAML
    6.0.4's wheels does past 1000 levels ("exceeded maximum nesting depth")."""

    def fetch_flow_collection_start(self, TokenClass):
        if self.flow_level >= 100:
            raise ScannerError(None, None, "exceeded maximum nesting depth", self.get_mark())
        super().fetch_flow_collection_start(TokenClass)


def test_deep_yaml_gets_the_kits_refusal_whatever_the_parser_says(monkeypatch):
    # Without the fix PyYAML 6.0.4 answered "not valid yaml: ... exceeded maximum nesting
    # depth (while increasing flow level)": its limit fired before the kit's event walk.
    monkeypatch.setattr(readers, "_PlanLoader", ScannerWithANestingLimit)
    message = refusal(yaml_plan(f"{{echo: {nested(500)}}}"), "application/yaml")
    assert message == "line 5: nested deeper than 64 levels"
    # invalid before it nests too deep: the parser's own error stands
    message = refusal(f"name: p: q\nx: {nested(500)}\n".encode(), "application/yaml")
    assert message.startswith("not valid yaml: line 1, column 8: mapping values are not allowed")


# ------------------------------------------------- 8. YAML types that are not JSON
def test_yaml_dates_stay_text():
    plan, _, _ = load(yaml_plan("{echo: {day: 2024-01-01, at: 2024-01-01T10:00:00Z}}"))
    payload = plan.tasks[0].payload
    assert payload == {"echo": {"day": "2024-01-01", "at": "2024-01-01T10:00:00Z"}}
    json.dumps(payload)  # raised TypeError at insert time for a date


@pytest.mark.parametrize(
    ("value", "tag"),
    [("!!binary aGVsbG8=", "!!binary"), ("!!set {a, b}", "!!set"),
     ("!!timestamp 2024-01-01", "!!timestamp"), ("!!omap [a: 1]", "!!omap")],
)  # fmt: skip
def test_yaml_types_that_are_not_json_are_refused_with_the_line(value, tag):
    message = refusal(yaml_plan(f"{{echo: {value}}}"))
    assert f"{tag} is not a JSON value" in message and "line 5" in message


# --------------------------------------------------- 8. Markdown `- payload: 5`
@pytest.mark.parametrize("block", ["```yaml\nx: 1\n```", "```prompt\nhi\n```", "```sh\nls\n```"])
def test_a_markdown_payload_field_that_is_not_a_mapping_is_a_clear_error(block):
    body = f"# P\n\n## a\n- type: noop\n- payload: 5\n\n{block}\n".encode()
    assert "`- payload: 5` is not a mapping" in refusal(body, "text/markdown")


def test_markdown_bullets_other_than_dash_get_a_fix():
    body = b"# P\n\n## a\n* type: noop\n"
    assert "write the task fields as `- key: value` bullets" in refusal(body, "text/markdown")


def test_the_markdown_reader_never_runs_the_inline_pass(monkeypatch):
    # A megabyte of `[` or `*a ` kept markdown-it's inline pass busy for seconds; plans
    # only need block structure. Stands in for a timing the unit tests do not make.
    from markdown_it.parser_inline import ParserInline

    def refuse(*_args, **_kwargs):
        raise AssertionError("the inline pass ran")

    monkeypatch.setattr(ParserInline, "parse", refuse)
    monkeypatch.setattr(ParserInline, "tokenize", refuse)
    data = parse_plan("# Plan: *P* [x]\n\n## a: A *b*\n- type: noop\n\nSome *prose* [y].\n",
                      "markdown")  # fmt: skip
    assert data == {"name": "*P* [x]", "tasks": [{"id": "a", "name": "A *b*", "type": "noop"}]}


# ----------------------------------------- 6 and 8. strings that are not Unicode
@pytest.mark.parametrize(
    ("body", "where"),
    [
        (json_plan("{}", name='"\\ud800"'), "plan.name"),
        (json_plan('{"echo": "\\ud800"}'), "plan.tasks[0].payload.echo"),
        (json_plan('{"echo": {"\\udfff": 1}}'), "plan.tasks[0].payload.echo"),
        (b'{"name": "p", "tasks": [{"id": "a", "type": "noop", "name": "\\ud83d"}]}',
         "plan.tasks[0].name"),
    ],
    ids=["plan-name", "payload-value", "payload-key", "task-name"],
)  # fmt: skip
def test_a_lone_surrogate_anywhere_is_refused_with_its_path(body, where):
    message = refusal(body)
    assert message.startswith(where) and "lone surrogate" in message


def test_a_body_that_is_not_utf8_is_refused_not_replaced():
    body = json_plan('{"echo": "caf\xe9"}'.encode("latin-1").decode("latin-1"))
    raw = body.replace("café".encode(), b"caf\xe9")
    assert "plan body is not valid UTF-8 (byte" in refusal(raw)


def test_a_utf8_byte_order_mark_is_ignored():
    plan, _, _ = load(b"\xef\xbb\xbf" + json_plan("{}"), "application/json")
    assert [task.id for task in plan.tasks] == ["a"]


# ------------------------------------------------------------------- numbers
@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (json_plan(f'{{"echo": {2**63}}}'), "outside 64 bits"),
        (json_plan(f'{{"echo": {-(2**63) - 1}}}'), "outside 64 bits"),
        (json_plan('{"echo": NaN}'), "not a JSON number"),
        (json_plan('{"echo": -Infinity}'), "not a JSON number"),
        (json_plan('{"echo": 1e999}'), "not a JSON number"),
        (yaml_plan("{echo: .inf}"), "not a JSON number"),
        (yaml_plan("{echo: .nan}"), "not a JSON number"),
        (json_plan('{"echo": ' + "9" * 5000 + "}"), "too long"),  # was a bare ValueError
        (yaml_plan("{echo: " + "9" * 5000 + "}"), "too long"),
        (yaml_plan("{echo: 1" + ":1" * 20_000 + "}"), "too long"),  # sexagesimal, quadratic
    ],
    ids=["2**63", "-2**63-1", "nan", "-inf", "1e999", "yaml-inf", "yaml-nan", "json-5000",
         "yaml-5000", "yaml-sexagesimal"],
)  # fmt: skip
def test_numbers_json_consumers_cannot_hold_are_refused(body, fragment):
    assert fragment in refusal(body)


def test_the_64_bit_bounds_themselves_are_accepted():
    plan, _, _ = load(json_plan(f'{{"echo": [{2**63 - 1}, {-(2**63)}]}}'))
    assert plan.tasks[0].payload["echo"] == [2**63 - 1, -(2**63)]


# ---------------------------------------------------------- said twice, or huge
@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"name": "p", "tasks": [{"id": "a", "type": "noop", "id": "b"}]}', "'id' appears"),
        (yaml_plan("{echo: 1, echo: 2}"), "'echo' appears twice"),
        (b"# P\n\n## a\n- type: noop\n- type: llm\n", "'type' is given twice"),
    ],
    ids=["json", "yaml", "markdown-fields"],
)
def test_a_key_given_twice_is_refused_not_silently_dropped(body, fragment):
    assert fragment in refusal(body)


def test_a_dependency_listed_twice_is_an_error_not_a_failed_insert(tmp_path):
    body = b'{"name": "p", "tasks": [{"id": "a", "type": "noop"},' \
           b' {"id": "b", "type": "noop", "depends_on": ["a", "a"]}]}'  # fmt: skip
    with pytest.raises(PlanInvalid) as caught:
        load(body)
    assert caught.value.errors == [
        {"task": "b", "field": "depends_on", "message": "listed twice: task 'a'"}
    ]


def test_a_plan_name_that_is_not_text_is_an_error():
    with pytest.raises(PlanInvalid) as caught:
        load(json_plan("{}", name='{"a": 1}'))
    assert caught.value.errors[0]["field"] == "name"


def test_refusals_stay_small_however_many_problems_a_plan_has():
    tasks = [{"id": f"t{i}", "type": "noop", "priority": 99} for i in range(1000)]
    tasks.append({"id": "many", "type": "noop", "depends_on": [f"x{i}" for i in range(5000)]})
    tasks.append({"id": "long", "type": "noop", "task_class": "c" * 100_000})
    tasks.append({"id": "i" * 100_000, "type": "noop"})
    with pytest.raises(PlanInvalid) as caught:
        load(json.dumps({"name": "p", "tasks": tasks}).encode(), "application/json")
    errors = caught.value.errors
    assert len(errors) == MAX_REPORTED_ERRORS + 1
    assert errors[-1]["message"] == f"and {1000 + 3 - MAX_REPORTED_ERRORS} more errors"
    with pytest.raises(PlanInvalid) as caught:
        load(json.dumps({"name": "p", "tasks": tasks[1000:]}).encode(), "application/json")
    errors = caught.value.errors
    assert len(errors) == 3 and all(len(json.dumps(e)) < 400 for e in errors), errors
    many = next(e for e in errors if e["task"] == "many")
    assert many["message"].endswith("and 4995 more")


# ------------------------------------------------------- 9. template amplification
def test_rendering_stops_at_the_limit_without_building_the_payload():
    big = {"text": "x" * 100_000}
    loaded = []
    payload = {"prompt": "{{ tasks.a.output }}" * 1000}  # 100 MB if rendered
    tracemalloc.start()
    try:
        with pytest.raises(results.RenderTooLarge, match="renders to more than 1048576 bytes"):
            results.render(payload, lambda key: loaded.append(key) or big, limit=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 << 20 and loaded == ["a"]  # one load, at most the limit plus one text


def test_a_payload_that_renders_too_large_fails_its_task_for_good(tmp_path):
    brain = h.make_brain(tmp_path)
    reader = h.noop("b", ["a"], payload={"echo": "{{ tasks.a.output }}" * 1000})
    plan = h.submit(brain, [h.noop("a"), reader])
    h.claim(brain, T0)
    h.do(brain, plan, "a", "complete", T0, output={"text": "x" * 20_000})  # 20 MB rendered
    assert h.claim(brain, T0) is None
    row = h.row(brain, plan, "b")
    assert (row["state"], row["error_type"]) == (S.FAILED, "template_error")
    assert f"renders to more than {results.MAX_RENDERED_BYTES} bytes" in row["error"]


def test_small_templates_still_render():
    output = {"text": "hi", "n": 3}
    rendered = results.render({"a": ["{{ tasks.u.output }} {{tasks.u.output.n}}", 1]},
                              lambda key: output)  # fmt: skip
    assert rendered == {"a": ["hi 3", 1]}


# ---------------------------------------------------------------- through HTTP
@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (LAUGHS.encode(), "application/yaml"),
        (json_plan(f'{{"echo": {nested(600)}}}'), "application/json"),
        (yaml_plan("{echo: !!binary aGVsbG8=}"), "application/yaml"),
        (b"# P\n\n## a\n- type: noop\n- payload: 5\n\n```yaml\nx: 1\n```\n", "text/markdown"),
        (json_plan(f'{{"echo": {2**64}}}'), "application/json"),
        (b'{"name": "\xff", "tasks": []}', "application/json"),
        (b'{"name": "p", "tasks": [{"id": "a", "type": "noop"},'
         b' {"id": "b", "type": "noop", "depends_on": ["a", "a"]}]}', "application/json"),
        # a NUL in a name stored as a column (PostgreSQL's text refuses it: was a 500)
        (json_plan("{}", name='"p\\u0000"'), "application/json"),
        (b'{"name": "p", "tasks": [{"id": "a", "type": "noop", "name": "n\\u0000"}]}',
         "application/json"),
        (b'{"name": "p", "tasks": [{"id": "a", "type": "llm",'
         b' "payload": {"model": "m\\u0000", "prompt": "x"}}]}', "application/json"),
        (b'name: "p"\ntasks:\n- id: a\n  type: llm\n  model: "m\\0"\n'
         b'  payload: {prompt: x}\n', "application/yaml"),
    ],
    ids=["alias-bomb", "deep", "binary", "markdown-payload", "2**64", "not-utf8", "dup-dep",
         "nul-plan-name", "nul-task-name", "nul-payload-model", "nul-yaml-model"],
)  # fmt: skip
def test_hostile_plans_are_a_422_and_store_nothing(tmp_path, body, content_type):
    settings = h.make_settings(tmp_path)
    headers = {"Authorization": "Bearer admin-secret-token", "content-type": content_type}
    with TestClient(create_app(settings)) as client:
        answer = client.post("/v1/plans", headers=headers, content=body)
    assert answer.status_code == 422, answer.text
    PlanErrorBody.model_validate(answer.json())
    store = open_store(settings.db_path, settings.database_url)  # the engine the brain used
    try:
        with store.read() as conn:
            assert conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 0
    finally:
        store.close()


@pytest.mark.parametrize(
    ("body", "content_type", "where"),
    [
        (json_plan("{}", name='"p\\u0000"'), "application/json", (None, "name")),
        (b'{"name": "p", "tasks": [{"id": "a", "type": "noop", "name": "\\u0000"}]}',
         "application/json", ("a", "name")),
        (b'{"name": "p", "tasks": [{"id": "a", "type": "llm",'
         b' "payload": {"model": "m\\u0000", "prompt": "x"}}]}', "application/json",
         ("a", "model")),
        (b'name: "p"\ntasks:\n- id: a\n  type: llm\n  model: "m\\0"\n  payload: {prompt: x}\n',
         "application/yaml", ("a", "model")),
    ],
)  # fmt: skip
def test_a_nul_in_a_name_stored_as_a_column_is_refused_where_it_is(body, content_type, where):
    """Names and models are columns of their own: PostgreSQL's text refuses a NUL (the
    submit was a 500, retryable) and SQLite's reads cut the name there. A payload value
    may hold one: the payload is JSON text, where it is written escaped."""
    with pytest.raises(PlanInvalid) as refused:
        load(body, content_type)
    assert [(e["task"], e["field"]) for e in refused.value.errors] == [where]
    assert "NUL" in refused.value.errors[0]["message"]
    plan, _, _ = load(json_plan('{"echo": "a\\u0000b"}'), "application/json")
    assert plan.tasks[0].payload["echo"] == "a\x00b"
