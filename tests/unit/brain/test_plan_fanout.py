"""Fan-out groups: expansion (glob, items, from), keys, templates, shell safety, limits,
taint per item, how a group ends, its output, and the plan view's ``fanouts``."""

from __future__ import annotations

import json

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.plans.fanout import validate_with_fanout
from airig.brain.plans.submit import insert_plan
from airig.brain.plans.validate import Limits, PlanInvalid
from airig.brain.store import fanout
from airig.brain.store.shell_inputs import substitute as shell_substitute

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}


def expand(tasks, data_dir=None, plan_max=5000):
    limits = Limits(plan_max_tasks=plan_max)
    return validate_with_fanout({"name": "f", "tasks": tasks}, limits, data_dir)


def submit(brain, tasks, data_dir=None, now=1000.0):
    plan, tainted = expand(tasks, data_dir)
    return brain.write(
        lambda conn, outbox, _: insert_plan(
            conn, outbox, plan, tainted, now, submitted_by="test", digest="d",
            idempotency_key=None, default_timeout_s=60.0,
        )
    )  # fmt: skip


def group(items, template=None, **fields):
    template = template or [
        {"id": "a", "type": "noop", "payload": {"echo": "{{ item }}"}},
        {"id": "b", "type": "noop", "depends_on": ["a"],
         "payload": {"echo": "got {{ tasks.a.output }}"}},
    ]  # fmt: skip
    return {"id": "g", "for_each": items, "tasks": template, **fields}


def errors_of(excinfo):
    return [(e["task"], e["field"], e["message"]) for e in excinfo.value.errors]


def run(brain, plan_id, key, now, output=None, fail=None):
    """Claim exactly ``key`` (by name) and complete or fail it."""
    got = h.claim(brain, now)
    assert got is not None and got[0]["key"] == key, got and got[0]["key"]
    h.do(brain, plan_id, key, "start", now)
    if fail:
        h.do(brain, plan_id, key, "fail", now, error_type="bad_input", message=fail,
             retryable=False)  # fmt: skip
    else:
        h.do(brain, plan_id, key, "complete", now, output=output or {"text": f"out-{key}"})


# ---- expansion ----------------------------------------------------------------------


def test_items_expand_into_keys_with_renamed_templates_deps_and_values():
    plan, _ = expand([
        {"id": "prep", "type": "noop"},
        group({"items": ["talks/x.mp4", "plain words", {"path": "y.pdf", "lang": "de"}]},
              depends_on=["prep"]),
        {"id": "report", "type": "noop", "depends_on": ["g"],
         "payload": {"echo": "{{ tasks.g.output }}"}},
    ])  # fmt: skip
    by_id = {spec.id: spec for spec in plan.tasks}
    assert sorted(k for k in by_id if k.startswith("g__")) == [
        "g__0__a", "g__0__b", "g__1__a", "g__1__b", "g__2__a", "g__2__b",
    ]  # fmt: skip
    assert by_id["g__1__b"].depends_on == ["g__1__a", "prep"]
    assert by_id["g__1__a"].depends_on == ["prep"]
    assert by_id["g__1__b"].payload["echo"] == "got {{ tasks.g__1__a.output }}"
    assert by_id["g__0__a"].payload["echo"] == "talks/x.mp4"
    assert by_id["g__1__a"].payload["echo"] == "plain words"
    assert by_id["g__2__a"].payload["echo"] == "y.pdf"
    assert by_id["g"].type == "group" and by_id["g"].depends_on == ["prep"]
    assert by_id["g"].payload["items"][2] == {"path": "y.pdf", "lang": "de", "index": 2}
    assert plan.members["g__2__b"] == ("g", 2) and "g" not in plan.members
    # one fix per template task, not one per item
    assert [f["task"] for f in plan.fixes].count("g") == 2


def test_item_fields_and_unknown_field():
    template = [{"id": "a", "type": "noop", "payload": {
        "echo": "{{ item.stem }}|{{ item.suffix }}|{{ item.dir }}|{{ item.name }}|{{ item.index }}"
    }}]  # fmt: skip
    plan, _ = expand([group({"items": ["in/sub/talk.one.mp4"]}, template)])
    assert plan.tasks[0].payload["echo"] == "talk.one|.mp4|in/sub|talk.one.mp4|0"
    bad = [{"id": "a", "type": "noop", "payload": {"echo": "{{ item.nope }}"}}]
    with pytest.raises(PlanInvalid) as excinfo:
        expand([group({"items": ["x"]}, bad)])
    ((task, _, message),) = errors_of(excinfo)
    assert task == "g" and "no field 'nope'" in message


def test_glob_on_the_data_volume_sorted_files_only_no_escape(tmp_path):
    data = tmp_path / "data"
    (data / "in" / "sub.mp4").mkdir(parents=True)  # a folder that matches: skipped
    for name in ("b.mp4", "a.mp4", "c.txt"):
        (data / "in" / name).write_text("x")
    outside = tmp_path / "secret.mp4"
    outside.write_text("x")
    (data / "in" / "z.mp4").symlink_to(outside)  # leaves the volume: skipped
    plan, _ = expand([group({"glob": "in/*.mp4"})], data)
    items = next(s for s in plan.tasks if s.id == "g").payload["items"]
    assert [i["path"] for i in items] == ["in/a.mp4", "in/b.mp4"]
    assert items[1] == {"path": "in/b.mp4", "name": "b.mp4", "stem": "b", "suffix": ".mp4",
                        "dir": "in", "index": 1}  # fmt: skip
    for pattern in ("../*", "/etc/*"):
        with pytest.raises(PlanInvalid) as excinfo:
            expand([group({"glob": pattern})], data)
        assert errors_of(excinfo)[0][0] == "g"


def test_no_match_and_too_many_are_422_naming_the_group_and_count(tmp_path):
    (tmp_path / "in").mkdir()
    with pytest.raises(PlanInvalid) as excinfo:
        expand([group({"glob": "in/*.wav"})], tmp_path)
    ((task, where, message),) = errors_of(excinfo)
    assert (task, where) == ("g", "for_each.glob") and "matched nothing" in message
    assert not excinfo.value.too_large
    # the plan's task x, the group's row and 50 x 2 item tasks: 102
    with pytest.raises(PlanInvalid) as excinfo:
        expand([{"id": "x", "type": "noop"}, group({"items": list(range(50))})], plan_max=101)
    ((task, _, message),) = errors_of(excinfo)
    assert task == "g" and "50 items x 2 tasks = 100 tasks" in message
    assert "the limit of 101 (AIRIG_PLAN_MAX_TASKS)" in message
    expand([{"id": "x", "type": "noop"}, group({"items": list(range(50))})], plan_max=102)
    # the body's own count stays BRAIN_MAX_TASKS's (413)
    with pytest.raises(PlanInvalid) as excinfo:
        validate_with_fanout(
            {"tasks": [group({"items": ["x"]}), {"id": "y", "type": "noop"}]}, Limits(1), None
        )
    assert excinfo.value.too_large


def test_errors_of_items_are_reported_once_per_template_task():
    bad = [{"id": "a", "type": "noop", "payload": {"sleep_s": "{{ item }}"}}]
    with pytest.raises(PlanInvalid) as excinfo:
        expand([group({"items": [f"x{i}" for i in range(300)]}, bad)])
    errors = errors_of(excinfo)
    assert len(errors) == 1
    task, where, message = errors[0]
    assert task == "g" and where.startswith("tasks.a.payload") and "295 more" in message


def test_keys_too_long_are_refused_naming_the_group():
    long_id = "t" * 59  # g__0__ + 59 = 65
    with pytest.raises(PlanInvalid) as excinfo:
        expand([{"id": "g", "for_each": {"items": ["x"]},
                 "tasks": [{"id": long_id, "type": "noop"}]}])  # fmt: skip
    assert errors_of(excinfo)[0][0] == "g" and "64" in errors_of(excinfo)[0][2]
    # fits for items 0..9 (64 characters), not for item 10
    ok = "t" * 58
    expand([{"id": "g", "for_each": {"items": list(range(10))},
             "tasks": [{"id": ok, "type": "noop"}]}])  # fmt: skip
    with pytest.raises(PlanInvalid) as excinfo:
        expand([{"id": "g", "for_each": {"items": list(range(11))},
                 "tasks": [{"id": ok, "type": "noop"}]}])  # fmt: skip
    assert errors_of(excinfo)[0][0] == "g"


def test_template_outside_dependency_must_be_the_groups():
    template = [{"id": "a", "type": "noop", "depends_on": ["other"]}]
    with pytest.raises(PlanInvalid) as excinfo:
        expand([{"id": "other", "type": "noop"}, group({"items": ["x"]}, template)])
    assert errors_of(excinfo)[0][:2] == ("g", "tasks.a.depends_on")
    plan, _ = expand([{"id": "other", "type": "noop"},
                      group({"items": ["x"]}, template, depends_on=["other"])])  # fmt: skip
    assert {s.id: s for s in plan.tasks}["g__0__a"].depends_on == ["other"]


def test_items_holding_templates_are_refused():
    with pytest.raises(PlanInvalid) as excinfo:
        expand([{"id": "s", "type": "noop"},
                group({"items": ["{{ tasks.s.output }}"]}, depends_on=["s"])])  # fmt: skip
    assert errors_of(excinfo)[0][0] == "g" and "template" in errors_of(excinfo)[0][2]


# ---- shell safety -------------------------------------------------------------------


def test_shell_command_gets_item_values_only_as_quoted_variables():
    name = "evil; rm -rf ~ $(id) `x` 'q\".mp4"
    template = [{"id": "s", "type": "shell", "payload": {
        "command": "ffprobe {{ item.path }} > 'out {{ item.stem }}.txt'",
        "env": {"WHERE": "{{ item.dir }}"}, "cwd": "{{ item.dir }}",
    }}]  # fmt: skip
    plan, _ = expand([group({"items": [f"in/{name}"]}, template)])
    payload = plan.tasks[0].payload
    assert name not in payload["command"]
    assert payload["command"] == (
        """ffprobe "${AIRIG_ITEM_PATH}" > 'out '"${AIRIG_ITEM_STEM}"'.txt'"""
    )
    assert payload["env"] == {"WHERE": "in", "AIRIG_ITEM_PATH": f"in/{name}",
                              "AIRIG_ITEM_STEM": name.removesuffix(".mp4")}  # fmt: skip
    assert payload["cwd"] == "in"
    listed = [{"id": "s", "type": "shell", "payload": {"command": ["wc", "-c", "{{ item }}"]}}]
    plan, _ = expand([group({"items": [f"in/{name}"]}, listed)])
    command = plan.tasks[0].payload["command"]
    assert command[:2] == ["/bin/sh", "-c"] and name not in " ".join(command)
    assert "${AIRIG_ITEM}" in command[2]


def test_item_variables_and_upstream_inputs_together():
    template = [{"id": "s", "type": "shell", "depends_on": ["up"], "payload": {
        "command": "cat {{ item }} {{ tasks.up.output }}"}}]  # fmt: skip
    plan, _ = expand([{"id": "up", "type": "noop"},
                      group({"items": ["a b.txt"]}, template, depends_on=["up"])])  # fmt: skip
    spec = {s.id: s for s in plan.tasks}["g__0__s"]
    rendered = shell_substitute(spec.payload, {("up", ""): "x; rm -rf /"})
    assert rendered["command"] == 'cat "${AIRIG_ITEM}" "${AIRIG_INPUT_1}"'
    assert rendered["inputs"] == {"AIRIG_INPUT_1": "x; rm -rf /"}
    assert rendered["env"]["AIRIG_ITEM"] == "a b.txt"


# ---- taint per item -----------------------------------------------------------------


def test_taint_and_refusal_apply_per_item_task():
    template = [
        {"id": "read", "type": "llm", "model": "m", "depends_on": [],
         "payload": {"prompt": "{{ item }} {{ tasks.web.output }}"}},
    ]  # fmt: skip
    plan, tainted = expand([
        {"id": "web", "type": "noop", "trust": "untrusted"},
        group({"items": ["a", "b"]}, template, depends_on=["web"]),
        {"id": "after", "type": "noop", "depends_on": ["g"],
         "payload": {"echo": "{{ tasks.g.output }}"}},
    ])  # fmt: skip
    assert {"g__0__read", "g__1__read", "g", "after"} <= tainted
    shell = [{"id": "s", "type": "shell", "payload": {"command": "echo {{ tasks.web.output }}"}}]
    with pytest.raises(PlanInvalid) as excinfo:
        expand([{"id": "web", "type": "noop", "trust": "untrusted"},
                group({"items": ["a", "b"]}, shell, depends_on=["web"])])  # fmt: skip
    assert errors_of(excinfo) == [
        ("g", "tasks.s.trust", "a shell task never runs tainted input (it reads {'web'}) "
         "(items 0, 1)")]  # fmt: skip


# ---- running a group ----------------------------------------------------------------


def test_a_group_is_never_claimed_and_ends_succeeded_when_all_items_do(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, [group({"items": ["x", "y"]}),
                             {"id": "report", "type": "noop", "depends_on": ["g"],
                              "payload": {"echo": "{{ tasks.g.output }}"}}])  # fmt: skip
    assert h.state_of(brain, plan_id)["g"] == "PENDING"
    for i, key in enumerate(["g__0__a", "g__1__a", "g__0__b", "g__1__b"]):
        run(brain, plan_id, key, 1001 + i)
        assert h.state_of(brain, plan_id)["g"] == ("SUCCEEDED" if i == 3 else "PENDING")
    row = h.row(brain, plan_id, "g")
    assert row["reason"] == "2 of 2 items succeeded"
    got = h.claim(brain, 1010)
    assert got[0]["key"] == "report"
    output = json.loads(got[1]["echo"])
    assert output["total"] == 2 and output["succeeded"] == 2 and output["failed"] == 0
    assert output["items"][1] == {"index": 1, "item": {"value": "y", "index": 1},
                                  "state": "succeeded", "output": {"text": "out-g__1__b"},
                                  "error": None}  # fmt: skip
    assert h.claim(brain, 1011) is None  # nothing else, the group least of all


def test_a_failing_item_does_not_stop_others_and_the_plan_is_partial(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        body = {"name": "p", "tasks": [
            group({"items": ["x", "y"]}),
            {"id": "report", "type": "noop", "depends_on": ["g"]},
        ]}  # fmt: skip
        answer = client.post("/v1/plans", headers=ADMIN, json=body)
        assert answer.status_code == 201, answer.text
        plan_id = answer.json()["id"]
        brain = client.app.state.brain
        run(brain, plan_id, "g__0__a", 1001, fail="broken input")
        assert h.state_of(brain, plan_id)["g__0__b"] == "UPSTREAM_FAILED"
        assert h.state_of(brain, plan_id)["g"] == "PENDING"
        view = client.get(f"/v1/plans/{plan_id}", headers=ADMIN).json()
        (fan,) = view["fanouts"]
        assert (fan["id"], fan["total"], fan["failed"], fan["pending"]) == ("g", 2, 1, 1)
        assert fan["items"][0]["state"] == "failed" and fan["items"][0]["label"] == "x"
        assert "broken input" in fan["items"][0]["error"]
        assert view["status"] == "running"
        run(brain, plan_id, "g__1__a", 1002)
        view = client.get(f"/v1/plans/{plan_id}", headers=ADMIN).json()
        assert view["fanouts"][0]["running"] == 1
        run(brain, plan_id, "g__1__b", 1003)
        run(brain, plan_id, "report", 1004)
        view = client.get(f"/v1/plans/{plan_id}", headers=ADMIN).json()
        assert view["status"] == "partial"
        assert view["fanouts"][0]["done"] == 1 and view["fanouts"][0]["failed"] == 1
        listed = client.get("/v1/plans", headers=ADMIN).json()["plans"]
        assert listed[0]["status"] == "partial"
        result = client.get(f"/v1/plans/{plan_id}/tasks/g/result", headers=ADMIN).json()
        assert [i["state"] for i in result["output"]["items"]] == ["failed", "succeeded"]
        assert result["output"]["items"][0]["output"] is None


def test_a_group_with_no_item_succeeding_fails_and_its_dependents_too(tmp_path):
    brain = h.make_brain(tmp_path)
    one = [{"id": "a", "type": "noop"}]
    plan_id = submit(brain, [group({"items": ["x", "y"]}, one),
                             {"id": "report", "type": "noop", "depends_on": ["g"]}])  # fmt: skip
    run(brain, plan_id, "g__0__a", 1001, fail="no")
    run(brain, plan_id, "g__1__a", 1002, fail="no")
    states = h.state_of(brain, plan_id)
    assert states["g"] == "FAILED" and states["report"] == "UPSTREAM_FAILED"
    assert "none of the 2 items of group g succeeded" in h.row(brain, plan_id, "g")["error"]
    with brain.db.read() as conn:
        assert not fanout.only_items_failed(conn, plan_id)


def test_upstream_failure_of_a_group_and_cancel(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, [{"id": "prep", "type": "noop"},
                             group({"items": ["x"]}, depends_on=["prep"]),
                             {"id": "report", "type": "noop", "depends_on": ["g"]}])  # fmt: skip
    run(brain, plan_id, "prep", 1001, fail="no")
    states = h.state_of(brain, plan_id)
    assert {states[k] for k in ("g", "g__0__a", "g__0__b", "report")} == {"UPSTREAM_FAILED"}
    plan_id = submit(brain, [group({"items": ["x", "y"]})])
    brain.write(lambda conn, outbox, now: h.leases.states.cancel_plan(conn, outbox, plan_id, 1002))
    assert set(h.state_of(brain, plan_id).values()) == {"CANCELLED"}


# ---- from ---------------------------------------------------------------------------


def from_plan(template=None, **source):
    return [
        {"id": "find", "type": "noop", **source},
        group({"from": "{{ tasks.find.output.files }}"}, template),
        {"id": "report", "type": "noop", "depends_on": ["g"],
         "payload": {"echo": "{{ tasks.g.output.total }}"}},
    ]  # fmt: skip


def test_from_expands_when_the_source_succeeds(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, from_plan())
    assert h.row(brain, plan_id, "g")["payload_json"]
    assert set(h.state_of(brain, plan_id)) == {"find", "g", "report"}  # nothing expanded yet
    run(brain, plan_id, "find", 1001, output={"files": ["in/a.wav", "in/b c.wav"]})
    states = h.state_of(brain, plan_id)
    assert states["g__0__a"] == "READY" and states["g__1__b"] == "PENDING"
    assert json.loads(h.row(brain, plan_id, "g__1__a")["payload_json"])["echo"] == "in/b c.wav"
    assert h.row(brain, plan_id, "g__1__a")["fanout_group"] == "g"
    assert h.row(brain, plan_id, "g__1__a")["fanout_index"] == 1
    assert "tasks_added" in h.events(brain, plan_id)
    for i, key in enumerate(["g__0__a", "g__1__a", "g__0__b", "g__1__b"]):
        run(brain, plan_id, key, 1002 + i)
    got = h.claim(brain, 1010)
    assert got[0]["key"] == "report" and got[1]["echo"] == "2"


def test_from_an_empty_list_succeeds_with_no_items(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, from_plan())
    run(brain, plan_id, "find", 1001, output={"files": []})
    assert h.state_of(brain, plan_id)["g"] == "SUCCEEDED"
    assert h.claim(brain, 1002)[0]["key"] == "report"


@pytest.mark.parametrize(("output", "words"), [
    ({"files": "not json"}, "not a list"),
    ({"other": 1}, "no field 'files'"),
    ({"files": list(range(3000))}, "3000 items x 2 tasks = 6000 tasks"),
])  # fmt: skip
def test_from_a_bad_list_fails_the_group_naming_it(tmp_path, output, words):
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, from_plan())
    run(brain, plan_id, "find", 1001, output=output)
    states = h.state_of(brain, plan_id)
    assert states["find"] == "SUCCEEDED"
    assert states["g"] == "FAILED" and states["report"] == "UPSTREAM_FAILED"
    error = h.row(brain, plan_id, "g")["error"]
    assert error.startswith("group g: {{ tasks.find.output.files }}") and words in error


def test_from_tainted_output_makes_untrusted_items_and_refuses_shell(tmp_path):
    brain = h.make_brain(tmp_path)
    shell = [{"id": "s", "type": "shell", "payload": {"command": "wc -c {{ item }}"}}]
    # a statically untrusted source: refused at submission
    with pytest.raises(PlanInvalid) as excinfo:
        expand(from_plan(shell, trust="untrusted"))
    assert errors_of(excinfo)[0][:2] == ("g", "trust")
    # tainted at run time (it ran untrusted): the group fails, nothing PENDING for ever
    plan_id = submit(brain, from_plan(shell))
    brain.write(
        lambda conn, *_: conn.execute(
            "UPDATE tasks SET trusted = 0 WHERE plan_id = ? AND key = 'find'", (plan_id,)
        )
    )
    run(brain, plan_id, "find", 1001, output={"files": ["a.txt"]})
    states = h.state_of(brain, plan_id)
    assert states["g"] == "FAILED" and states["report"] == "UPSTREAM_FAILED"
    assert "untrusted items" in h.row(brain, plan_id, "g")["error"]
    # other templates: items run untrusted
    plan_id = submit(brain, from_plan())
    brain.write(
        lambda conn, *_: conn.execute(
            "UPDATE tasks SET trusted = 0 WHERE plan_id = ? AND key = 'find'", (plan_id,)
        )
    )
    run(brain, plan_id, "find", 1002, output={"files": ["a.txt"]})
    assert h.row(brain, plan_id, "g__0__a")["trusted"] == 0
    assert h.row(brain, plan_id, "g__0__b")["trusted"] == 0


def test_http_submission_422_names_the_group(tmp_path):
    data = tmp_path / "data"
    (data / "inputs").mkdir(parents=True)
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0, BRAIN_DATA_DIR=str(data))
    yaml_plan = (
        "name: talks\ntasks:\n  - id: talks\n    for_each: {glob: 'inputs/*.mp4'}\n"
        "    tasks:\n      - {id: t, type: noop, payload: {echo: '{{ item.path }}'}}\n"
    )
    with TestClient(create_app(settings)) as client:
        headers = {**ADMIN, "Content-Type": "application/yaml"}
        answer = client.post("/v1/plans", headers=headers, content=yaml_plan)
        assert answer.status_code == 422
        (error,) = answer.json()["detail"]["errors"]
        assert error["task"] == "talks" and "inputs/*.mp4" in error["message"]
        (data / "inputs" / "one.mp4").write_text("x")
        answer = client.post("/v1/plans", headers=headers, content=yaml_plan)
        assert answer.status_code == 201, answer.text
        tasks = {t["id"]: t for t in answer.json()["tasks"]}
        assert tasks["talks"]["type"] == "group" and tasks["talks__0__t"]["group"] == "talks"
        worker = client.post("/v1/workers/register", headers=BOOT,
                             json={"name": "w1", "classes": ["cpu"]}).json()["token"]  # fmt: skip
        got = client.post("/v1/claims", headers={"Authorization": f"Bearer {worker}"},
                          json={"wait_s": 0}).json()  # fmt: skip
        assert got["task_id"] != tasks["talks"]["uid"]
        assert got["payload"]["echo"] == "inputs/one.mp4"


def test_a_group_row_can_never_become_ready(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, [group({"items": ["x"]})])
    group_row = h.row(brain, plan_id, "g")
    with pytest.raises(h.leases.states.InvalidTransition):
        brain.write(lambda conn, outbox, _: h.leases.states.transition(
            conn, outbox, group_row, "READY", 1001, "task_ready"))  # fmt: skip
    assert h.state_of(brain, plan_id)["g"] == "PENDING"


def test_tainted_item_output_taints_the_group_and_its_reader(tmp_path):
    brain = h.make_brain(tmp_path)
    template = [{"id": "a", "type": "noop", "trust": "untrusted"}]
    plan_id = submit(brain, [group({"items": ["x"]}, template),
                             {"id": "report", "type": "llm", "model": "m", "depends_on": ["g"],
                              "payload": {"prompt": "{{ tasks.g.output }}"}}])  # fmt: skip
    run(brain, plan_id, "g__0__a", 1001)
    assert h.row(brain, plan_id, "g")["tainted_output"] == 1
    got = h.claim(brain, 1002, classes=("llm",), models=("m:latest",))
    assert got[0]["key"] == "report" and got[0]["trusted"] == 0


def test_the_openapi_document_publishes_groups(tmp_path):
    settings = h.make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"GroupSpec", "ForEach"} <= set(schemas)
    for_each = schemas["ForEach"]
    assert set(for_each["properties"]) == {"glob", "items", "from", "zim", "mimetype", "path"}
    assert for_each["oneOf"] == [{"required": [s]} for s in ("glob", "items", "from", "zim")]
    assert for_each["dependentRequired"] == {"mimetype": ["zim"], "path": ["zim"]}


def test_markdown_carries_a_group_in_its_bullets():
    from airig.brain.plans.load import load_plan

    body = b"""# Plan: talks

## talks
- for_each: {items: ["in/a.wav", "in/b.wav"]}
- tasks: [{id: t, type: noop, payload: {echo: "{{ item.stem }}"}}]

## report
- type: noop
- depends_on: [talks]
"""
    plan, _, _ = load_plan(body, "text/markdown", Limits())
    by_id = {spec.id: spec for spec in plan.tasks}
    assert by_id["talks"].type == "group" and by_id["report"].depends_on == ["talks"]
    assert [by_id[f"talks__{i}__t"].payload["echo"] for i in (0, 1)] == ["a", "b"]


def test_a_from_template_may_name_fields_known_only_at_run_time(tmp_path):
    template = [{"id": "a", "type": "noop", "payload": {"echo": "{{ item.lang }}:{{ item.url }}"}}]
    brain = h.make_brain(tmp_path)
    plan_id = submit(brain, from_plan(template))
    run(brain, plan_id, "find", 1001, output={"files": [{"lang": "de", "url": "u"}]})
    assert json.loads(h.row(brain, plan_id, "g__0__a")["payload_json"])["echo"] == "de:u"
