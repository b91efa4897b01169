"""`up` stopped by the user or by a service (issue 35 §5): Ctrl-C is "interrupted" (exit
130) with what this run started rolled back and its network removed; a failed stack's
error points at log lines only when some were printed, and a container gone between
`compose up` and the inspection is said as such."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import sqlite3
import sys
from pathlib import Path

import docker.errors
import pytest
from rich.console import Console
from support import error_lines

import airig.launcher.lifecycle.up
from airig.common.errors import DockerError
from airig.launcher.cli.edge import run_at_edge
from airig.launcher.compose.container import ContainerState
from airig.launcher.compose.plan import build_plan
from airig.launcher.lifecycle.up import Interrupted, Launcher, UpResult
from airig.launcher.settings import load_settings


class Adapter:
    """The compose side of the adapter: ``up`` of ``stop_at`` does what ``on_up`` says."""

    def __init__(self, stop_at: str, on_up, network_exists: bool = False) -> None:
        self.stop_at, self.on_up, self.network_exists = stop_at, on_up, network_exists
        self.calls: list[tuple[str, str]] = []
        self.failing: list[ContainerState] = []
        self.logs_text = ""

    def ensure_network(self, name: str) -> bool:
        self.calls.append(("ensure_network", name))
        return not self.network_exists

    def remove_network(self, name: str) -> str:
        self.calls.append(("remove_network", name))
        return f"network {name} removed"

    def services(self, stack) -> list[ContainerState]:
        return self.failing if ("up", stack.name) in self.calls else []

    def up(self, stack) -> None:
        self.calls.append(("up", stack.name))
        if stack.name == self.stop_at:
            self.on_up()

    def down(self, stack) -> None:
        self.calls.append(("down", stack.name))

    def logs(self, stack, service, tail=40, prefix=True) -> str:
        if isinstance(self.logs_text, Exception):
            raise self.logs_text
        return self.logs_text

    health_outputs: list[str] | Exception = []

    def health_log(self, container: str) -> list[str]:
        if isinstance(self.health_outputs, Exception):
            raise self.health_outputs
        return self.health_outputs


def ctrl_c() -> None:
    raise KeyboardInterrupt


def compose_saw_the_sigint() -> None:
    """Compose gets the terminal's SIGINT too and may fail before Python raises."""
    with contextlib.suppress(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    raise DockerError("starting 02-compute failed: exit code 130", "see the lines above")


@pytest.fixture
def launch(launcher_kit: Path, monkeypatch):
    """(launcher, adapter, plan, console text) over the kit, build and restore skipped."""

    def make(adapter: Adapter):
        settings = load_settings(launcher_kit)
        out = io.StringIO()
        launcher = Launcher(settings, adapter, Console(file=out, width=200, color_system=None))  # type: ignore[arg-type]
        monkeypatch.setattr(launcher, "_build", lambda plan: None)
        monkeypatch.setattr(launcher, "_up_with_progress", adapter.up)
        monkeypatch.setattr(airig.launcher.lifecycle.up, "apply_restore", lambda *a: None)
        monkeypatch.setattr(airig.launcher.lifecycle.up, "prepare_comfyui", lambda *a: None)
        plan = build_plan(settings, "cpu", [])
        return launcher, plan, out

    return make


@pytest.mark.parametrize("interrupt", [ctrl_c, compose_saw_the_sigint])
def test_ctrl_c_rolls_back_this_run_and_its_network(launch, interrupt) -> None:
    adapter = Adapter("02-compute", interrupt)
    launcher, plan, out = launch(adapter)
    with pytest.raises(Interrupted):
        launcher.start(plan, None, UpResult(plan=plan, choice=None))  # type: ignore[arg-type]
    assert adapter.calls[-3:] == [
        ("down", "02-compute"), ("down", "01-infra"), ("remove_network", plan.network),
    ]  # fmt: skip
    assert "failed to start" not in out.getvalue()
    assert signal.getsignal(signal.SIGINT) is not None  # the handler is put back


def test_ctrl_c_keeps_a_network_this_run_did_not_create(launch) -> None:
    adapter = Adapter("01-infra", ctrl_c, network_exists=True)
    launcher, plan, _ = launch(adapter)
    with pytest.raises(Interrupted):
        launcher.start(plan, None, UpResult(plan=plan, choice=None))  # type: ignore[arg-type]
    assert ("down", "01-infra") in adapter.calls
    assert ("remove_network", plan.network) not in adapter.calls


@pytest.mark.parametrize("where", ["start", "before"])
def test_ctrl_c_at_the_edge_is_one_line_and_exit_130(launch, monkeypatch, capsys, where) -> None:
    """In the stacks (Interrupted) or before them (whatever the installed typer/click make
    of a KeyboardInterrupt): one ✘ line, no advice about .env, exit 130."""
    import typer

    adapter = Adapter("01-infra", ctrl_c)
    launcher, plan, _ = launch(adapter)
    app = typer.Typer()

    @app.command()
    def up() -> None:
        if where == "before":
            raise KeyboardInterrupt
        launcher.start(plan, None, UpResult(plan=plan, choice=None))  # type: ignore[arg-type]

    @app.command()
    def other() -> None:  # two commands: typer keeps the group, as the kit's app
        pass

    monkeypatch.setattr(sys, "argv", ["start_services.py", "up"])
    with pytest.raises(SystemExit) as exit_:
        run_at_edge(app)
    assert exit_.value.code == 130
    err = capsys.readouterr().err
    assert error_lines(err) == ["✘ interrupted"], repr(err)
    assert ".env" not in err


# ------------------------------------------------------------------ a failed stack's error
def compose_failed() -> None:
    raise DockerError("starting 01-infra failed: dependency failed to start", "see above")


def failed_start(launch, logs) -> tuple[DockerError, str]:
    """01-infra fails with its brain exited (1); ``logs``: what reading its logs gives."""
    adapter = Adapter("01-infra", compose_failed)
    adapter.failing = [ContainerState("brain", "airig-brain-1", "exited", "", 1, [])]
    adapter.logs_text = logs
    launcher, plan, out = launch(adapter)
    with pytest.raises(DockerError) as raised:
        launcher.start(plan, None, UpResult(plan=plan, choice=None))  # type: ignore[arg-type]
    assert ("down", "01-infra") in adapter.calls  # rolled back all the same
    return raised.value, out.getvalue()


def test_log_lines_printed_are_pointed_at(launch) -> None:
    error, out = failed_start(launch, "boom: BRAIN_ADMIN_TOKEN is empty\n")
    assert "    boom: BRAIN_ADMIN_TOKEN is empty" in out
    assert error.message.startswith("01-infra: brain failed to start")
    assert "read the log lines above" in error.hint


@pytest.mark.parametrize("logs", ["", "\n\n"])
def test_no_log_lines_printed_none_is_pointed_at(launch, logs) -> None:
    error, _ = failed_start(launch, logs)
    assert error.message.startswith("01-infra: brain failed to start")
    assert "above" not in error.hint
    assert "no log lines" in error.hint


@pytest.mark.parametrize(
    "gone",
    [
        DockerError(
            "reading logs of 01-infra failed: Error response from daemon: No such container: "
            "airig-brain-1",
            "see the lines above, or run doctor",
        ),
        docker.errors.NotFound("No such container: airig-brain-1"),
    ],
    ids=["compose", "sdk"],
)
def test_a_container_gone_since_compose_up_is_said_not_a_crash(launch, gone) -> None:
    error, out = failed_start(launch, gone)
    assert "its container is gone" in out
    assert error.message.startswith("01-infra: brain: container removed while `up` waited")
    assert "above" not in error.hint and "run up again" in error.hint


def test_an_unhealthy_service_shows_why_its_healthcheck_failed(launch) -> None:
    """Its own log says the server started; the healthcheck's output says why (a check that
    timed out on a loaded host turned the gateway unhealthy with a clean log)."""
    adapter = Adapter("01-infra", compose_failed)
    adapter.failing = [ContainerState("gateway", "airig-gateway-1", "running", "unhealthy", 0, [])]
    adapter.logs_text = "Uvicorn running on http://0.0.0.0:8070\n"
    adapter.health_outputs = ["", "gateway unhealthy: [red]TimeoutError: timed out\n"]
    launcher, plan, out = launch(adapter)
    with pytest.raises(DockerError):
        launcher.start(plan, None, UpResult(plan=plan, choice=None))  # type: ignore[arg-type]
    assert "    healthcheck: gateway unhealthy: [red]TimeoutError: timed out" in out.getvalue()


@pytest.mark.parametrize("outputs", [[], [""], docker.errors.NotFound("gone")])
def test_no_healthcheck_output_adds_no_line(launch, outputs) -> None:
    adapter = Adapter("01-infra", compose_failed)
    adapter.failing = [ContainerState("gateway", "airig-gateway-1", "running", "unhealthy", 0, [])]
    adapter.logs_text = "started\n"
    adapter.health_outputs = outputs
    launcher, plan, out = launch(adapter)
    with pytest.raises(DockerError):
        launcher.start(plan, None, UpResult(plan=plan, choice=None))  # type: ignore[arg-type]
    assert "healthcheck:" not in out.getvalue()


def test_the_brain_s_refusal_of_an_empty_postgres_store_reaches_the_user(
    launch, tmp_path, monkeypatch
) -> None:
    """Issue 38: a brain on an empty PostgreSQL store beside a SQLite store with plans
    exits with one log line (store/left_behind.py); `up` prints the failed brain's last log
    lines, so that line, naming `migrate-store` and the knob, is what the user reads."""
    from airig.brain import __main__ as brain_main
    from airig.brain.store import left_behind
    from airig.brain.store.db import Database
    from airig.common.jsonlog import JsonFormatter

    old = tmp_path / "brain.db"
    with sqlite3.connect(old) as conn:
        conn.execute("CREATE TABLE plans (id TEXT)")
        conn.executemany("INSERT INTO plans VALUES (?)", [("a",), ("b",)])
    conn.close()
    empty = Database(tmp_path / "empty.db")
    monkeypatch.setattr(brain_main, "serve", lambda _: left_behind.check(empty, old, False))
    # the brain's JSON formatter on a handler of the test's own: setup_json_logging
    # would rewire this process's logging
    monkeypatch.setattr(brain_main, "setup_json_logging", lambda: None)
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", "admin-secret-token")
    monkeypatch.setenv("WORKER_BOOTSTRAP_TOKEN", "bootstrap-secret-token")
    printed = io.StringIO()
    handler = logging.StreamHandler(printed)
    handler.setFormatter(JsonFormatter())
    brain_main.log.addHandler(handler)
    try:
        assert brain_main.main([]) == 2
    finally:
        brain_main.log.removeHandler(handler)
        empty.close()
    (logged,) = printed.getvalue().splitlines()

    adapter = Adapter("03-agents", compose_failed)
    adapter.failing = [ContainerState("brain", "airig-brain-1", "restarting", "", 2, [])]
    adapter.logs_text = "\n".join([logged] * 3) + "\n"  # a restart loop: the same line
    launcher, plan, out = launch(adapter)
    with pytest.raises(DockerError) as raised:
        launcher.start(plan, None, UpResult(plan=plan, choice=None))  # type: ignore[arg-type]
    shown = " ".join(out.getvalue().split())  # the console wraps at its width
    assert " ".join(logged.split()) in shown
    assert "python start_services.py migrate-store" in shown
    assert "AIRIG_BRAIN_START_EMPTY=1" in shown and "holds 2 plans" in shown
    assert "read the log lines above" in raised.value.hint
