"""One container state and one health verdict for every verb (compose/container.py):
`up`, `status` and `triage` give the same answer for the same container, and what the
engine hands back is read without trust."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airig.launcher.compose.container import (
    HEALTHY,
    ContainerState,
    is_ok,
    verdict,
    wait_healthy,
)
from airig.launcher.compose.docker import ONEOFF_LABEL, PROJECT_LABEL, Docker
from airig.launcher.lifecycle.up import _all_healthy
from airig.launcher.views.status import services_table
from airig.launcher.views.triage.classify import crash
from airig.launcher.views.triage.facts import ContainerFacts

STATES = [
    ContainerState("s", "c", "running", "healthy", 0),
    ContainerState("s", "c", "running", "", 0),
    ContainerState("s", "c", "running", "starting", 0),
    ContainerState("s", "c", "running", "unhealthy", 0),
    ContainerState("s", "c", "restarting", "", 1),
    ContainerState("s", "c", "exited", "", 0),
    ContainerState("s", "c", "exited", "", 137),
    ContainerState("s", "c", "dead", "", 1),
    ContainerState("s", "c", "created", "", 0),
]


def _green_in_status(state: ContainerState) -> bool:
    row = {"stack": "x", "service": state.service, "container": state.container,
           "state": state.state, "health": state.health or "-", "exit_code": state.exit_code,
           "urls": []}  # fmt: skip
    table = services_table([row])
    return str(table.columns[2]._cells[0]).startswith("[green]")


@pytest.mark.parametrize("state", STATES, ids=lambda s: f"{s.state}-{s.health}-{s.exit_code}")
def test_up_status_and_triage_give_one_answer(state: ContainerState) -> None:
    """Five answers to "is this service healthy?" became one: up's check of a stack,
    status's colour and triage's crash finding all follow ``verdict``."""
    answer = verdict([state], done_ok=True)
    assert _all_healthy([state]) == (answer == HEALTHY) == is_ok(state)
    assert _green_in_status(state) == (answer == HEALTHY)
    facts = ContainerFacts("s", state.service, state.container, state.state, state.health,
                           state.exit_code)  # fmt: skip
    crashed = list(crash(facts))
    assert bool(crashed) == (answer not in (HEALTHY, None))


def test_a_service_is_healthy_only_when_every_replica_is() -> None:
    up = ContainerState("w", "w-1", "running", "healthy", 0)
    starting = ContainerState("w", "w-2", "running", "starting", 0)
    sick = ContainerState("w", "w-2", "running", "unhealthy", 0)
    assert verdict([up, up]) == HEALTHY
    assert verdict([up, starting]) is None
    assert verdict([up, sick]) == "unhealthy"
    assert verdict([]) == "not running"
    # a one-shot init container that finished is done for `up`, a crash for a wait
    done = ContainerState("init", "i-1", "exited", "", 0)
    assert verdict([up, done], done_ok=True) == HEALTHY
    assert verdict([done]) == "exited (code 0)"


def test_restarts_before_ours_are_not_a_crash() -> None:
    state = ContainerState("s", "c", "running", "healthy", 0, restarts=4)
    assert verdict([state]) == "exited (code 0)"
    assert verdict([state], restarts_before={"c": 4}) == HEALTHY
    assert verdict([state], restarts_before={"c": 3}) == "exited (code 0)"


def test_an_inspect_is_read_with_its_restart_count() -> None:
    attrs = {
        "Name": "/airig-compute-ollama-cpu-1",
        "RestartCount": 2,
        "Config": {"Labels": {"com.docker.compose.service": "ollama-cpu"}},
        "State": {"Status": "running", "ExitCode": 0, "Health": {"Status": "healthy"}},
    }
    state = ContainerState.from_inspect(attrs)
    assert (state.service, state.container, state.restarts) == (
        "ollama-cpu", "airig-compute-ollama-cpu-1", 2,
    )  # fmt: skip
    assert (state.state, state.health, state.exit_code) == ("running", "healthy", 0)


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"State": None, "Config": None, "RestartCount": None},
        {"State": {"Status": 7, "ExitCode": "1", "Health": {"Status": None}}, "RestartCount": "9"},
        {"State": {"Health": "sick"}, "RestartCount": True, "Name": 12},
        {"State": {"Status": "x" * 100_000}, "Config": {"Labels": {}}},
    ],
)
def test_what_the_engine_hands_back_is_read_without_trust(attrs: dict[str, Any]) -> None:
    """Fields missing, of the wrong type or huge: a state is read, never a crash, and its
    verdict is not healthy unless the engine said so."""
    state = ContainerState.from_inspect(attrs)
    assert isinstance(state.restarts, int) and state.restarts == 0
    assert state.exit_code is None or isinstance(state.exit_code, int)
    assert verdict([state]) != HEALTHY


def test_the_one_wait_says_how_long_and_gives_up_in_words() -> None:
    ticks = iter(range(0, 1000, 5))
    said: list[str] = []
    found = wait_healthy(
        lambda: [ContainerState("s", "c", "running", "starting", 0)], "s", 60,
        sleep=lambda _s: None, clock=lambda: next(ticks), say=said.append,
    )  # fmt: skip
    assert found == "still starting after 60 s"
    assert said and all(line.startswith("  still waiting for s (starting, ") for line in said)


LAUNCHER = Path(__file__).resolve().parents[3] / "airig" / "launcher"
ADAPTER = LAUNCHER / "compose" / "docker.py"


def test_every_container_the_launcher_starts_goes_through_the_adapter() -> None:
    """`containers.run(` (the docker SDK's create + start) is written in the adapter alone:
    the GPU probe, the Vulkan probe, the proofs and ComfyUI's volume move call it there
    (``one_off``, ``run_to_end``), so a container of the launcher's is always labelled,
    on no network and removed. A never-started container (backup's reader, restore's
    writer: ``containers.create``) starts nothing."""
    starting = sorted(
        str(path.relative_to(LAUNCHER))
        for path in LAUNCHER.rglob("*.py")
        if path != ADAPTER and "containers.run(" in _code(path)
    )
    assert starting == []
    assert "containers.run(" in _code(ADAPTER)  # the check reads the code, not nothing


def _code(path: Path) -> str:
    """The file without its comments and strings' prose: only calls count."""
    return "\n".join(line.split("#")[0] for line in path.read_text().splitlines())


def test_a_wait_reads_the_exited_containers_too() -> None:
    """`restart` and `update` read the service through the adapter's inspect: an exited
    container is its answer ("exited (code 3)"), not "not running"; another project's and
    a one-off `compose run` container are not the service's."""

    class Listed:
        def __init__(self, project: str, status: str, oneoff: str = "False") -> None:
            self.labels = {PROJECT_LABEL: project, ONEOFF_LABEL: oneoff}
            self.attrs = {"Name": f"/{project}-w-1", "RestartCount": 0,
                          "Config": {"Labels": {"com.docker.compose.service": "w"}},
                          "State": {"Status": status, "ExitCode": 3}}  # fmt: skip

    class Containers:
        asked: dict[str, Any] = {}

        def list(self, **kwargs: Any) -> list[Listed]:
            Containers.asked = kwargs
            return [Listed("airig-agents", "exited"), Listed("other", "running"),
                    Listed("airig-agents", "running", oneoff="True")]  # fmt: skip

    docker = Docker()
    docker._sdk = SimpleNamespace(containers=Containers())
    stack = SimpleNamespace(project="airig-agents")
    states = docker.service_states(stack, "w")  # type: ignore[arg-type]
    assert Containers.asked["all"] is True
    assert [(s.container, s.state) for s in states] == [("airig-agents-w-1", "exited")]
    assert verdict(states) == "exited (code 3)"
