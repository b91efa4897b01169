"""Issue 35 §5: the first `up` failed with "No such container: a4d312…" and rolled back
everything. Its cause: two runs on the same compose projects at once. `compose up --wait`
lists a project's containers, then inspects each by id until healthy; a second `up`
whose configuration differs (another checkout's .env secrets and images: the e2e kit
uses the default prefix too) recreates them meanwhile, and the first one's inspect finds
its id gone (compose 2.40.3 says exactly "Error response from daemon: No such container:
<id>", reproduced with two real compose runs). `up` and `down` now hold one lock per rig
and engine (launcher/lifecycle/rig_lock.py): the second run waits and says for whom.

The launcher's own listings (the docker SDK lists, then inspects one by one) leave out a
container removed in between, and removing one that is already gone is no failure.
"""

from __future__ import annotations

import fcntl
import io
import itertools
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import docker.errors
import pytest
from docker.models.containers import ContainerCollection
from rich.console import Console
from support import wait_until

import airig.launcher.lifecycle.up
from airig.common.errors import DockerError
from airig.launcher.compose.container import ContainerState
from airig.launcher.compose.docker import Docker
from airig.launcher.compose.plan import build_plan
from airig.launcher.lifecycle import rig_lock
from airig.launcher.lifecycle.up import Launcher, UpResult
from airig.launcher.settings import load_settings

IDS = (f"{n:012x}a4d312" for n in itertools.count(1))


class Engine:
    """Containers of compose projects, one per stack here, as two compose runs share them."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}  # project → id of its container
        self.config: dict[str, str] = {}  # project → the configuration it was made with
        self.lock = threading.Lock()

    def converge(self, project: str, config: str) -> str:
        """`compose up`'s create step: a container whose configuration differs is
        recreated (a new id, the old one removed)."""
        with self.lock:
            if self.config.get(project) != config:
                self.ids[project], self.config[project] = next(IDS), config
            return self.ids[project]


class Compose:
    """One checkout's compose: ``up`` converges, lists, then waits (``hold_at``: until
    ``release`` is set) and inspects the id it listed, as `compose up --wait` does."""

    def __init__(self, engine: Engine, config: str, hold_at: str | None = None) -> None:
        self.engine, self.config, self.hold_at = engine, config, hold_at
        self.waiting, self.release = threading.Event(), threading.Event()
        self.calls: list[tuple[str, str]] = []

    def ensure_network(self, name: str) -> bool:
        return False

    def services(self, stack) -> list[ContainerState]:
        return []

    def up(self, stack) -> None:
        self.calls.append(("up", stack.name))
        listed = self.engine.converge(stack.project, self.config)
        if stack.name == self.hold_at:
            self.waiting.set()
            assert self.release.wait(30), "test gate never opened"
        if self.engine.ids.get(stack.project) != listed:  # the inspect of --wait
            raise DockerError(
                f"starting {stack.name} failed: Error response from daemon: "
                f"No such container: {listed}",
                "see the lines above, or run doctor",
            )

    def down(self, stack) -> None:
        self.calls.append(("down", stack.name))

    def remove_network(self, name: str) -> str:
        return f"network {name} kept"

    def logs(self, stack, service, tail=40, prefix=True) -> str:
        return ""


@pytest.fixture
def lock_dir(tmp_path: Path, monkeypatch) -> Path:
    folder = tmp_path / "locks"
    monkeypatch.setattr(rig_lock, "LOCK_DIR", folder)
    return folder


@pytest.fixture
def checkout(launcher_kit: Path, lock_dir: Path, monkeypatch):
    """A launcher over the kit whose `up` runs only the stacks (what compose does), with
    ``compose`` as its Docker; build, restore and ComfyUI's preparation skipped."""

    def make(compose: Compose):
        settings = load_settings(launcher_kit)
        out = io.StringIO()
        launcher = Launcher(settings, compose, Console(file=out, width=300, color_system=None))  # type: ignore[arg-type]
        plan = build_plan(settings, "cpu", [])
        result = UpResult(plan=plan, choice=None)  # type: ignore[arg-type]
        monkeypatch.setattr(launcher, "_build", lambda plan: None)
        monkeypatch.setattr(launcher, "_up_with_progress", compose.up)
        monkeypatch.setattr(
            launcher, "_up", lambda dry_run, reprove: launcher.start(plan, None, result) or result
        )
        return launcher, plan, out

    monkeypatch.setattr(airig.launcher.lifecycle.up, "apply_restore", lambda *a: None)
    monkeypatch.setattr(airig.launcher.lifecycle.up, "prepare_comfyui", lambda *a: None)
    return make


def in_thread(target) -> tuple[threading.Thread, list]:
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(target())
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


# ------------------------------------------------------------------ the race, kept apart
def test_a_second_up_waits_and_never_recreates_what_the_first_one_waits_on(checkout):
    engine = Engine()
    first = Compose(engine, "checkout A", hold_at="02-compute")
    second = Compose(engine, "checkout B")
    up_a, _, _ = checkout(first)
    up_b, _, out_b = checkout(second)
    a, a_result = in_thread(up_a.up)
    try:
        assert first.waiting.wait(30)  # A's compose waits for 02-compute to be healthy
        b, b_result = in_thread(up_b.up)
        wait_until(lambda: "Waiting" in out_b.getvalue(), "the second up to wait")
        assert second.calls == []  # B's compose has not touched A's containers
        assert "`up` of rig airig on this Docker engine (pid " in out_b.getvalue()
    finally:
        first.release.set()
    a.join(30)
    b.join(30)
    assert not isinstance(a_result[0], BaseException), a_result  # no "No such container"
    assert not isinstance(b_result[0], BaseException), b_result
    assert ("down", "01-infra") not in first.calls  # nothing rolled back
    assert [name for _, name in second.calls] == ["01-infra", "02-compute", "03-agents"]


def test_the_race_itself_without_the_lock(checkout, monkeypatch):
    """What the lock prevents: B's compose recreates the container A listed, and A's
    inspect finds its id gone, the issue's words, and A rolls everything back."""
    monkeypatch.setattr(airig.launcher.lifecycle.up, "rig_lock", _no_lock)
    engine = Engine()
    first = Compose(engine, "checkout A", hold_at="02-compute")
    up_a, _, _ = checkout(first)
    up_b, _, _ = checkout(Compose(engine, "checkout B"))
    a, a_result = in_thread(up_a.up)
    assert first.waiting.wait(30)
    up_b.up()
    first.release.set()
    a.join(30)
    (error,) = a_result
    assert isinstance(error, DockerError)
    assert "No such container: " in error.message and "a4d312" in error.message
    assert ("down", "01-infra") in first.calls


def test_down_waits_for_a_running_up(checkout, lock_dir):
    compose = Compose(Engine(), "A")
    launcher, plan, out = checkout(compose)
    path = rig_lock.lock_path(launcher.settings.project_prefix)
    path.parent.mkdir(parents=True)
    other = os.open(path, os.O_RDWR | os.O_CREAT)  # another run's open file: its own lock
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        down, result = in_thread(lambda: launcher.down(plan, volumes=False, keep_models=True))
        wait_until(lambda: "Waiting" in out.getvalue(), "down to wait")
        assert compose.calls == []
        assert "another `up` or `down` of this rig" in out.getvalue()  # no note: said plainly
    finally:
        os.close(other)
    down.join(30)
    assert not isinstance(result[0], BaseException), result
    assert ("down", "03-agents") in compose.calls


def test_up_runs_itself_again_under_the_lock_it_holds(launcher_kit, lock_dir):
    """After a failed model load `up` calls itself (_after_load_failure): no deadlock."""
    settings = load_settings(launcher_kit)
    said: list[str] = []

    def up_again() -> str:
        with rig_lock.rig_lock(settings, "up", said.append):
            return "ran"

    with rig_lock.rig_lock(settings, "up", said.append):
        assert up_again() == "ran"
    assert said == []


def test_dry_run_takes_no_lock(checkout, monkeypatch):
    launcher, _, _ = checkout(Compose(Engine(), "A"))
    monkeypatch.setattr(rig_lock.fcntl, "flock", _no_flock)
    launcher.up(dry_run=True)


def test_another_users_lock_file_is_locked_read_only(launcher_kit, lock_dir, monkeypatch):
    """/tmp's sticky bit refuses writing another user's file: flock needs no write."""
    settings = load_settings(launcher_kit)
    path = rig_lock.lock_path(settings.project_prefix)
    path.parent.mkdir(parents=True)
    path.write_text('{"action": "up"}')
    real_open = os.open

    def as_another_user(name, flags, *mode):
        if flags & (os.O_RDWR | os.O_WRONLY):
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, flags, *mode)

    monkeypatch.setattr(rig_lock.os, "open", as_another_user)
    with rig_lock.rig_lock(settings, "up", print):
        pass
    assert path.read_text() == '{"action": "up"}'  # the note is kept, not a failure


def test_the_lock_is_the_engines_and_the_prefixs(lock_dir):
    one = rig_lock.lock_path("airig", "unix:///var/run/docker.sock")
    assert one == rig_lock.lock_path("airig", "unix:///var/run/docker.sock")
    assert one != rig_lock.lock_path("airig2", "unix:///var/run/docker.sock")
    assert one != rig_lock.lock_path("airig", "tcp://10.0.0.2:2376")
    assert one.parent == lock_dir


# ------------------------------------------------------------------ listed, then gone
class Api:
    """The engine's two answers the docker SDK's containers.list combines: the list, then
    one inspect per id; ``gone`` ids are listed but removed before their inspect."""

    def __init__(self, rows: dict[str, dict[str, str]], gone: set[str]) -> None:
        self.rows, self.gone = rows, gone
        self.removed: list[str] = []

    def containers(self, **kwargs) -> list[dict]:
        return [{"Id": cid} for cid in self.rows]

    def inspect_container(self, container: str) -> dict:
        if container in self.gone:
            raise docker.errors.NotFound(f"No such container: {container}")
        labels = self.rows[container]
        return {"Id": container, "Name": f"/{labels['name']}", "Config": {"Labels": labels}}

    def remove_container(self, container: str, **kwargs) -> None:
        if container in self.gone:
            raise docker.errors.NotFound(f"No such container: {container}")
        self.removed.append(container)


def sdk_docker(api: Api) -> Docker:
    """The adapter over the real docker SDK collection, the engine answering through ``api``."""
    client = SimpleNamespace(api=api)
    adapter = Docker()
    adapter._sdk = SimpleNamespace(containers=ContainerCollection(client=client), api=api)
    return adapter


def gateway(project: str) -> dict[str, str]:
    return {
        "name": f"{project}-gateway-1",
        "com.docker.compose.project": project,
        "com.docker.compose.service": "gateway",
    }


def test_a_container_gone_between_list_and_inspect_is_left_out():
    api = Api({"a4d312": gateway("airig-agents"), "b5e423": gateway("other-agents")}, {"a4d312"})
    found = sdk_docker(api).containers(label="com.docker.compose.service=gateway")
    assert [c.id for c in found] == ["b5e423"]


def test_retiring_a_gateway_that_vanished_fails_nothing(launcher_kit, lock_dir):
    settings = load_settings(launcher_kit)
    api = Api({"a4d312": gateway("airig-agents"), "c6f534": gateway("airig-agents")}, set())
    launcher = Launcher(settings, sdk_docker(api), Console(file=io.StringIO()))
    plan = build_plan(settings, "cpu", [])
    api.gone.add("c6f534")  # removed after its inspect, before its removal
    launcher._retire_gateway(plan)
    assert api.removed == ["a4d312"]
    api.gone.add("a4d312")  # and one gone before its inspect
    launcher._retire_gateway(plan)


# ------------------------------------------------------------------ helpers
def _no_lock(settings, action, say, enabled=True):
    import contextlib

    return contextlib.nullcontext()


def _no_flock(fd, operation):
    raise AssertionError("a dry run locks nothing")


def test_a_unit_test_never_waits_on_the_machines_rig_lock():
    """tests/conftest.py's own_rig_locks: the real e2e kit's `up` holds the lock in the
    temporary folder for minutes; a unit test's `up` on a fake engine must not wait for it."""
    import tempfile

    assert Path(tempfile.gettempdir()) != rig_lock.LOCK_DIR
    assert rig_lock.lock_path("airig").parent == rig_lock.LOCK_DIR
