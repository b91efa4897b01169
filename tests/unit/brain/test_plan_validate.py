"""Plan validation: each error case, inference of task_class, taint."""

from __future__ import annotations

import pytest

from airig.brain.plans.validate import Limits, PlanInvalid, infer_class, validate_plan


def noop(task_id, deps=(), **fields):
    return {"id": task_id, "type": "noop", "depends_on": list(deps), **fields}


DEFAULT_LIMITS = Limits()


def errors_of(tasks, limits=DEFAULT_LIMITS, **plan_fields):
    with pytest.raises(PlanInvalid) as caught:
        validate_plan({"name": "p", "tasks": tasks, **plan_fields}, limits)
    return caught.value


def test_a_sound_plan_passes_with_defaults():
    plan, tainted = validate_plan({"name": "p", "tasks": [noop("a"), noop("b", ["a"])]}, Limits())
    assert [t.id for t in plan.tasks] == ["a", "b"]
    assert plan.tasks[0].priority == 5 and plan.tasks[0].retry_count == 3
    assert tainted == set()


@pytest.mark.parametrize(
    ("tasks", "task", "field", "fragment"),
    [
        ([noop("a", ["b"]), noop("b", ["a"])], "a", "depends_on", "dependency cycle"),
        ([noop("a", ["a"])], "a", "depends_on", "cannot depend on itself"),
        ([noop("a", ["ghost"])], "a", "depends_on", "unknown task 'ghost'"),
        ([noop("a"), noop("a")], "a", "id", "duplicate task id"),
        ([noop("a", task_class="gpu")], "a", "task_class", "is not one of"),
        ([{"id": "a", "type": "teleport"}], "a", "type", "unknown type 'teleport'"),
        ([noop("a", priority=11)], "a", "priority", "less than or equal to 10"),
        ([noop("a", priority=0)], "a", "priority", "greater than or equal to 1"),
        ([noop("a", colour="red")], "a", "colour", "Extra inputs"),
        ([noop("bad id!")], "bad id!", "id", "should match pattern"),
        ([noop("a", payload={"sleep_s": -1})], "a", "payload.sleep_s", "greater than"),
        ([{"id": "a", "type": "llm", "payload": {"prompt": "x"}}], "a", "payload.model", "requir"),
        ([noop("a", task_class="resource")], "a", "task_class", "goes with type 'resource'"),
        (
            [noop("a"), noop("b", payload={"echo": "{{ tasks.a.output }}"})],
            "b", "payload", "not in depends_on",
        ),
    ],
)  # fmt: skip
def test_each_definition_error_is_reported_per_task(tasks, task, field, fragment):
    refused = errors_of(tasks)
    assert not refused.too_large
    assert any(
        e["task"] == task and e["field"] == field and fragment in e["message"]
        for e in refused.errors
    ), refused.errors


def test_all_errors_are_reported_together():
    refused = errors_of([noop("a", priority=99), noop("b", ["zzz"]), noop("c", task_class="x")])
    assert {e["task"] for e in refused.errors} == {"a", "b", "c"}


def test_a_broken_task_does_not_also_break_its_dependents():
    refused = errors_of([noop("a", priority=99), noop("b", ["a"])])
    assert [e["task"] for e in refused.errors] == ["a"]


def test_too_many_tasks_is_413():
    refused = errors_of([noop(f"t{i}") for i in range(4)], Limits(max_tasks=3))
    assert refused.too_large


def test_a_payload_over_the_limit_is_413():
    refused = errors_of([noop("a", payload={"echo": "x" * 500})], Limits(max_payload_bytes=100))
    assert refused.too_large and refused.errors[0]["field"] == "payload"


def test_unknown_plan_fields_are_errors():
    assert errors_of([noop("a")], owner="me").errors[0]["field"] == "plan"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"type": "shell", "payload": {"command": "python whisper_batch.py"}}, "script"),
        ({"type": "shell", "payload": {"command": "python transcribe.py"}}, "script"),
        ({"type": "shell", "name": "embed docs", "payload": {"command": "x"}}, "script"),
        ({"type": "shell", "payload": {"command": "CUDA_VISIBLE_DEVICES=1 run"}}, "script"),
        ({"type": "shell", "payload": {"command": "ollama run qwen"}}, "llm"),
        ({"type": "shell", "payload": {"command": "python generate_report.py"}}, "llm"),
        ({"type": "shell", "payload": {"command": "tar czf a.tgz b"}}, "cpu"),
        ({"type": "llm", "payload": {}}, "llm"),
        ({"type": "image", "payload": {}}, "script"),
    ],
)
def test_missing_class_is_inferred_like_the_seed(raw, expected):
    assert infer_class(raw)[0] == expected


def test_inference_is_recorded_as_a_fix():
    tasks = [{"id": "w", "type": "shell", "payload": {"command": "python whisper.py"}}]
    plan, _ = validate_plan({"name": "p", "tasks": tasks}, Limits())
    assert plan.tasks[0].task_class == "script"
    assert plan.fixes == [
        {
            "task": "w",
            "field": "task_class",
            "fix": "inferred 'script'",
            "reason": "keyword 'whisper'",
        }
    ]


def test_task_model_fills_the_payload_model():
    tasks = [{"id": "l", "type": "llm", "model": "qwen:7b", "payload": {"prompt": "hi"}}]
    plan, _ = validate_plan({"name": "p", "tasks": tasks}, Limits())
    assert plan.tasks[0].payload["model"] == "qwen:7b"


def test_taint_flows_through_templates_and_refuses_tainted_shell():
    tasks = [
        noop("web", trust="untrusted"),
        noop("clean", ["web"], payload={"echo": "{{ tasks.web.output }}"}),
        noop("after", ["clean"]),
        {"id": "sh", "type": "shell", "depends_on": ["clean"],
         "payload": {"command": "echo {{ tasks.clean.output }}"}},
    ]  # fmt: skip
    refused = errors_of(tasks)
    assert [(e["task"], e["field"]) for e in refused.errors] == [("sh", "trust")]


def test_taint_marks_readers_only():
    tasks = [
        noop("web", trust="untrusted"),
        noop("reader", ["web"], payload={"echo": "{{ tasks.web.output }}"}),
        noop("ordered_only", ["web"]),
    ]
    _, tainted = validate_plan({"name": "p", "tasks": tasks}, Limits())
    assert tainted == {"web", "reader"}


WHISPER_SMALL = "Systran/faster-whisper-small"


@pytest.mark.parametrize(
    ("task_type", "payload", "model", "placed"),
    [
        ("llm", {"prompt": "hi"}, "llama3.2", "llama3.2:latest"),
        ("embed", {"input": "x"}, "nomic-embed-text", "nomic-embed-text:latest"),
        ("llm", {"prompt": "hi"}, "qwen2.5:7b-instruct-q4_K_M", "qwen2.5:7b-instruct-q4_K_M"),
        # a Whisper model places a transcription as speaches' /api/ps names it (issue 34)
        ("transcribe", {"audio": "a.wav"}, "Systran/faster-whisper-small", WHISPER_SMALL),
        ("resource", {"service": "ollama", "action": "load"}, "llama3.2", "llama3.2:latest"),
        ("resource", {"service": "whisper", "action": "load"}, "Systran/x", "Systran/x"),
    ],
)
def test_tasks_are_placed_by_the_model_their_server_reports(task_type, payload, model, placed):
    """Ollama names become the form /api/ps reports, Whisper's stay speaches' ids; a shared
    server's models (ComfyUI) do not steer placement."""
    task = {"id": "t", "type": task_type, "payload": {**payload, "model": model}}
    spec, _ = validate_plan({"name": "p", "tasks": [task]}, Limits())
    [only] = spec.tasks
    assert only.model == placed
    assert only.payload["model"] == model  # what the executor sends is left as written
