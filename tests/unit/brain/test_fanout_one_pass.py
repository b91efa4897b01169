"""A plan with fan-out groups is expanded in one pass, then validated in one (issue 37,
third bullet): taint and sensitivity reach through a chain of groups without the plan
being validated again for each group they turn out to reach."""

from __future__ import annotations

from typing import Any

import pytest

from airig.brain.plans import fanout
from airig.brain.plans.fanout import validate_with_fanout
from airig.brain.plans.validate import Limits, PlanInvalid


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the whole plan went through ``validate_plan``."""
    calls: list[int] = []
    real = fanout.validate_plan

    def counted(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        calls.append(len(data["tasks"]))
        return real(data, *args, **kwargs)

    monkeypatch.setattr(fanout, "validate_plan", counted)
    return calls


def chain(mark: dict[str, Any], reader: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """src (marked) -> group g1 reading it -> group g2 reading g1 -> ``reader`` of g2."""
    tasks: list[dict[str, Any]] = [
        {"id": "src", "type": "noop", "payload": {"echo": "x"}, **mark},
        {"id": "g1", "depends_on": ["src"], "for_each": {"items": [1, 2]},
         "tasks": [{"id": "t", "type": "noop", "payload": {"echo": "{{ tasks.src.output }}"}}]},
        {"id": "g2", "depends_on": ["g1"], "for_each": {"items": [1, 2, 3]},
         "tasks": [{"id": "u", "type": "noop", "payload": {"echo": "{{ tasks.g1.output }}"}}]},
    ]  # fmt: skip
    reader = reader or {"type": "noop", "payload": {"echo": "{{ tasks.g2.output }}"}}
    return [*tasks, {"id": "after", "depends_on": ["g2"], **reader}]


def test_taint_reaches_through_two_groups_in_one_validation(validations):
    plan, tainted = validate_with_fanout(
        {"name": "p", "tasks": chain({"trust": "untrusted"})}, Limits(), None
    )
    assert len(validations) == 1  # it was 3: once more for each group found tainted
    assert {"src", "g1", "g2", "after", "g1__0__t", "g2__2__u"} <= tainted
    rows = {spec.id: spec for spec in plan.tasks}
    assert rows["g1"].trust == rows["g2"].trust == "untrusted" and rows["g2"].type == "group"


def test_sensitivity_reaches_through_two_groups_in_one_validation(validations):
    plan, _ = validate_with_fanout(
        {"name": "p", "tasks": chain({"sensitive": True})}, Limits(), None
    )
    assert len(validations) == 1
    rows = {spec.id: spec for spec in plan.tasks}
    assert all(rows[key].sensitive for key in ("g1", "g2", "after", "g2__1__u"))
    fixed = {(f["task"], f["field"]) for f in plan.fixes if f["field"].endswith("sensitive")}
    # each group's template task once, the reader once; no fix names a group's own row
    assert fixed == {("g1", "tasks.t.sensitive"), ("g2", "tasks.u.sensitive"),
                     ("after", "sensitive")}  # fmt: skip


def test_a_taint_error_past_two_groups_is_reported_with_the_plans_other_errors(validations):
    """Every error at once: a task of an unknown type no longer hides the shell task that
    reads tainted data two groups downstream (the first of three validations raised with
    the unknown type alone)."""
    shell = {"type": "shell", "payload": {"command": ["cat", "{{ tasks.g2.output }}"]}}
    tasks = [*chain({"trust": "untrusted"}, shell), {"id": "odd", "type": "teleport"}]
    with pytest.raises(PlanInvalid) as refused:
        validate_with_fanout({"name": "p", "tasks": tasks}, Limits(), None)
    found = {(e["task"], e["field"]): e["message"] for e in refused.value.errors}
    assert found.keys() == {("odd", "type"), ("after", "trust")}
    assert found["after", "trust"] == "a shell task never runs tainted input (it reads {'g2'})"
    assert len(validations) == 1


def test_a_long_chain_of_groups_is_validated_once(validations):
    """Hostile depth: a chain of groups each reading the last, its source untrusted, is
    one validation, not one per group (the old loop ran up to len(groups) + 1 times)."""
    tasks: list[dict[str, Any]] = [{"id": "g0src", "type": "noop", "trust": "untrusted"}]
    last = "g0src"
    for n in range(1, 40):
        template = {
            "id": "t",
            "type": "noop",
            "payload": {"echo": f"{{{{ tasks.{last}.output }}}}"},
        }
        group = {"id": f"g{n}", "depends_on": [last], "for_each": {"items": [1]}}
        tasks.append({**group, "tasks": [template]})
        last = f"g{n}"
    plan, tainted = validate_with_fanout({"name": "p", "tasks": tasks}, Limits(), None)
    assert len(validations) == 1
    assert {f"g{n}" for n in range(1, 40)} <= tainted
