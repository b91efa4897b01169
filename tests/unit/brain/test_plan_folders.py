"""Paths filled from tainted data stay inside their plan's folder (issue 36 §2, last item).

A write path (a note's ``path``, a frames or pages ``out_dir``) whose text a template
fills names its plan's folder before the template (``outputs/<recipe>/<folder>/``, what
``submit`` writes for ``{{ outputs_dir }}``); an item value (a file name, an ``items``
entry, a worker's ``from`` list) or an upstream output cannot lead it out of that folder:
into another plan's folder, ``index/`` or ``inputs/``. Refused at submission where the
plan shows it (422), else the task (or the ``from`` group) fails in one line naming the
path and the rule."""

from __future__ import annotations

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.planner.grow import GrowthRefused, add_subtasks
from airig.brain.plans.fanout import validate_with_fanout
from airig.brain.plans.submit import insert_plan
from airig.brain.plans.validate import Limits
from airig.common.write_paths import filled_problem, folder_problem

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
FOLDER = "outputs/video-notes/talks"
NOTE = {"path": FOLDER + "/{{ item.stem }}.md", "kind": "pages", "pages": "x"}
RULE = "stays inside its plan's folder"


def _filled(stem: str, template: dict = NOTE, field: str = "path") -> dict:
    return {**template, field: template[field].replace("{{ item.stem }}", stem)}


# ---- the rule, alone -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("stem", "said"),
    [
        ("../../other/x", "leaves its plan's folder outputs/video-notes/talks/"),
        ("a/../../b", "leaves its plan's folder"),
        ("../../../index/search", "leaves its plan's folder"),
        ("../../../inputs/talk", "leaves its plan's folder"),
        ("x\x00y", "control character '\\x00'"),
        ("\u202egpj.exe", "control character '\\u202e'"),
        ("line\nbreak", "control character '\\n'"),
        # look-alikes that read as '..' and '/' once normalised (NFKC)
        ("\uff0e\uff0e\uff0f\uff0e\uff0e\uff0fother", "leaves its plan's folder"),
        ("\u2025\uff0fx", "leaves its plan's folder"),
        ("a\uff3cb", "leaves its plan's folder"),
        ("x" * 256, "longer than a path may be"),
        ("d/" * 600 + "x", "longer than a path may be"),
    ],
    ids=["dotdot-other-plan", "inner-dotdot", "index", "inputs", "nul",
         "bidi", "newline", "fullwidth-dots", "two-dot-leader", "fullwidth-backslash",
         "long-name", "long-path"],
)  # fmt: skip
def test_a_filled_path_leaving_its_folder_is_named_with_the_rule(stem, said):
    problem = filled_problem("note", NOTE, _filled(stem))
    assert problem is not None and said in problem and RULE in problem
    assert problem.startswith("note path '") and "\n" not in problem and "\x00" not in problem
    assert len(problem) < 500  # a very long name is clipped in the message


def test_a_folder_filled_with_dotdot_leaves():
    frames = {"video": "inputs/a.mp4", "out_dir": FOLDER + "/{{ item.stem }}"}
    problem = filled_problem("frames", frames, _filled("..", frames, "out_dir"))
    assert problem is not None and problem.startswith("out_dir '") and "leaves" in problem


@pytest.mark.parametrize(
    ("template", "filled"),
    [
        ("outputs/plan/{{ item.stem }}", "outputs/planx/a"),  # a prefix of the name is no folder
        ("outputs/plan/{{ item.stem }}", "outputs/plan"),
        ("outputs/plan/{{ item.stem }}", "outputs/plan/"),  # a note is a file in the folder
        ("outputs/a/{{ tasks.t.output.n }}", "outputs/b/x"),  # another plan's folder
    ],
)
def test_the_folder_is_compared_part_by_part(template, filled):
    problem = filled_problem("note", {"path": template}, {"path": filled})
    assert problem is not None and "is not inside its plan's folder" in problem


@pytest.mark.parametrize(
    "stem", ["clip", "Vortrag über Kafka", "写真 1", "sub/clip", "a..b", ".x", "/abs", "c\u0301"]
)
def test_a_filled_path_inside_its_folder_passes(stem):
    assert filled_problem("note", NOTE, _filled(stem)) is None
    frames = {"video": "inputs/a.mp4", "out_dir": FOLDER + "/{{ item.stem }}"}
    assert filled_problem("frames", frames, _filled(stem, frames, "out_dir")) is None


def test_a_folder_may_be_its_plans_folder_itself_and_literal_paths_are_not_held():
    pages = {"pdf": "in/a.pdf", "out_dir": "outputs/p/{{ item.stem }}"}
    assert filled_problem("pages", pages, {**pages, "out_dir": "outputs/p/"}) is None
    literal = {"path": "outputs/talk.md", "kind": "pages"}
    assert filled_problem("note", literal, literal) is None
    assert folder_problem("note", literal) is None
    assert filled_problem("llm", {"prompt": "{{ x }}"}, {"prompt": "../../x"}) is None


@pytest.mark.parametrize(
    "path",
    [
        "outputs/{{ item.stem }}.md",  # outputs/ itself: every plan's folder is a name away
        "{{ tasks.a.output.text }}",
        "{{ outputs_dir }}/{{ item.stem }}.md",  # sent without `submit` filling it
        "notes/{{ item.stem }}.md",
        "index/{{ item.stem }}",
        "/data/outputs/p/{{ item.stem }}.md",
        "outputs/../outputs/p/{{ item.stem }}.md",
        "outputs/p{{ item.stem }}.md",
    ],
)
def test_a_template_naming_no_plan_folder_can_never_fit(path):
    field, why = folder_problem("note", {"path": path}) or ("", "")
    assert field == "path" and "names no folder of its plan" in why and RULE in why


# ---- at submission -------------------------------------------------------------------


def _post(tmp_path, plan):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        answer = client.post("/v1/plans", headers=ADMIN, json=plan)
        stored = client.get("/v1/plans", headers=ADMIN).json()["plans"]
    return answer, stored


def _group(items, path=FOLDER + "/{{ item }}.md"):
    return {"name": "p", "tasks": [{"id": "g", "for_each": {"items": items}, "tasks": [
        {"id": "n", "type": "note", "payload": {"path": path, "kind": "pages", "pages": "x"}},
    ]}]}  # fmt: skip


@pytest.mark.parametrize(
    "item", ["../../other/talk", "../../../index/search", {"name": "../x"}, "\uff0e\uff0e/x"]
)
def test_an_item_leading_out_of_the_folder_is_a_422_naming_group_item_and_path(tmp_path, item):
    plan = _group(["fine", item], FOLDER + ("/{{ item.name }}.md" if isinstance(item, dict)
                                            else "/{{ item }}.md"))  # fmt: skip
    if isinstance(item, dict):
        plan["tasks"][0]["for_each"]["items"][0] = {"name": "fine"}
    answer, stored = _post(tmp_path, plan)
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]["errors"]
    assert error["task"] == "g" and error["message"].startswith("item 1: note path '")
    assert RULE in error["message"] and FOLDER + "/" in error["message"]
    assert stored == []


@pytest.mark.parametrize(
    ("tasks", "task"),
    [
        ([{"id": "n", "type": "note", "payload": {
            "path": "{{ tasks.a.output.text }}", "kind": "pages", "pages": "x"},
            "depends_on": ["a"]}], "n"),
        ([{"id": "f", "type": "frames", "payload": {
            "video": "in/a.mp4", "out_dir": "outputs/{{ tasks.a.output.text }}"},
            "depends_on": ["a"]}], "f"),
    ],
    ids=["note-whole-path", "frames-in-outputs-itself"],
)  # fmt: skip
def test_a_plan_whose_path_template_can_never_fit_is_a_422(tmp_path, tasks, task):
    answer, stored = _post(tmp_path, {"name": "p", "tasks": [{"id": "a", "type": "noop"}, *tasks]})
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]["errors"]
    assert error["task"] == task and error["field"] in ("payload.path", "payload.out_dir")
    assert "names no folder of its plan" in error["message"]
    assert stored == []


def test_a_group_template_naming_no_folder_is_a_422(tmp_path):
    answer, _ = _post(tmp_path, _group(["a", "b"], "outputs/{{ item }}.md"))
    assert answer.status_code == 422, answer.text
    assert "names no folder of its plan" in answer.text


def test_the_recipes_layout_is_accepted(tmp_path):
    answer, stored = _post(tmp_path, _group(["talk-1", "Vortrag über Kafka"]))
    assert answer.status_code in (200, 201), answer.text
    assert len(stored) == 1


# ---- a worker's output: a from list, and a template filled at the claim ------------


def _store(brain, tasks):
    plan, tainted = validate_with_fanout({"name": "p", "tasks": tasks}, Limits(), None)
    return brain.write(
        lambda conn, outbox, _: insert_plan(
            conn, outbox, plan, tainted, 1000.0, submitted_by="test", digest="d",
            idempotency_key=None, default_timeout_s=60.0,
        )
    )  # fmt: skip


def _finish(brain, plan_id, key, output):
    found = h.claim(brain, 1001)
    assert found is not None and found[0]["key"] == key
    h.do(brain, plan_id, key, "start", 1001)
    h.do(brain, plan_id, key, "complete", 1001, output=output)


def test_a_from_list_naming_another_plans_folder_fails_its_group_in_one_line(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = _store(brain, [
        {"id": "find", "type": "noop"},
        {"id": "g", "for_each": {"from": "{{ tasks.find.output.files }}"}, "tasks": [
            {"id": "n", "type": "note", "payload": {
                "path": FOLDER + "/{{ item.stem }}.md", "kind": "pages", "pages": "x"}},
        ]},
    ])  # fmt: skip
    _finish(brain, plan_id, "find", {"files": [{"stem": "ok"}, {"stem": "../../other/x"}]})
    states = h.state_of(brain, plan_id)
    assert states["g"] == "FAILED" and not any(k.startswith("g__") for k in states)
    error = h.row(brain, plan_id, "g")["error"]
    assert "item 1: note path 'outputs/video-notes/talks/../../other/x.md' leaves" in error
    assert RULE in error and "\n" not in error


def _claim_time_plan(brain):
    return _store(brain, [
        {"id": "name", "type": "noop"},
        {"id": "n", "type": "note", "depends_on": ["name"], "payload": {
            "path": FOLDER + "/{{ tasks.name.output.stem }}.md", "kind": "pages", "pages": "x"}},
    ])  # fmt: skip


@pytest.mark.parametrize(
    "stem", ["../../other/talk", "../../../index/search", "\uff0e\uff0e\uff0f\uff0e\uff0e\uff0fx"]
)
def test_an_upstream_output_leading_out_fails_the_task_for_good_at_the_claim(tmp_path, stem):
    brain = h.make_brain(tmp_path)
    plan_id = _claim_time_plan(brain)
    _finish(brain, plan_id, "name", {"stem": stem})
    assert h.claim(brain, 1002) is None  # the note is never handed to a worker
    note = h.row(brain, plan_id, "n")
    assert note["state"] == "FAILED"
    assert note["error_type"] == "template_error"
    assert note["error"].startswith("note path 'outputs/video-notes/talks/")
    assert RULE in note["error"] and "\n" not in note["error"]


def test_an_upstream_output_inside_the_folder_is_handed_over(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = _claim_time_plan(brain)
    _finish(brain, plan_id, "name", {"stem": "sub/talk"})
    found = h.claim(brain, 1002)
    assert found is not None and found[0]["key"] == "n"
    assert found[1]["path"] == FOLDER + "/sub/talk.md"


# ---- tasks a model proposes ----------------------------------------------------------


def _grow(brain, plan_id, proposed):
    def change(conn, outbox, _):
        parent = conn.execute(
            "SELECT * FROM tasks WHERE plan_id = ? AND key = 'p'", (plan_id,)
        ).fetchone()
        return add_subtasks(conn, outbox, brain.settings, parent, proposed, "plan", 1001.0, False)

    return brain.write(change)


def _note(path):
    return {"id": "n", "type": "note", "payload": {"path": path, "kind": "pages", "pages": "x"}}


@pytest.mark.parametrize(
    "path",
    [
        "outputs/other/x.md",  # another plan's folder
        "outputs/{plan}x/y.md",  # a name the plan's id is a prefix of
        "outputs/x.md",
        "outputs/other/{{{{ tasks.p.output.text }}}}.md",
        "outputs/\uff0e\uff0e\uff0fother/x.md",  # stays a name: but outside outputs/<plan>/
    ],
)
def test_a_task_a_model_proposes_writes_inside_its_plans_own_folder(tmp_path, path):
    brain = h.make_brain(tmp_path)
    plan_id = h.submit(brain, [h.noop("p")])
    with pytest.raises(GrowthRefused) as caught:
        _grow(brain, plan_id, [_note(path.format(plan=plan_id))])
    said = f"is not inside outputs/{plan_id}/, its plan's folder"
    assert any(
        (e["task"], e["field"]) == ("n", "payload.path") and said in e["message"]
        for e in caught.value.errors
    ), caught.value.errors
    assert set(h.state_of(brain, plan_id)) == {"p"}  # nothing was added


def test_a_proposed_frames_task_names_its_out_dir(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = h.submit(brain, [h.noop("p")])
    frames = {"id": "f", "type": "frames", "payload": {"video": "inputs/a.mp4"}}
    with pytest.raises(GrowthRefused) as caught:
        _grow(brain, plan_id, [frames])
    assert f"give out_dir inside outputs/{plan_id}/" in caught.value.errors[0]["message"]


def test_a_proposed_task_inside_its_plans_folder_is_added(tmp_path):
    brain = h.make_brain(tmp_path)
    plan_id = h.submit(brain, [h.noop("p")])
    out_dir = f"outputs/{plan_id}/frames"
    frames = {"id": "f", "type": "frames", "payload": {"video": "inputs/a.mp4", "out_dir": out_dir}}
    uids = _grow(brain, plan_id, [_note(f"outputs/{plan_id}/notes/x.md"), frames])
    assert len(uids) == 2
