"""add_subtasks: a running plan grows by validated, namespaced tasks, within its caps."""

from __future__ import annotations

import json

import pytest

from airig.brain.planner.grow import GrowthRefused, add_subtasks, subtask_key
from tests.unit.brain_helpers import make_brain, noop, row, state_of, submit

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store


def grow(brain, plan_id, parent_key, proposed, origin="plan", tainted=False, now=1001.0):
    def change(conn, outbox, _):
        parent = conn.execute(
            "SELECT * FROM tasks WHERE plan_id = ? AND key = ?", (plan_id, parent_key)
        ).fetchone()
        return add_subtasks(
            conn, outbox, brain.settings, parent, proposed, origin, now, tainted
        ), list(outbox.events)

    return brain.write(change)


def deps_of(brain, plan_id, key):
    with brain.db.read() as conn:
        rows = conn.execute(
            """SELECT u.key FROM deps d JOIN tasks t ON t.id = d.task_id
               JOIN tasks u ON u.id = d.depends_on WHERE t.plan_id = ? AND t.key = ?""",
            (plan_id, key),
        )
        return sorted(r["key"] for r in rows)


def errors_of(excinfo):
    return [(e["task"], e["field"], e["message"]) for e in excinfo.value.errors]


def test_namespaced_with_deps_templates_origin_and_event(tmp_path):
    brain = make_brain(tmp_path)
    plan_id = submit(brain, [noop("root"), noop("p", ["root"]), noop("after", ["p"])])
    proposed = [
        noop("a"),
        noop("b", ["a", "root"], payload={"echo": "{{ tasks.a.output }} {{ tasks.root.output }}"}),
    ]
    uids, events = grow(brain, plan_id, "p", proposed)
    assert len(uids) == 2
    a, b = subtask_key("p", "a"), subtask_key("p", "b")
    assert a == "p__a"
    states = state_of(brain, plan_id)
    assert states[a] == "READY" and states[b] == "PENDING"
    assert deps_of(brain, plan_id, b) == [a, "root"]
    assert json.loads(row(brain, plan_id, b)["payload_json"])["echo"] == (
        "{{ tasks.p__a.output }} {{ tasks.root.output }}"
    )
    assert row(brain, plan_id, b)["origin"] == "plan:p" and row(brain, plan_id, b)["depth"] == 1
    # the parent's dependent now waits for the new leaf (b), not only for the parent
    assert deps_of(brain, plan_id, "after") == ["p", b]
    kinds = [json.loads(line)["event_type"] for line in events]
    assert kinds == ["tasks_added", "task_submitted", "task_submitted"]
    added = json.loads(events[0])
    assert added["origin"] == "plan:p" and added["added"] == [a, b]


def test_validator_errors_name_the_proposed_ids_and_insert_nothing(tmp_path):
    brain = make_brain(tmp_path)
    plan_id = submit(brain, [noop("p")])
    proposed = [
        {"id": "x", "type": "nope"},
        noop("y", ["ghost"]),
        {"id": "z", "type": "llm", "payload": {"model": "m"}},
        noop("c1", ["c2"]),
        noop("c2", ["c1"]),
    ]
    with pytest.raises(GrowthRefused) as excinfo:
        grow(brain, plan_id, "p", proposed)
    found = errors_of(excinfo)
    assert any(t == "x" and f == "type" and "unknown type" in m for t, f, m in found)
    assert any(t == "y" and "unknown task 'ghost'" in m for t, f, m in found)
    assert any(t == "z" and f.startswith("payload") for t, f, m in found)
    assert any("dependency cycle" in m for _, _, m in found)
    assert "y.depends_on" in str(excinfo.value)
    assert set(state_of(brain, plan_id)) == {"p"}


def test_shell_refused_from_outside_or_tainted_but_allowed_from_a_trusted_plan(tmp_path):
    brain = make_brain(tmp_path)
    plan_id = submit(brain, [noop("p"), noop("q")])
    shell = [{"id": "s", "type": "shell", "payload": {"command": "true"}}]
    with pytest.raises(GrowthRefused) as external:
        grow(brain, plan_id, "p", shell, origin="external")
    assert any(
        t == "s" and "external tier cannot add shell" in m for t, _, m in errors_of(external)
    )
    with pytest.raises(GrowthRefused) as tainted:
        grow(brain, plan_id, "p", shell, tainted=True)
    assert any(t == "s" and "never runs tainted input" in m for t, _, m in errors_of(tainted))
    grow(brain, plan_id, "q", shell)
    assert row(brain, plan_id, "q__s")["trusted"] == 1


def test_tainted_or_external_tasks_are_stored_untrusted(tmp_path):
    brain = make_brain(tmp_path)
    plan_id = submit(brain, [noop("p")])
    grow(brain, plan_id, "p", [noop("a")], origin="external")
    stored = row(brain, plan_id, "p__a")
    assert stored["trusted"] == 0 and stored["origin"] == "external:p"


def test_caps_on_tasks_and_depth(tmp_path):
    brain = make_brain(tmp_path, AIRIG_PLAN_MAX_TASKS=4, AIRIG_PLAN_MAX_DEPTH=2)
    plan_id = submit(brain, [noop("p")])
    with pytest.raises(GrowthRefused) as too_many:
        grow(brain, plan_id, "p", [noop(f"t{i}") for i in range(4)])
    assert "AIRIG_PLAN_MAX_TASKS" in str(too_many.value)
    grow(brain, plan_id, "p", [noop("d1")])  # depth 1
    grow(brain, plan_id, "p__d1", [noop("d2")])  # depth 2
    assert row(brain, plan_id, "p__d1__d2")["depth"] == 2
    with pytest.raises(GrowthRefused) as too_deep:
        grow(brain, plan_id, "p__d1__d2", [noop("d3")])
    assert "AIRIG_PLAN_MAX_DEPTH" in str(too_deep.value)
    assert len(state_of(brain, plan_id)) == 3


def test_no_dependency_on_the_parents_downstream_or_a_dead_task(tmp_path):
    brain = make_brain(tmp_path)
    plan_id = submit(brain, [noop("p"), noop("after", ["p"]), noop("gone")])
    brain.write(
        lambda conn, _o, _n: conn.execute(
            "UPDATE tasks SET state = 'FAILED' WHERE plan_id = ? AND key = 'gone'", (plan_id,)
        )
    )
    with pytest.raises(GrowthRefused) as excinfo:
        grow(brain, plan_id, "p", [noop("a", ["after"]), noop("b", ["gone"])])
    found = errors_of(excinfo)
    assert any(t == "a" and "waits for 'p'" in m for t, _, m in found)
    assert any(t == "b" and "FAILED" in m for t, _, m in found)


def test_a_key_too_long_or_already_taken_is_refused(tmp_path):
    brain = make_brain(tmp_path)
    plan_id = submit(brain, [noop("p"), noop("p__a")])
    with pytest.raises(GrowthRefused) as excinfo:
        grow(brain, plan_id, "p", [noop("a"), noop("x" * 63)])
    found = errors_of(excinfo)
    assert any(t == "a" and "already has a task" in m for t, _, m in found)
    assert any(t == "x" * 63 and "longer than 64" in m for t, _, m in found)


def test_sensitive_parent_makes_sensitive_subtasks_and_empty_adds_nothing(tmp_path):
    brain = make_brain(tmp_path)
    plan_id = submit(brain, [noop("p", sensitive=True)])
    assert grow(brain, plan_id, "p", [])[0] == []
    grow(brain, plan_id, "p", [noop("a")])
    assert row(brain, plan_id, "p__a")["sensitive"] == 1


@pytest.mark.parametrize("name", ["a\x00", "\ud800", "x\udfff"])
def test_a_proposed_name_no_task_can_have_is_refused_not_a_store_error(tmp_path, name):
    """A model's answer may escape a NUL or a lone surrogate in JSON: as an id or as a
    dependency it names no task, and is refused as one, on either engine (PostgreSQL's
    jsonb refused the whole lookup for it, failing the completion)."""
    brain = make_brain(tmp_path)
    plan_id = submit(brain, [noop("p"), noop("q")])
    with pytest.raises(GrowthRefused) as as_dep:
        grow(brain, plan_id, "p", [noop("y", [name, "q"])])
    assert errors_of(as_dep) == [("y", "depends_on", f"unknown task {name!r}")]
    with pytest.raises(GrowthRefused) as as_id:
        grow(brain, plan_id, "p", [noop(name)])
    assert [(task, field) for task, field, _ in errors_of(as_id)] == [(name, "id")]
    assert set(state_of(brain, plan_id)) == {"p", "q"}
    uids, _ = grow(brain, plan_id, "p", [noop("y", ["q"])])  # the store still takes a good one
    assert len(uids) == 1
