"""`restart SERVICE`: the service lookup and the wait for health, against a fake adapter."""

from __future__ import annotations

from pathlib import Path

import pytest

import airig.launcher.cli.runbook as runbook
from airig.common.errors import ConfigError
from airig.launcher.compose.container import ContainerState
from airig.launcher.compose.plan import ComposePlan, StackPlan, plan_for_running
from airig.launcher.lifecycle.restart import find_service, restart_one, wait_healthy
from airig.launcher.settings import checkout_settings
from tests.support import one_error, run_cli


def _state(service: str, state: str = "running", health: str = "healthy") -> ContainerState:
    code = 1 if state == "exited" else None
    return ContainerState(service, f"c-{service}", state, health, code, [])


class FakeServices:
    """Per stack, the states each `services` call returns next (the last one repeats)."""

    def __init__(self, states: dict[str, list[list[ContainerState]]]) -> None:
        self.queue = states
        self.restarted: list[tuple[str, str, bool]] = []

    def services(self, stack: StackPlan) -> list[ContainerState]:
        queue = self.queue.get(stack.name, [[]])
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def states(self, stack: StackPlan, service: str) -> list[ContainerState]:
        return [s for s in self.services(stack) if s.service == service]

    def restart(self, stack: StackPlan, service: str, recreate: bool) -> None:
        self.restarted.append((stack.name, service, recreate))


@pytest.fixture
def plan(launcher_kit: Path) -> ComposePlan:
    return plan_for_running(checkout_settings())


def _stack(plan: ComposePlan, name: str) -> StackPlan:
    return next(s for s in plan.stacks if s.name == name)


def test_ollama_finds_the_active_variant_in_its_stack(plan: ComposePlan) -> None:
    fake = FakeServices(
        {
            "02-compute": [[_state("ollama-init", "exited"), _state("ollama-cpu")]],
            "03-agents": [[_state("brain")]],
        }
    )
    stack, service = find_service(plan, fake, "ollama")
    assert (stack.name, service) == ("02-compute", "ollama-cpu")
    assert find_service(plan, fake, "brain")[1] == "brain"


def test_an_unknown_service_names_the_running_ones(plan: ComposePlan) -> None:
    fake = FakeServices({"03-agents": [[_state("brain"), _state("worker-cpu")]]})
    with pytest.raises(ConfigError) as caught:
        find_service(plan, fake, "comfy")
    assert caught.value.message == "no running service named 'comfy'"
    assert caught.value.hint == "one of: brain, worker-cpu"


def test_the_wait_polls_until_healthy(plan: ComposePlan) -> None:
    lookup = [[_state("brain")]] * 2  # the service, then its restart count before ours
    polls = lookup + [[_state("brain", health="starting")]] * 3 + [[_state("brain")]]
    fake = FakeServices({"03-agents": polls})
    sleeps: list[float] = []
    outcome = restart_one(plan, fake, "brain", sleep=sleeps.append)
    assert fake.restarted == [("03-agents", "brain", False)]
    assert (outcome.healthy, outcome.detail, len(sleeps)) == (True, "healthy", 3)


def test_every_replica_must_be_healthy(plan: ComposePlan) -> None:
    polls = [
        [_state("worker-cpu"), _state("worker-cpu", health="starting")],
        [_state("worker-cpu"), _state("worker-cpu", health="")],  # no healthcheck: running
    ]
    fake = FakeServices({"03-agents": polls})
    outcome = wait_healthy(fake, _stack(plan, "03-agents"), "worker-cpu", sleep=lambda _s: None)
    assert outcome.healthy


def test_an_exited_container_stops_the_wait(plan: ComposePlan) -> None:
    fake = FakeServices({"03-agents": [[_state("brain", "exited", "")]]})
    outcome = wait_healthy(fake, _stack(plan, "03-agents"), "brain", sleep=pytest.fail)
    assert (outcome.healthy, outcome.detail) == (False, "exited (code 1)")


def test_the_wait_gives_up_at_the_timeout(plan: ComposePlan) -> None:
    fake = FakeServices({"03-agents": [[_state("brain", health="starting")]]})
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    outcome = wait_healthy(
        fake, _stack(plan, "03-agents"), "brain", timeout=10, sleep=sleep, clock=lambda: now[0]
    )
    assert (outcome.healthy, outcome.detail) == (False, "still starting after 10 s")


def test_an_unhealthy_service_stops_the_wait(plan: ComposePlan) -> None:
    """The engine says unhealthy only after its retries: waiting on is waiting in vain
    (the old wait polled it until its timeout)."""
    fake = FakeServices({"03-agents": [[_state("brain", health="unhealthy")]]})
    outcome = wait_healthy(fake, _stack(plan, "03-agents"), "brain", sleep=pytest.fail)
    assert (outcome.healthy, outcome.detail) == (False, "unhealthy")


def test_a_restarting_container_is_a_crash_not_a_start(plan: ComposePlan) -> None:
    """`restart` and `update` wait the same way: a crash loop under `restart:
    unless-stopped` never reports unhealthy, it restarts (the old wait took it for a
    container still starting and waited out its timeout)."""
    looping = ContainerState("brain", "c-brain", "restarting", "", 1, [])
    fake = FakeServices({"03-agents": [[looping]]})
    outcome = wait_healthy(fake, _stack(plan, "03-agents"), "brain", sleep=pytest.fail)
    assert (outcome.healthy, outcome.detail) == (False, "exited (code 1)")


def test_only_a_restart_after_ours_counts_as_a_crash(plan: ComposePlan) -> None:
    """A container restarted twice last week is restarted by us and comes up: healthy. One
    whose restart count rises after our restart has crashed, though it reads running."""
    old = ContainerState("brain", "c-brain", "running", "healthy", 0, [], restarts=2)
    crashed = ContainerState("brain", "c-brain", "running", "starting", 3, [], restarts=3)
    fine = FakeServices({"03-agents": [[old]]})
    assert restart_one(plan, fine, "brain", sleep=pytest.fail).healthy
    looped = FakeServices({"03-agents": [[old], [old], [crashed]]})
    outcome = restart_one(plan, looped, "brain", sleep=pytest.fail)
    assert (outcome.healthy, outcome.detail) == (False, "exited (code 3)")


def test_the_command_says_not_healthy_and_exits_1(
    launcher_kit: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeServices({"03-agents": [[_state("brain", "exited", "")]]})
    monkeypatch.setattr(runbook, "ComposeServices", lambda _docker: fake)
    code, out, _err = run_cli(monkeypatch, capsys, None, "restart", "brain")
    assert code == 1
    assert out.strip() == "✘ brain not healthy: exited (code 1)"


def test_the_command_refuses_an_unknown_service(
    launcher_kit: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runbook, "ComposeServices", lambda _docker: FakeServices({}))
    code, _out, err = run_cli(monkeypatch, capsys, None, "restart", "brain")
    assert one_error(code, err, "brain") == "✘ no running service named 'brain'"


def test_a_compute_service_restart_says_its_queued_work_waited() -> None:
    """Issue 35 §2: the brain holds a compute service's queued tasks while it is down."""
    from airig.launcher.lifecycle.restart import Outcome, outcome_line

    back = outcome_line(Outcome("ollama-cpu", True, "healthy"))
    assert back.endswith(
        "its queued tasks waited in the brain's queue meanwhile (none failed) and run now"
    )
    down = outcome_line(Outcome("comfyui-gpu-nvidia", False, "unhealthy"))
    assert "until it answers (at most AIRIG_MAX_WAIT_S, then they fail)" in down
    assert outcome_line(Outcome("brain", True, "healthy")).endswith("brain healthy")
