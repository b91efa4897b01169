"""A compute service that is down holds its tasks; it never fails them (issue 35 §2).

- a worker's "unreachable" (``service_unreachable``) is an infra retry, never charged to
  the task's ``retry_count`` nor escalated; real failures keep their limits;
- that worker is offered none of that service's tasks for ``BRAIN_PROBE_INTERVAL_S``;
- while the probes say a service is down, this machine's workers are offered none of its
  tasks (a joined rig's are: its services are its own); other tasks of the same group
  still go;
- each held task says why it waits, and fails after ``AIRIG_MAX_WAIT_S``.
"""

from __future__ import annotations

import brain_helpers as h
import pytest

from airig.brain import leases
from airig.brain.ops.probes import ServiceProbes, Target
from airig.brain.scheduling.workers import WorkerView
from airig.brain.store import queue, states
from airig.brain.store.retry import INFRA, TASK, failure_kind
from airig.common.protocol import FailRequest

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

T0 = 1000.0
MODEL = "qwen2.5:7b"
UNREACHABLE = "Ollama at http://ollama:11434 is unreachable"


def llm(task_id: str, **fields):
    payload = {"model": MODEL, "prompt": "hello"}
    return {"id": task_id, "type": "llm", "payload": payload, **fields}


@pytest.fixture
def brain(tmp_path):
    made = h.make_brain(tmp_path, AIRIG_MAX_WAIT_S=100, BRAIN_PROBE_INTERVAL_S=20)
    yield made
    made.stop()


def claim(brain, now, worker="w1", classes=("llm",), local=True):
    view = WorkerView(tuple(classes), frozenset(), local=local)
    found = brain.write(
        lambda conn, outbox, _: leases.claim(
            conn, outbox, worker, view, now, brain.settings, brain.scheduling
        )
    )
    return found[0] if found else None


def fail(brain, task, now, worker="w1", **body):
    report = FailRequest(attempt=task["attempt"], lease_id=task["lease_id"], **body)
    return brain.write(
        lambda conn, outbox, _: leases.fail(
            conn,
            outbox,
            states.get_task(conn, task["id"]),
            worker,
            report,
            now,
            brain.retry,
            brain.settings,
            brain.scheduling,
        )  # fmt: skip
    )


def test_only_an_unreachable_service_is_an_infrastructure_failure():
    assert failure_kind("service_unreachable") == INFRA
    for real in ("service_unavailable", "bad_input", "model_not_found", "timeout", "oom"):
        assert failure_kind(real) == TASK


def test_an_unreachable_service_costs_the_task_no_retry(brain):
    """The issue's swap failure, with no retries left: before, the plan ended failed."""
    plan = h.submit(brain, [llm("a", retry_count=0)])
    task = claim(brain, T0)
    message = f"model swap before the task failed (load {MODEL}): {UNREACHABLE}"
    after = fail(brain, task, T0, error_type="service_unreachable", message=message)
    assert (after["state"], after["task_errors"], after["infra_errors"]) == ("RETRY_WAIT", 0, 1)
    assert after["reason"].startswith("infra error 1, retry in ")
    assert h.state_of(brain, plan) == {"a": "RETRY_WAIT"}


@pytest.mark.parametrize(
    ("error_type", "retryable", "state"),
    [("bad_input", False, "FAILED"), ("model_not_found", True, "FAILED"),
     ("service_unavailable", True, "FAILED")],
)  # fmt: skip
def test_real_failures_keep_their_limits(brain, error_type, retryable, state):
    h.submit(brain, [llm("a", retry_count=0)])
    task = claim(brain, T0)
    after = fail(brain, task, T0, error_type=error_type, message="no", retryable=retryable)
    assert (after["state"], after["task_errors"], after["infra_errors"]) == (state, 1, 0)


def test_the_worker_that_found_ollama_unreachable_gets_no_ollama_task_for_a_while(brain):
    plan = h.submit(brain, [llm("a"), llm("b")])
    first = claim(brain, T0)
    fail(brain, first, T0, error_type="service_unreachable", message=UNREACHABLE)
    h.submit(brain, [h.noop("c", task_class="llm")])
    # w1 is offered the task that needs no Ollama, nothing else, for 20 s
    assert claim(brain, T0 + 5)["key"] == "c"
    assert claim(brain, T0 + 6) is None
    assert claim(brain, T0 + 6, worker="w2")["key"] in ("a", "b")  # another worker is not
    assert claim(brain, T0 + 21)["key"] in ("a", "b")
    assert h.row(brain, plan, first["key"])["task_errors"] == 0


def test_while_the_probes_say_ollama_is_down_its_tasks_wait(brain):
    brain.scheduling.outages = lambda: {"ollama": (T0, "2 probes in a row failed")}
    h.submit(brain, [llm("a"), h.noop("b", task_class="llm")])
    assert claim(brain, T0)["key"] == "b"  # the group's other task still goes
    assert claim(brain, T0 + 1) is None
    # a joined rig's worker uses its own rig's Ollama, which the brain does not probe
    assert claim(brain, T0 + 1, worker="j1", local=False)["key"] == "a"


def test_a_held_image_does_not_hold_the_shell_task_behind_it(brain):
    brain.scheduling.outages = lambda: {"comfyui": (T0, "down")}
    image = {
        "id": "img",
        "type": "image",
        "payload": {"prompt": "a cat", "checkpoint": "sd.safetensors"},
    }
    h.submit(brain, [image, h.noop("after", task_class="script")])
    assert claim(brain, T0, classes=("script",))["key"] == "after"


def test_a_held_task_says_why_it_waits_and_is_released_when_the_service_is_back(brain):
    down = {"ollama": (T0, "2 probes in a row failed: ConnectionError")}
    brain.scheduling.outages = lambda: down
    plan = h.submit(brain, [llm("a")])
    brain.write(lambda conn, outbox, _: brain.scheduling.hold_waiting(conn, outbox, T0 + 5))
    reason = h.row(brain, plan, "a")["reason"]
    assert reason.startswith("waiting for ollama: down (2 probes in a row failed")
    assert "AIRIG_MAX_WAIT_S (100 s)" in reason
    down.clear()
    brain.write(lambda conn, outbox, _: brain.scheduling.hold_waiting(conn, outbox, T0 + 6))
    assert h.row(brain, plan, "a")["reason"] is None
    assert claim(brain, T0 + 6)["key"] == "a"
    with brain.db.read() as conn:
        kinds = [r["event_type"] for r in conn.execute("SELECT event_type FROM events")]
    assert kinds.count("service.held") == 1 and kinds.count("service.resumed") == 1


def test_a_task_waits_for_a_down_service_at_most_max_wait(brain):
    brain.scheduling.outages = lambda: {"ollama": (T0 + 50, "down")}
    plan = h.submit(brain, [llm("a"), h.noop("b", ["a"])])  # ready at T0
    hold = brain.scheduling.hold_waiting
    brain.write(lambda conn, outbox, _: hold(conn, outbox, T0 + 149))  # down for 99 s
    assert h.state_of(brain, plan) == {"a": "READY", "b": "PENDING"}
    brain.write(lambda conn, outbox, _: hold(conn, outbox, T0 + 151))
    task = h.row(brain, plan, "a")
    assert (task["state"], task["error_type"]) == ("FAILED", "service_unreachable")
    assert "ollama was down for the 101 s this task waited" in task["error"]
    assert h.state_of(brain, plan)["b"] == "UPSTREAM_FAILED"


def test_the_service_a_task_needs():
    assert queue.service_of("llm", "{}") == "ollama"
    assert queue.service_of("plan", "{}") == "ollama"
    assert queue.service_of("image", "{}") == "comfyui"
    assert queue.service_of("transcribe", "{}") == "whisper"
    assert queue.service_of("resource", '{"service": "whisper"}') == "whisper"
    assert queue.service_of("shell", "{}") is None


def test_probes_say_since_when_a_service_is_down():
    clock = iter([10.0, 11.0, 12.0, 13.0])
    answers: dict[str, object] = {"down": True}

    def get(url: str, timeout_s: float) -> str:
        if answers["down"]:
            raise __import__("requests").ConnectionError("refused")
        return "{}"

    target = Target("ollama", "http://ollama:11434", on_gpu=False)
    probes = ServiceProbes((target,), down_after=2, get=get, clock=lambda: next(clock))
    probes.probe_once()
    assert probes.outages() == {}
    probes.probe_once()
    [(since, why)] = probes.outages().values()
    assert since == 10.0 and why.startswith("2 probes in a row failed: ConnectionError")
    answers["down"] = False
    probes.probe_once()
    assert probes.outages() == {}
