"""Shell templates arrive as environment variables: the brain renders a shell command's
``{{ tasks.x.output… }}`` into "${AIRIG_INPUT_n}" references (values in
``payload.inputs``) and the real shell executor runs them; upstream text is never code."""

from __future__ import annotations

import brain_helpers as h
import pytest

from airig.brain.plans.validate import Limits, PlanInvalid, validate_plan
from airig.brain.store.shell_inputs import substitute
from airig.executors.base import run_task
from airig.executors.context import TaskError
from airig.executors.shell import MAX_VARIABLE_BYTES

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

# Everything a shell would run if it were spliced into the command, in every quoting.
HOSTILE = (
    "a  b * $(touch p1) `touch p2`; touch p3 ' ; touch p4 ; ' \" ; touch p5 ; \" \\ $HOME\n"
    "end && touch p6 | touch p7"
)
A = "{{ tasks.a.output }}"


def run(payload, make_ctx, tmp_path) -> str:
    """Run the rendered payload with the real executor: its stdout, after checking that
    none of the commands hidden in HOSTILE ran."""
    stdout = run_task("shell", payload, make_ctx()).output["stdout_tail"]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == []
    return stdout


@pytest.mark.parametrize(
    "command,rendered,shown",
    [
        (f"printf %s {A}", 'printf %s "${AIRIG_INPUT_1}"', "{}"),
        (f'printf %s "got: {A}!"', 'printf %s "got: ${AIRIG_INPUT_1}!"', "got: {}!"),
        (f"printf %s 'got: {A}!'", "printf %s 'got: '\"${AIRIG_INPUT_1}\"'!'", "got: {}!"),
        # quotes, escapes and a template repeated: each quote state is tracked
        (f"""printf '%s|' "\\"{A}" 'it''s' {{{{tasks.a.output}}}}""",
         """printf '%s|' "\\"${AIRIG_INPUT_1}" 'it''s' "${AIRIG_INPUT_1}\"""",
         '"{}|its|{}|'),
    ],
)  # fmt: skip
def test_a_template_becomes_a_variable_quoted_for_where_it_stands(
    command, rendered, shown, make_ctx, tmp_path
):
    payload = substitute({"command": command}, {("a", ""): HOSTILE})
    assert payload == {"command": rendered, "inputs": {"AIRIG_INPUT_1": HOSTILE}}
    assert run(payload, make_ctx, tmp_path) == shown.replace("{}", HOSTILE)


def test_a_list_command_gets_the_same_argv_without_a_word_being_parsed(make_ctx, tmp_path):
    command = ["printf", "[%s]", f"pre-{A}-post", "", "{{ tasks.a.output.n }}", "$HOME;x"]
    payload = substitute({"command": command}, {("a", ""): HOSTILE, ("a", ".n"): "7"})
    assert payload["command"][:2] == ["/bin/sh", "-c"]
    assert payload["inputs"] == {"AIRIG_INPUT_1": HOSTILE, "AIRIG_INPUT_2": "7"}
    assert HOSTILE not in " ".join(payload["command"])
    assert run(payload, make_ctx, tmp_path) == f"[pre-{HOSTILE}-post][][7][$HOME;x]"


def test_env_and_cwd_templates_are_filled_in_as_values(make_ctx, tmp_path):
    (tmp_path / "data" / "sub").mkdir()
    payload = substitute(
        {"command": 'printf %s "$X"; pwd', "env": {"X": f"<{A}>"}, "cwd": "{{ tasks.d.output }}"},
        {("a", ""): HOSTILE, ("d", ""): "sub"},
    )
    assert payload == {"command": 'printf %s "$X"; pwd', "env": {"X": f"<{HOSTILE}>"},
                       "cwd": "sub"}  # fmt: skip
    out = run_task("shell", payload, make_ctx()).output["stdout_tail"]
    assert out == f"<{HOSTILE}>{tmp_path / 'data' / 'sub'}\n"


def test_a_plan_never_sets_inputs_itself():
    task = {"id": "s", "type": "shell", "payload": {"command": "env", "inputs": {}}}
    with pytest.raises(PlanInvalid) as refused:
        validate_plan({"tasks": [task]}, Limits())
    [error] = refused.value.errors
    assert error["field"] == "payload.inputs" and "filled by the brain" in error["message"]


@pytest.mark.parametrize("value,why", [("x" * MAX_VARIABLE_BYTES, "bytes"), ("a\0b", "NUL")])
def test_a_value_no_environment_can_hold_fails_for_good(value, why, make_ctx):
    payload = {"command": 'echo "${AIRIG_INPUT_1}"', "inputs": {"AIRIG_INPUT_1": value}}
    with pytest.raises(TaskError) as caught:
        run_task("shell", payload, make_ctx())
    assert (caught.value.error_type, caught.value.retryable) == ("bad_input", False)
    assert "AIRIG_INPUT_1" in caught.value.message and why in caught.value.message


def test_the_brain_hands_a_shell_task_its_upstream_output_as_inputs(tmp_path, make_ctx):
    brain = h.make_brain(tmp_path / "brain")
    try:
        # w1 is a worker of this machine (registered with the bootstrap token)
        brain.write(lambda conn, outbox, now: conn.execute(
            """INSERT INTO workers (id, token_hash, classes_json, registered_at,
               last_heartbeat) VALUES ('w1', 'h', '["cpu"]', 1000, 1000)"""))  # fmt: skip
        plan = h.submit(brain, [
            h.noop("a"),
            {"id": "b", "type": "shell", "depends_on": ["a"],
             "payload": {"command": f"printf '%s' '{A}'; printf %s {A}"}},
        ])  # fmt: skip
        h.claim(brain, 1000.0)
        h.do(brain, plan, "a", "complete", 1001.0, output={"text": HOSTILE})
        task, payload = h.claim(brain, 1002.0)
    finally:
        brain.stop()
    assert task["key"] == "b" and task["trusted"]
    assert (
        payload["command"]
        == """printf '%s' ''"${AIRIG_INPUT_1}"''; printf %s "${AIRIG_INPUT_1}\""""
    )
    assert payload["inputs"] == {"AIRIG_INPUT_1": HOSTILE}
    assert run(payload, make_ctx, tmp_path) == HOSTILE * 2
