"""Fan-out items a careless folder or a hostile plan brings (issue 36 §2): globs leave dot
names out (an upload in flight is one), a NUL in an item value is a 422 naming the group
and the item, and a value that reads as a path holds no control character; a ``from``
list holding one fails its group in one line."""

from __future__ import annotations

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.plans.fanout import ItemError, glob_items, item_values, validate_with_fanout
from airig.brain.plans.submit import insert_plan
from airig.brain.plans.validate import Limits, PlanInvalid

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
TEMPLATE = [{"id": "a", "type": "noop", "payload": {"echo": "{{ item }}"}}]


def _files(root, paths):
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"x")


def _found(root, pattern):
    return [i["path"] for i in glob_items(root, pattern, 100)]


# ---- dot names ------------------------------------------------------------------------


def test_a_glob_leaves_dot_files_and_dot_folders_out(tmp_path):
    # .upload-<hex>: the file service's name for an upload in flight (services/infra.py)
    _files(tmp_path, ["in/.a.jpg", "in/.hidden/b.jpg", "in/.IMG.jpg.part", "in/c.jpg",
                      "in/.upload-0123abcd", "in/sub/.d.jpg", "in/sub/e.jpg",
                      "in/.cache/deep/f.jpg"])  # fmt: skip
    assert _found(tmp_path, "in/*") == ["in/c.jpg"]
    assert _found(tmp_path, "in/*.jpg") == ["in/c.jpg"]
    assert _found(tmp_path, "in/*.{jpg,part}") == ["in/c.jpg"]
    assert _found(tmp_path, "in/**/*.jpg") == ["in/c.jpg", "in/sub/e.jpg"]
    assert _found(tmp_path, "in/**/*") == ["in/c.jpg", "in/sub/e.jpg"]
    assert _found(tmp_path, "in/*/*.jpg") == ["in/sub/e.jpg"]
    assert _found(tmp_path, "**/*.jpg") == ["in/c.jpg", "in/sub/e.jpg"]


def test_a_dot_name_the_pattern_writes_itself_is_taken(tmp_path):
    # as a shell's glob: the dot must be in the pattern, not matched by a wildcard
    _files(tmp_path, ["in/.hidden/b.jpg", "in/.a.jpg", "in/c.jpg", "in/.hidden/.g.jpg"])
    assert _found(tmp_path, "in/.hidden/*.jpg") == ["in/.hidden/b.jpg"]
    assert _found(tmp_path, "in/.*.jpg") == ["in/.a.jpg"]
    assert _found(tmp_path, "in/.hidden/.*") == ["in/.hidden/.g.jpg"]


def test_a_folder_of_dot_files_only_matches_nothing_at_submission(tmp_path):
    _files(tmp_path, ["in/.a.jpg", "in/.upload-99", "in/.hidden/b.jpg"])
    group = {"id": "g", "for_each": {"glob": "in/**/*"}, "tasks": TEMPLATE}
    with pytest.raises(PlanInvalid) as excinfo:
        validate_with_fanout({"name": "f", "tasks": [group]}, Limits(), tmp_path)
    ((error),) = excinfo.value.errors
    assert error["task"] == "g" and "matched nothing (0 items)" in error["message"]


# ---- control characters in item values -----------------------------------------------


def _plan(items, template=TEMPLATE):
    return {"name": "p", "tasks": [
        {"id": "first", "type": "noop"},
        {"id": "photos", "for_each": {"items": items}, "tasks": template},
    ]}  # fmt: skip


@pytest.mark.parametrize(("items", "index", "field"), [
    ([{"name": "a\u0000b"}], 0, "name"),
    (["ok", "x\u0000"], 1, "value"),
    ([{"prompt": "a plain sentence\u0000 with a NUL"}], 0, "prompt"),
    (["fine.jpg", "in/a.jpg", {"path": "in/a\u0001b.jpg"}], 2, "path"),
    (["in/a\nb.wav"], 0, "value"),
    (["\u202egpj.exe"], 0, "value"),
    ([{"file": "talks/a\u001b[2Jb.mp4"}], 0, "file"),
])  # fmt: skip
def test_a_control_character_in_an_item_value_is_a_422_naming_group_and_item(
    tmp_path, items, index, field
):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        answer = client.post("/v1/plans", headers=ADMIN, json=_plan(items))
        assert answer.status_code == 422, answer.text
        (error,) = answer.json()["detail"]["errors"]
        assert (error["task"], error["field"]) == ("photos", "for_each.items")
        assert error["message"].startswith(f"item {index} field {field!r} holds the control")
        assert "\u0000" not in answer.text and "\\u0000" not in error["message"]
        # nothing was stored
        assert client.get("/v1/plans", headers=ADMIN).json()["plans"] == []


def test_text_that_is_no_path_keeps_its_newlines_and_tabs():
    # a prompt per item is text: only a NUL is refused there
    values = item_values({"prompt": "Describe this.\nKeep it short.\tThanks", "n": 3}, 0)
    assert values["prompt"].count("\n") == 1
    assert item_values("Describe this.\nThen that", 1)["value"] == "Describe this.\nThen that"
    assert item_values("What is 3/4?\nExplain.", 2)["value"].endswith("Explain.")
    for hostile in ("a.jpg\n", "a\u0085b.png", "dir/a\u2028b", "x\u0000"):
        with pytest.raises(ItemError):
            item_values(hostile, 0)


# ---- from -----------------------------------------------------------------------------


def _submit_from(brain):
    tasks = [
        {"id": "find", "type": "noop"},
        {"id": "g", "for_each": {"from": "{{ tasks.find.output.files }}"}, "tasks": TEMPLATE},
        {"id": "report", "type": "noop", "depends_on": ["g"]},
    ]
    plan, tainted = validate_with_fanout({"name": "f", "tasks": tasks}, Limits(), None)
    return brain.write(
        lambda conn, outbox, _: insert_plan(
            conn, outbox, plan, tainted, 1000.0, submitted_by="test", digest="d",
            idempotency_key=None, default_timeout_s=60.0,
        )
    )  # fmt: skip


@pytest.mark.parametrize("files", [
    ["in/a.wav", "in/b\u0000.wav"],
    ["in/a.wav", {"path": "in/b\u0007.wav", "t": 1}],
])  # fmt: skip
def test_a_from_list_holding_a_control_character_fails_its_group_in_one_line(tmp_path, files):
    brain = h.make_brain(tmp_path)
    plan_id = _submit_from(brain)
    found = h.claim(brain, 1001)
    assert found is not None and found[0]["key"] == "find"
    h.do(brain, plan_id, "find", "start", 1001)
    h.do(brain, plan_id, "find", "complete", 1001, output={"files": files})
    states = h.state_of(brain, plan_id)
    assert states["find"] == "SUCCEEDED"
    assert states["g"] == "FAILED" and states["report"] == "UPSTREAM_FAILED"
    assert not any(key.startswith("g__") for key in states)  # no item task was made
    error = h.row(brain, plan_id, "g")["error"]
    assert error.startswith("group g: {{ tasks.find.output.files }}: item 1 field ")
    assert "holds the control character" in error and "\n" not in error
    assert "\u0000" not in error and "\u0007" not in error
