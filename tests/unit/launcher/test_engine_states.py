"""What runs, read from one engine container list instead of a `compose ps` per stack."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from airig.launcher.compose.container import ContainerState
from airig.launcher.compose.docker import group_states
from airig.launcher.lifecycle.up import host_port
from airig.launcher.views.status import service_rows

summary = ContainerState.from_summary


def listed(name: str, project: str = "airig-infra", **fields: Any) -> dict[str, Any]:
    """One entry of ``GET /containers/json`` as the engine (API 1.41) answers it."""
    labels = {"com.docker.compose.project": project, "com.docker.compose.service": name,
              **fields.pop("labels", {})}  # fmt: skip
    row = {"Names": [f"/{project}-{name}-1"], "State": "running", "Status": "Up 5 minutes",
           "Labels": labels, "Ports": []}  # fmt: skip
    return {**row, **fields}


def test_a_healthy_service_keeps_its_published_ports_only() -> None:
    row = listed("brain", Status="Up 5 minutes (healthy)", Ports=[
        {"IP": "0.0.0.0", "PrivatePort": 8080, "PublicPort": 18080, "Type": "tcp"},
        {"IP": "::", "PrivatePort": 8080, "PublicPort": 18080, "Type": "tcp"},
        {"PrivatePort": 9000, "Type": "tcp"},  # exposed, not published
    ])  # fmt: skip
    state = summary(row)
    assert (state.service, state.container, state.state) == ("brain", "airig-infra-brain-1",
                                                             "running")  # fmt: skip
    assert state.health == "healthy" and state.exit_code == 0
    assert state.ports == ["0.0.0.0:18080->8080/tcp", ":::18080->8080/tcp"]


def test_health_and_exit_code_come_from_the_status_text() -> None:
    starting = summary(listed("ollama", Status="Up 2 seconds (health: starting)"))
    sick = summary(listed("ollama", Status="Up 9 minutes (unhealthy)"))
    plain = summary(listed("ollama", Status="Up 9 minutes"))
    done = summary(listed("init", State="exited", Status="Exited (0) 3 minutes ago"))
    killed = summary(listed("init", State="exited", Status="Exited (137) 1 second ago"))
    looping = summary(listed("w", State="restarting", Status="Restarting (1) 2 seconds ago"))
    assert [starting.health, sick.health, plain.health] == ["starting", "unhealthy", ""]
    assert (done.state, done.exit_code, done.health) == ("exited", 0, "")
    assert [killed.exit_code, looping.exit_code] == [137, 1]


def test_a_newer_engine_s_health_field_wins_over_the_text() -> None:
    row = listed("brain", Status="Up 1 minute (healthy)", Health={"Status": "unhealthy"})
    assert summary(row).health == "unhealthy"
    assert summary(listed("b", Health={"Status": "none"})).health == ""


def test_a_container_without_a_service_label_is_named_by_its_container() -> None:
    row = listed("x")
    del row["Labels"]["com.docker.compose.service"]
    assert summary(row).service == "airig-infra-x-1"


def test_each_project_gets_its_own_services_sorted_one_offs_and_strangers_left_out() -> None:
    rows = [
        listed("redis", "airig-infra"),
        listed("brain", "airig-agents"),
        listed("brain", "airig-infra"),
        listed("run", "airig-infra", labels={"com.docker.compose.oneoff": "True"}),
        listed("brain", "otherrig-agents"),
    ]
    grouped = group_states(rows, ["airig-infra", "airig-agents", "airig-compute"])
    assert list(grouped) == ["airig-infra", "airig-agents", "airig-compute"]
    assert [s.service for s in grouped["airig-infra"]] == ["brain", "redis"]
    assert [s.container for s in grouped["airig-agents"]] == ["airig-agents-brain-1"]
    assert grouped["airig-compute"] == []


def test_status_rows_ask_the_engine_once_for_every_stack() -> None:
    asked: list[list[str]] = []

    class Engine:
        def project_services(self, projects):
            asked.append(list(projects))
            return group_states([listed("redis", "p-infra"), listed("brain", "p-agents")],
                                asked[-1])  # fmt: skip

    names = (("01-infra", "p-infra"), ("02-compute", "p-compute"), ("03-agents", "p-agents"))
    stacks = [SimpleNamespace(name=n, project=p) for n, p in names]
    rows = service_rows(Engine(), SimpleNamespace(stacks=stacks))  # type: ignore[arg-type]
    assert asked == [["p-infra", "p-compute", "p-agents"]]
    assert [(r["stack"], r["service"]) for r in rows] == [("01-infra", "redis"),
                                                          ("03-agents", "brain")]  # fmt: skip


def test_the_host_side_of_a_published_port() -> None:
    assert host_port("0.0.0.0:18080->8080/tcp") == 18080
    assert host_port(":::11434->11434/tcp") == 11434
    assert host_port("127.0.0.1:9000->9000/udp") == 9000
