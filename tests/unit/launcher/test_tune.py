"""`tune`: the .env edit, the tuning log, rollback, the runbook's order, refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import airig.launcher.cli.runbook as runbook
from airig.launcher.compose.container import ContainerState
from airig.launcher.compose.plan import StackPlan, plan_for_running
from airig.launcher.lifecycle.tune import (
    KnobError,
    apply,
    log_path,
    order_warning,
    parse_assignment,
    pending,
    plan_change,
    read_log,
    rollback_change,
    services_using,
)
from airig.launcher.settings import checkout_settings
from tests.support import one_error, run_cli

ENV = """# my rig
OLLAMA_CONTEXT_LENGTH=8192
# keep this comment
AIRIG_CPU_WORKERS=2
BRAIN_ADMIN_TOKEN=secret-one
"""


@pytest.fixture
def rig(launcher_kit: Path) -> Path:
    (launcher_kit / ".env").write_text(ENV)
    return launcher_kit


def _tune(assignment: str, why: str = "", restarted: list[str] | None = None) -> dict[str, Any]:
    settings = checkout_settings()
    plan = plan_for_running(settings)
    change = plan_change(settings, plan, assignment)
    calls = restarted if restarted is not None else []

    def restart(_stack: StackPlan, name: str) -> bool:
        calls.append(name)
        return True

    return apply(settings, change, why, restart, lambda: None)


def test_the_env_edit_keeps_other_lines_and_comments(rig: Path) -> None:
    _tune("OLLAMA_CONTEXT_LENGTH=4096")
    assert (rig / ".env").read_text() == ENV.replace("8192", "4096")


def test_a_change_is_one_log_entry_and_recreates_what_uses_the_knob(rig: Path) -> None:
    restarted: list[str] = []
    _tune("AIRIG_CPU_WORKERS=1", why="OOM under load", restarted=restarted)
    assert restarted == ["worker-cpu"]
    (entry,) = read_log(rig / ".airig" / "tuning.log")
    assert {k: entry[k] for k in ("id", "knob", "before", "after", "why", "services")} == {
        "id": 1,
        "knob": "AIRIG_CPU_WORKERS",
        "before": "2",
        "after": "1",
        "why": "OOM under load",
        "services": ["worker-cpu"],
    }
    assert entry["healthy"] is True
    assert entry["triage_before"] is None and entry["triage_after"] is None
    assert entry["rollback_of"] is None and entry["time"]


def test_rollback_restores_the_before_value_and_logs_itself(rig: Path) -> None:
    _tune("AIRIG_CPU_WORKERS=1")
    _tune("OLLAMA_CONTEXT_LENGTH=4096")
    settings = checkout_settings()
    plan = plan_for_running(settings)
    for expected_id, knob in ((2, "OLLAMA_CONTEXT_LENGTH"), (1, "AIRIG_CPU_WORKERS")):
        change, undone = rollback_change(settings, plan)
        assert (undone, change.knob) == (expected_id, knob)
        apply(settings, change, "back", lambda _s, _n: True, lambda: None, undone)
    assert (rig / ".env").read_text() == ENV
    entries = read_log(log_path(settings))
    assert [e["rollback_of"] for e in entries] == [None, None, 2, 1]
    assert pending(entries) == []


def test_rollback_with_nothing_to_undo_is_one_line(rig: Path, monkeypatch, capsys) -> None:
    code, _out, err = run_cli(monkeypatch, capsys, None, "tune", "--rollback")
    assert "nothing to roll back" in one_error(code, err, "roll back")


def test_skipping_ahead_in_the_runbook_order_is_said_once() -> None:
    warning = order_warning("OLLAMA_CONTEXT_LENGTH", [])
    assert warning.startswith("OLLAMA_CONTEXT_LENGTH is a memory knob, but the tuning log")
    assert "AIRIG_CPU_WORKERS" in warning
    assert order_warning("OLLAMA_CONTEXT_LENGTH", [{"knob": "AIRIG_WORKER_PREFETCH"}]) == ""
    assert order_warning("AIRIG_CPU_WORKERS", []) == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("OLLAMA_NUM_GPU=10", "OLLAMA_NUM_GPU is not a knob tune changes"),
        ("AIRIG_CPU_WORKERS=-1", "AIRIG_CPU_WORKERS='-1' is not a valid value"),
        ("OLLAMA_KV_CACHE_TYPE=q5", "OLLAMA_KV_CACHE_TYPE='q5' is not a valid value"),
        ("AIRIG_CPU_WORKERS", "'AIRIG_CPU_WORKERS' is not KNOB=VALUE"),
    ],
)
def test_unknown_knobs_and_bad_values_are_refused(text: str, message: str) -> None:
    with pytest.raises(KnobError) as caught:
        parse_assignment(text)
    assert caught.value.message == message and caught.value.hint
    assert caught.value.exit_code == 2


def test_the_cli_refuses_an_unknown_knob_with_exit_2_and_changes_nothing(
    rig: Path, monkeypatch, capsys
) -> None:
    code, _out, err = run_cli(monkeypatch, capsys, None, "tune", "OLLAMA_NUM_GPU=10")
    assert code == 2
    assert one_error(code, err, "OLLAMA_NUM_GPU") == "✘ OLLAMA_NUM_GPU is not a knob tune changes"
    assert (rig / ".env").read_text() == ENV
    assert not (rig / ".airig" / "tuning.log").exists()


def test_the_log_shows_as_json(rig: Path, monkeypatch, capsys) -> None:
    _tune("AIRIG_CPU_WORKERS=1", why="less")
    code, out, _err = run_cli(monkeypatch, capsys, None, "tune", "--log", "--json")
    assert code == 0
    assert [e["why"] for e in json.loads(out)] == ["less"]


def test_only_services_interpolating_the_knob_in_the_active_profile(rig: Path) -> None:
    plan = plan_for_running(checkout_settings())
    found = {(s.name, name) for s, name in services_using(plan, "OLLAMA_KV_CACHE_TYPE")}
    assert found == {("02-compute", "ollama-cpu")}


class _Running:
    """The adapter as `tune` sees it: ollama-cpu and worker-cpu up and healthy."""

    def __init__(self) -> None:
        self.recreated: list[str] = []

    def services(self, stack: StackPlan) -> list[ContainerState]:
        names = {"02-compute": ["ollama-cpu"], "03-agents": ["worker-cpu"]}.get(stack.name, [])
        return [ContainerState(n, n, "running", "healthy", None, []) for n in names]

    def states(self, stack: StackPlan, service: str) -> list[ContainerState]:
        return [s for s in self.services(stack) if s.service == service]

    def restart(self, stack: StackPlan, service: str, recreate: bool) -> None:
        assert recreate  # a restarted container would keep the old environment
        self.recreated.append(service)


def test_the_cli_tunes_warns_when_skipping_ahead_and_rolls_back(
    rig: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = _Running()
    monkeypatch.setattr(runbook, "ComposeServices", lambda _docker: fake)
    code, out, err = run_cli(
        monkeypatch, capsys, None, "tune", "OLLAMA_CONTEXT_LENGTH=4096", "--why", "OOM"
    )
    assert code == 0 and fake.recreated == ["ollama-cpu"]
    assert err.startswith("⚠ OLLAMA_CONTEXT_LENGTH is a memory knob")
    assert "OLLAMA_CONTEXT_LENGTH: 8192 → 4096 (recreated: ollama-cpu); logged as change 1" in out
    code, out, err = run_cli(monkeypatch, capsys, None, "tune", "--rollback")
    assert code == 0 and fake.recreated == ["ollama-cpu", "ollama-cpu"] and not err
    assert (rig / ".env").read_text() == ENV
    entries = read_log(rig / ".airig" / "tuning.log")
    assert [(e["after"], e["rollback_of"], e["why"]) for e in entries] == [
        ("4096", None, "OOM"),
        ("8192", 1, "rollback of change 1"),
    ]


def test_the_log_records_what_triage_said_before_and_after(
    rig: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    said = iter(["1: memory ollama-cpu", "no findings"])
    monkeypatch.setattr(runbook, "_triage_summary", lambda _settings: next(said))
    monkeypatch.setattr(runbook, "ComposeServices", lambda _docker: _Running())
    code, _out, _err = run_cli(monkeypatch, capsys, None, "tune", "AIRIG_WORKER_PREFETCH=2")
    assert code == 0
    (entry,) = read_log(rig / ".airig" / "tuning.log")
    assert (entry["triage_before"], entry["triage_after"]) == (
        "1: memory ollama-cpu",
        "no findings",
    )


def test_the_triage_summary_is_one_line_of_its_findings(
    rig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the test's engine is unreachable: triage says so, as one finding
    summary = runbook._triage_summary(checkout_settings())
    assert summary is not None and "\n" not in summary


def test_the_runbooks_memory_and_offload_knobs_reach_the_services_that_read_them(rig: Path) -> None:
    """OLLAMA_NUM_PARALLEL and OLLAMA_GPU_OVERHEAD recreate Ollama; a Whisper model change
    recreates the Whisper init container (it pulls and verifies the new model)."""
    plan = plan_for_running(checkout_settings())
    for knob in ("OLLAMA_NUM_PARALLEL", "OLLAMA_GPU_OVERHEAD"):
        found = {(s.name, name) for s, name in services_using(plan, knob)}
        assert found == {("02-compute", "ollama-cpu")}, knob
    whisper = {name for _s, name in services_using(plan, "AIRIG_WHISPER_MODELS")}
    assert "whisper-init" in whisper or any("whisper" in n for n in whisper)
    assert parse_assignment("AIRIG_WHISPER_MODELS=Systran/faster-whisper-base")
    with pytest.raises(KnobError):
        parse_assignment("AIRIG_WHISPER_MODELS=small")  # a size alone names no repository


def test_offload_is_the_last_stage_and_says_what_it_skipped() -> None:
    warning = order_warning("OLLAMA_GPU_OVERHEAD", [{"knob": "AIRIG_CPU_WORKERS"}])
    assert warning.startswith("OLLAMA_GPU_OVERHEAD is an offload knob, but the tuning log")
    assert "OLLAMA_NUM_PARALLEL" in warning
    tried = [{"knob": "AIRIG_CPU_WORKERS"}, {"knob": "OLLAMA_NUM_PARALLEL"}]
    assert order_warning("OLLAMA_GPU_OVERHEAD", tried) == ""
