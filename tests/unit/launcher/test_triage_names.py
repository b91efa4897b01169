"""The names `triage`, `logs`, `restart` and the brain's alerts share (issue 22): the
command an alert prints (`triage whisper`) finds the active variant, and triage shows the
brain's active alerts (collectors fed a fake engine and a fake brain)."""

from __future__ import annotations

import json

import pytest
from support import one_error, run_cli

import airig.launcher.brain_client as brain_client
import airig.launcher.views.triage.collect as collect
from airig.common.errors import ConfigError
from airig.launcher.compose.service_names import locate, matching, resolve
from airig.launcher.views.triage import ContainerFacts

RUNNING = ("whisper-init", "whisper-cpu", "ollama-gpu-nvidia", "worker-cpu", "worker-gpu0")
ALERT = {
    "kind": "service_down", "subject": "whisper", "fired_at": 1_700_000_000.0,
    "message": "3 probes in a row failed (JSONDecodeError: Expecting value: line 1 column 1 "
    "(char 0)); run `python start_services.py triage whisper`",
}  # fmt: skip


def test_a_kind_finds_its_active_variant_never_its_init_container():
    assert matching(RUNNING, "whisper") == ["whisper-cpu"]
    assert matching(RUNNING, "ollama") == ["ollama-gpu-nvidia"]
    assert matching(RUNNING, "whisper-init") == ["whisper-init"]  # an exact name is itself
    assert matching(RUNNING, "worker") == ["worker-cpu", "worker-gpu0"]
    assert matching(RUNNING, "comfyui") == []


def test_an_unknown_name_and_a_name_of_several_are_one_line_each():
    with pytest.raises(ConfigError) as caught:
        resolve(RUNNING, "comfyui")
    assert caught.value.message == "no running service named 'comfyui'"
    assert caught.value.hint.startswith("one of: ollama-gpu-nvidia, whisper-cpu, whisper-init")
    with pytest.raises(ConfigError, match="'worker' names 2 running services"):
        locate({"03-agents": ["worker-cpu", "worker-gpu0"]}, "worker")
    assert locate({"02-compute": RUNNING[:3], "03-agents": ["brain"]}, "whisper") == (
        "02-compute", "whisper-cpu",
    )  # fmt: skip


def container(stack: str, service: str, status: str = "running", **kw) -> ContainerFacts:
    return ContainerFacts(stack, service, f"airig-{service}-1", status, **kw)


KIT = [
    container("02-compute", "whisper-init", "exited", exit_code=0),
    container("02-compute", "whisper-cpu", health="healthy"),
    container("03-agents", "brain", health="healthy"),
]


class FakeBrain:
    timeout_s = 30.0

    def __init__(self, alerts: list[dict]) -> None:
        self._alerts = alerts

    def workers(self) -> list[dict]:
        return []

    def alerts(self) -> list[dict]:
        return self._alerts


@pytest.fixture
def kit_with_alert(launcher_kit, monkeypatch):
    monkeypatch.setattr(collect, "_containers", lambda settings, docker, since_s: list(KIT))
    monkeypatch.setattr(collect, "expected_workers", lambda settings: {})
    fake = FakeBrain([ALERT])
    monkeypatch.setattr(brain_client.BrainClient, "from_settings", classmethod(lambda cls, s: fake))
    return fake


def test_the_command_the_alert_prints_works_and_shows_the_alert(
    kit_with_alert, monkeypatch, capsys
):
    code, out, err = run_cli(
        monkeypatch, capsys, None, "triage", "whisper", "--json", "--no-verify"
    )
    assert "Traceback" not in out + err
    data = json.loads(out)
    assert code == 1 and data["healthy"] is False
    [finding] = data["findings"]
    assert (finding["class"], finding["service"]) == ("service down", "whisper-cpu")
    assert finding["evidence"][0].startswith("brain alert service_down whisper since ")


def test_triage_is_not_healthy_while_the_brain_holds_an_alert(kit_with_alert, monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, None, "triage", "--no-verify")
    assert code == 1
    first = next(line for line in out.splitlines() if line.startswith("✘"))
    assert first == "✘ 1. [service down] whisper-cpu does not answer the brain's probes"
    kit_with_alert._alerts = []
    code, out, _ = run_cli(monkeypatch, capsys, None, "triage", "--no-verify")
    assert code == 0


def test_a_name_nothing_runs_is_refused_with_what_runs(kit_with_alert, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, None, "triage", "comfyui", "--no-verify")
    line = one_error(code, err, "comfyui")
    assert line == "✘ no running service named 'comfyui'"


def test_a_name_only_an_alert_knows_is_shown_not_refused(kit_with_alert, monkeypatch, capsys):
    """whisper's containers gone (`docker rm`), the brain's alert still holds."""
    monkeypatch.setattr(collect, "_containers", lambda settings, docker, since_s: KIT[2:])
    code, out, _ = run_cli(monkeypatch, capsys, None, "triage", "whisper", "--json", "--no-verify")
    [finding] = json.loads(out)["findings"]
    assert code == 1
    assert (finding["class"], finding["service"]) == ("service down", "whisper")
    assert "`python start_services.py up` creates" in finding["action"]
