"""The launcher's side of the escalation gateway: the `escalation` profile only when .env
opts in, the key file's absolute path and owner for compose, and `up`'s refusal (one line,
before anything starts) when the key or the model is missing."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from airig.common.errors import ConfigError, PreflightError
from airig.launcher.compose.plan import build_plan, plan_for_running
from airig.launcher.lifecycle.preflight import escalation_check
from airig.launcher.lifecycle.up import Launcher, _require
from airig.launcher.settings import load_settings

ROOT = Path(__file__).resolve().parents[3]
KEY = "sk-secret-0123456789abcdef"
ON = "AIRIG_ESCALATION=on\nAIRIG_GATEWAY_MODEL=claude-sonnet-5-5\nAIRIG_GATEWAY_TOKEN=t0k\n"


def rig(tmp_path: Path, env: str):
    (tmp_path / ".env").write_text(env)
    (tmp_path / "02-compute").mkdir(exist_ok=True)
    shutil.copy(ROOT / "02-compute" / "images.yaml", tmp_path / "02-compute" / "images.yaml")
    return load_settings(tmp_path)


def host_env(plan) -> dict[str, str]:
    text = next(t for p, t in plan.generated.items() if p.name == "host.env")
    return dict(line.split("=", 1) for line in text.splitlines())


def test_the_gateway_starts_only_when_escalation_is_on(tmp_path):
    off = build_plan(rig(tmp_path, ""), "cpu", [])
    assert all(stack.profiles == ("cpu",) for stack in off.stacks)
    assert "AIRIG_GATEWAY_KEY_FILE" not in host_env(off)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "provider").write_text(KEY)
    on = build_plan(rig(tmp_path, ON + "AIRIG_GATEWAY_KEY_FILE=keys/provider\n"), "cpu", [])
    assert [s.profiles for s in on.stacks] == [("cpu",), ("cpu",), ("cpu", "escalation")]
    values = host_env(on)
    # relative to the checkout, written absolute (compose would read it from 03-agents/)
    assert values["AIRIG_GATEWAY_KEY_FILE"] == str(tmp_path / "keys" / "provider")
    owner = (tmp_path / "keys" / "provider").stat()
    assert values["AIRIG_GATEWAY_USER"] == f"{owner.st_uid}:{owner.st_gid}"
    assert KEY not in "".join(on.generated.values())
    # down / status / logs address the gateway too (plan_for_running)
    assert plan_for_running(rig(tmp_path, ON)).stack("03-agents").profiles[-1] == "escalation"


def test_a_joined_rig_runs_no_gateway(tmp_path):
    joined = ON + "AIRIG_JOIN_BRAIN_URL=http://brain.lan:8080\nAIRIG_JOIN_TOKEN=j\n"
    plan = build_plan(rig(tmp_path, joined), "cpu", [])
    assert plan.stack("03-agents").profiles == ("cpu",)
    assert escalation_check(rig(tmp_path, joined)).ok


def test_escalation_is_on_or_off(tmp_path):
    with pytest.raises(ConfigError) as refused:
        rig(tmp_path, "AIRIG_ESCALATION=yes please\n")
    assert refused.value.message.startswith("AIRIG_ESCALATION='yes please' is neither on nor off")
    with pytest.raises(ConfigError, match="AIRIG_GATEWAY_PROVIDER='gemini' is not a provider"):
        rig(tmp_path, "AIRIG_GATEWAY_PROVIDER=gemini\n")


@pytest.mark.parametrize(
    ("env", "content", "says"),
    [
        (ON, None, "AIRIG_GATEWAY_KEY_FILE is empty"),
        (ON + "AIRIG_GATEWAY_KEY_FILE=missing.key\n", None, "AIRIG_GATEWAY_KEY_FILE: no file at "),
        (ON + "AIRIG_GATEWAY_KEY_FILE=provider.key\n", "  \n", "is empty"),
        (ON.replace("claude-sonnet-5-5", ""), KEY, "AIRIG_GATEWAY_MODEL is empty"),
        (ON.replace("t0k", "change-me") + "AIRIG_GATEWAY_KEY_FILE=provider.key\n", KEY,
         "AIRIG_GATEWAY_TOKEN is still change-me"),
    ],
)  # fmt: skip
def test_up_refuses_escalation_without_a_model_or_a_key_in_one_line(tmp_path, env, content, says):
    if content is not None:
        (tmp_path / "provider.key").write_text(content)
    check = escalation_check(rig(tmp_path, env))
    assert not check.ok and says in check.detail and check.fix
    assert "\n" not in check.detail and KEY not in check.detail


def test_a_readable_key_file_passes_and_a_shared_one_is_named(tmp_path):
    key = tmp_path / "provider.key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    settings = rig(tmp_path, ON + f"AIRIG_GATEWAY_KEY_FILE={key}\n")
    check = escalation_check(settings)
    assert check.ok and check.detail.startswith("on: openai claude-sonnet-5-5, key file ")
    assert KEY not in check.detail and "chmod" not in check.detail
    key.chmod(0o644)
    assert "others may read it: chmod 600" in escalation_check(settings).detail
    assert escalation_check(rig(tmp_path, "")).detail == "off: nothing leaves this machine"


class QuietEngine:
    """The two engine calls preflight makes."""

    def engine_info(self) -> dict:
        return {"DockerRootDir": os.fspath(Path("/"))}

    def project_services(self, projects) -> dict:  # the own-ports query: nothing runs
        return {project: [] for project in projects}


def test_ups_preflight_stops_before_anything_starts(tmp_path):
    shutil.copy(ROOT / ".env.example", tmp_path / ".env.example")
    example = (tmp_path / ".env.example").read_text()
    env = example.replace("change-me", "generated") + ON + "AIRIG_MIN_FREE_DISK_GB=0\n"
    launcher = Launcher(rig(tmp_path, env), QuietEngine(), None)  # type: ignore[arg-type]
    with pytest.raises(PreflightError) as stopped:
        _require(launcher.preflight())
    assert (
        stopped.value.message
        == "escalation: AIRIG_ESCALATION=on but AIRIG_GATEWAY_KEY_FILE is empty"
    )
    assert "AIRIG_GATEWAY_KEY_FILE" in stopped.value.hint


class Container:
    def __init__(self, project: str, service: str) -> None:
        self.labels = {"com.docker.compose.project": project, "com.docker.compose.service": service}
        self.removed = False

    def remove(self, force: bool = False) -> None:
        self.removed = force


class Engine:
    def __init__(self, *containers: Container) -> None:
        self.running = list(containers)
        self.asked: list[dict] = []

    def containers(self, **filters: str) -> list[Container]:
        self.asked.append(filters)
        service = filters["label"].split("=", 1)[1]
        return [c for c in self.running if c.labels["com.docker.compose.service"] == service]


def test_up_with_escalation_off_stops_the_gateway_an_earlier_up_left(tmp_path):
    """Compose's `up` leaves a service of a profile no longer active running: the launcher
    removes this rig's gateway (holding the key) itself, and no other rig's."""
    ours, theirs = Container("airig-agents", "gateway"), Container("other-agents", "gateway")
    brain = Container("airig-agents", "brain")
    engine = Engine(ours, theirs, brain)
    console = Console(file=io.StringIO())
    launcher = Launcher(rig(tmp_path, ""), engine, console)  # type: ignore[arg-type]
    launcher._retire_gateway(build_plan(launcher.settings, "cpu", []))
    assert (ours.removed, theirs.removed, brain.removed) == (True, False, False)
    assert "Stopped the escalation gateway" in console.file.getvalue()

    ours.removed = False
    (tmp_path / "key").write_text(KEY)
    settings = rig(tmp_path, ON + "AIRIG_GATEWAY_KEY_FILE=key\n")
    on = Launcher(settings, engine, console)  # type: ignore[arg-type]
    engine.asked.clear()
    on._retire_gateway(build_plan(on.settings, "cpu", []))
    assert not ours.removed and engine.asked == []
