"""What the brain does with a type's tasks is the table's ``brain_hooks``, run in order by
``leases.claim`` / ``complete`` / ``fail`` (``airig/brain/reactions.py``, issue 37): a
type gains or loses a reaction by its entry, never by a name written in leases.py."""

from __future__ import annotations

import dataclasses
import json

import brain_helpers as h
import pytest

from airig.brain import leases, reactions
from airig.brain.store import states
from airig.common import task_types
from airig.common.protocol import CompleteRequest, FailRequest
from airig.common.protocol import TaskState as S

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

T0 = 1000.0


@pytest.fixture
def brain(tmp_path):
    made = h.make_brain(tmp_path, BRAIN_LEASE_S=1000)
    yield made
    made.stop()


def with_hooks(monkeypatch, **hooks_of_type: tuple[str, ...]) -> None:
    """The table as it would be with these ``brain_hooks``."""
    table = {
        name: dataclasses.replace(spec, brain_hooks=hooks_of_type.get(name, spec.brain_hooks))
        for name, spec in task_types.TASK_TYPES.items()
    }
    monkeypatch.setattr(reactions, "TASK_TYPES", table)


def report(brain, plan, key, kind=CompleteRequest, **body):
    task = h.row(brain, plan, key)
    return task, kind(**h.ref(task).model_dump(), **body)


def complete(brain, plan, key, now, **body):
    task, sent = report(brain, plan, key, **body)
    return brain.write(
        lambda conn, outbox, _: leases.complete(
            conn, outbox, states.get_task(conn, task["id"]), "w1", sent, now, brain.settings
        )
    )


def fail(brain, plan, key, now, **body):
    task, sent = report(brain, plan, key, FailRequest, **body)
    return brain.write(
        lambda conn, outbox, _: leases.fail(
            conn,
            outbox,
            states.get_task(conn, task["id"]),
            "w1",
            sent,
            now,
            brain.retry,
            brain.settings,
        )  # fmt: skip
    )


def samples(brain) -> list[dict]:
    path = brain.settings.training_file
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_type_keeps_training_samples_when_its_entry_says_so(brain, monkeypatch):
    """noop names no hook; given ``training_sample`` in the table, its attempts become
    samples, and llm, given none, keeps none: leases follows the table, not the name."""
    with_hooks(monkeypatch, noop=("training_sample",), llm=())
    llm = {"id": "l", "type": "llm", "model": "m", "payload": {"prompt": "hi"}}
    plan = h.submit(brain, [h.noop("a", payload={"echo": 1}), h.noop("b", retry_count=0), llm])
    h.claim(brain, T0)
    complete(brain, plan, "a", T0 + 1, output={"text": "echoed"})
    h.claim(brain, T0 + 2)
    fail(brain, plan, "b", T0 + 3, error_type="boom", message="no")
    h.claim(brain, T0 + 4, classes=("llm",), models=("m:latest",))
    complete(brain, plan, "l", T0 + 5, output={"text": "not kept"})
    assert [(s["task_id"], s["outcome"], s["response"]) for s in samples(brain)] == [
        ("a", "succeeded", "echoed"), ("b", "failed", None),
    ]  # fmt: skip


class Recorder(reactions.Reaction):
    def __init__(self, name: str, calls: list, refuse: bool = False) -> None:
        self.name, self.calls, self.refuse = name, calls, refuse

    def on_claim(self, conn, task, payload, settings, now):
        self.calls.append((self.name, "claim"))
        return {**payload, "echo": [*payload.get("echo", []), self.name]}

    def before_success(self, conn, outbox, task, report, now, settings, tainted, digest):
        self.calls.append((self.name, "before"))
        if not self.refuse:
            return None
        return states.fail_terminal(conn, outbox, task, now, "refused", "no", "hook")

    def after_success(self, conn, outbox, done, report, settings):
        self.calls.append((self.name, "after", done["state"]))


def test_hooks_run_in_the_tables_order_and_one_may_refuse_the_success(brain, monkeypatch):
    calls: list = []
    registry = {"first": Recorder("first", calls), "second": Recorder("second", calls)}
    monkeypatch.setattr(reactions, "REACTIONS", registry)
    with_hooks(monkeypatch, noop=("first", "second"))
    plan = h.submit(brain, [h.noop("a", payload={"echo": []})])
    _, payload = h.claim(brain, T0)
    assert payload["echo"] == ["first", "second"]  # each hook is handed the one before's
    complete(brain, plan, "a", T0 + 1, output={})
    assert calls == [
        ("first", "claim"), ("second", "claim"), ("first", "before"), ("second", "before"),
        ("first", "after", S.SUCCEEDED), ("second", "after", S.SUCCEEDED),
    ]  # fmt: skip

    calls.clear()
    registry["first"] = Recorder("first", calls, refuse=True)
    plan = h.submit(brain, [h.noop("b")])
    h.claim(brain, T0 + 2)
    complete(brain, plan, "b", T0 + 3, output={"text": "never stored"})
    assert calls == [("first", "claim"), ("second", "claim"), ("first", "before")]
    row = h.row(brain, plan, "b")
    assert (row["state"], row["error_type"], row["output_json"]) == (S.FAILED, "refused", None)
