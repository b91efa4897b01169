"""`migrate-store` (issue 38): the brain's SQLite store moved into the kit's PostgreSQL
service before a brain starts on it (airig/launcher/lifecycle/store_move.py).

No real engine: a fake of the Docker adapter records every call in order. What must hold:
each refusal changes nothing (no container, no network, no stop); the happy path is
postgres up → its health → one copy container of the kit's image on the kit's network with
the state volume read-only and the URL in its environment, removed after; the password is
in no printed line, even when the container echoes it; a failed copy is one line with
postgres left running and nothing else touched."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import docker.errors
import pytest
from support import one_error, run_cli, write_env

from airig.common.errors import ConfigError, DockerError
from airig.launcher.compose import postgres
from airig.launcher.compose.container import ContainerState
from airig.launcher.compose.docker import PROBE_LABEL, PROJECT_LABEL
from airig.launcher.lifecycle import store_move
from airig.launcher.lifecycle.store_move import StoreMoveError, move_store, scrubber
from airig.launcher.settings import load_settings

# Every character that ends or changes a URL's user part, a shell word or a .env value
HOSTILE = "p@ss:w/o%rd#?&=+ '\"$x{y}\\"
TABLE_LINES = [
    b"copying plans: 3 rows\n",
    b"plans                   3 rows, checksum 00000000000000aa matches\n",
    b"the brain's store /tmp/airig-store-x/brain.db is copied into "
    b"postgresql+psycopg://airig:***@postgres:5432/brain\n",
]


@pytest.fixture(autouse=True)
def no_shell_settings(monkeypatch):
    for key in [k for k in os.environ if k.startswith(("AIRIG_", "POSTGRES_"))]:
        monkeypatch.delenv(key)


def settings_of(kit: Path, **values: str):
    values = {"AIRIG_BRAIN_STORE": "postgres", "POSTGRES_PASSWORD": HOSTILE,
              "AIRIG_PROJECT_PREFIX": f"mv{os.getpid()}", **values}  # fmt: skip
    write_env(kit, **values)
    return load_settings(kit)


class Running:
    """A container as the SDK lists it."""

    def __init__(self, **labels: str) -> None:
        self.labels = labels


class CopyContainer:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def logs(self, stream: bool = False, follow: bool = False, stdout: bool = True,
             stderr: bool = True) -> Any:  # fmt: skip
        if stream:
            self.engine.calls.append(("copy-logs", stdout, stderr))
            return iter(self.engine.copy_out)
        return self.engine.copy_err

    def wait(self) -> dict[str, int]:
        return {"StatusCode": self.engine.copy_code}

    def remove(self, force: bool = False) -> None:
        self.engine.calls.append(("remove", "copy", force))


class Containers:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def run(self, image: str, **options: Any) -> Any:
        if options.get("detach"):
            self.engine.calls.append(("copy", image, options))
            return CopyContainer(self.engine)
        self.engine.calls.append(("look", image, options))
        return self.engine.look_out

    def get(self, name: str) -> Any:
        engine = self.engine

        class Left:
            def remove(self, force: bool = False) -> None:
                engine.calls.append(("remove", "look", force))

        return Left()


class Compose:
    def __init__(self, engine: Engine, stack: Any) -> None:
        self.engine, self.stack = engine, stack

    def up(self, **options: Any) -> None:
        self.engine.calls.append(("compose-up", self.stack.name, options))
        self.engine.profiles = self.stack.profiles


class Engine:
    """The Docker adapter's surface migrate-store uses, each call recorded in order."""

    def __init__(self, *, brain: bool = False, volume: bool = True, health: str = "healthy",
                 look: dict[str, Any] | None = None, copy_code: int = 0,
                 copy_err: bytes = b"", image: bool = True) -> None:  # fmt: skip
        self.calls: list[tuple[Any, ...]] = []
        self.brain, self.volume, self.health, self.image = brain, volume, health, image
        found = {"store": True, "plans": 3} if look is None else look
        self.look_out = (json.dumps(found) + "\n").encode()
        self.copy_out: list[bytes] = list(TABLE_LINES)
        self.copy_code, self.copy_err = copy_code, copy_err
        self.containers_api = Containers(self)
        engine = self

        class Volumes:
            def get(self, name: str) -> object:
                engine.calls.append(("volume", name))
                if not engine.volume:
                    raise docker.errors.NotFound("no such volume")
                return object()

        class Sdk:
            volumes = Volumes()

        self._sdk = Sdk()

    def has_image(self, image: str) -> bool:
        self.calls.append(("has-image", image))
        return self.image

    def containers(self, **filters: str) -> list[Running]:
        self.calls.append(("containers", filters))
        project = filters["label"].split("=", 1)[1]
        return [Running(**{PROJECT_LABEL: project, "com.docker.compose.service": "brain"})] \
            if self.brain and project.endswith("-agents") else []  # fmt: skip

    def sdk(self) -> Any:
        return self._sdk

    def probe_sdk(self, timeout: float) -> Any:
        class Client:
            containers = self.containers_api

        return Client()

    def down(self, stack: Any) -> None:
        self.calls.append(("down", stack.name))

    def ensure_network(self, name: str) -> bool:
        self.calls.append(("network", name))
        return False

    def client(self, stack: Any) -> Any:
        class Client:
            compose = Compose(self, stack)

        return Client()

    def service_states(self, stack: Any, service: str) -> list[ContainerState]:
        self.calls.append(("wait", stack.name, service))
        return [ContainerState(service, f"{stack.project}-{service}-1", "running", self.health,
                               None)]  # fmt: skip

    def kinds(self) -> list[str]:
        return [c[0] for c in self.calls]

    def changes(self) -> list[tuple[Any, ...]]:
        """What changes the kit: a stop, a network, a service started, a copy."""
        return [c for c in self.calls if c[0] in ("down", "network", "compose-up", "copy")]


def run(settings: Any, engine: Engine, yes: bool = False) -> list[str]:
    said: list[str] = []
    move_store(settings, engine, said.append, yes=yes)  # type: ignore[arg-type]
    return said


def refused(settings: Any, engine: Engine, yes: bool = False) -> StoreMoveError:
    said: list[str] = []
    with pytest.raises(StoreMoveError) as caught:
        move_store(settings, engine, said.append, yes=yes)  # type: ignore[arg-type]
    assert said == [] or yes
    return caught.value


# ------------------------------------------------------------------ refusals
def test_the_sqlite_knob_is_refused_before_the_engine_is_asked(kit):
    engine = Engine()
    error = refused(settings_of(kit, AIRIG_BRAIN_STORE="sqlite"), engine)
    assert "AIRIG_BRAIN_STORE is sqlite" in error.message
    assert "AIRIG_BRAIN_STORE=postgres" in error.hint
    assert engine.calls == []


def test_a_placeholder_password_is_refused_before_the_engine_is_asked(kit):
    engine = Engine()
    with pytest.raises(ConfigError, match="POSTGRES_PASSWORD is empty"):
        run(settings_of(kit, POSTGRES_PASSWORD="change-me"), engine)
    assert engine.calls == []


def test_a_missing_state_volume_is_no_store_and_changes_nothing(kit):
    engine = Engine(volume=False)
    settings = settings_of(kit)
    error = refused(settings, engine)
    assert f"no SQLite store on the brain's state volume {settings.project_prefix}-brain-state" \
        in error.message  # fmt: skip
    assert engine.changes() == []
    assert "look" not in engine.kinds()  # no volume: no container made to look into it


@pytest.mark.parametrize("found", [{"store": False, "plans": None}, {"store": False}])
def test_a_volume_without_a_sqlite_store_changes_nothing(kit, found):
    engine = Engine(look=found)
    error = refused(settings_of(kit), engine)
    assert "no SQLite store" in error.message and "nothing changed" in error.hint
    assert engine.changes() == []
    assert engine.kinds().count("remove") == 1  # the look's container, removed


def test_a_running_brain_is_refused_without_yes_and_nothing_changes(kit):
    engine = Engine(brain=True)
    error = refused(settings_of(kit), engine)
    assert "the brain is running (03-agents)" in error.message
    assert "migrate-store --yes" in error.hint
    assert engine.changes() == []
    assert "look" not in engine.kinds()


def test_a_kit_whose_image_was_never_built_changes_nothing(kit):
    engine = Engine(image=False)
    error = refused(settings_of(kit), engine)
    assert "is not on this engine" in error.message
    assert engine.changes() == [] and "look" not in engine.kinds()


def test_a_joined_rig_has_no_store_to_move(kit):
    settings = settings_of(kit, AIRIG_JOIN_BRAIN_URL="http://brain.lan:8080",
                           AIRIG_JOIN_TOKEN="t0ken")  # fmt: skip
    engine = Engine()
    error = refused(settings, engine)
    assert "joined another machine's brain" in error.message
    assert engine.calls == []


@pytest.mark.parametrize("answer", [b"", b"Traceback ...\nImportError: x\n", b"[1, 2]\n",
                                    b"\x00\xff" * 5000])  # fmt: skip
def test_a_look_that_says_nothing_readable_is_one_line_and_changes_nothing(kit, answer):
    engine = Engine()
    engine.look_out = answer
    error = refused(settings_of(kit), engine)
    assert error.message.startswith("cannot tell what the volume")
    assert len(error.message) < 400 and "\n" not in error.message
    assert engine.changes() == []


def test_an_unhealthy_postgres_stops_before_the_copy(kit):
    engine = Engine(health="unhealthy")
    with pytest.raises(StoreMoveError, match="the postgres service is not healthy: unhealthy"):
        run(settings_of(kit), engine)
    assert "copy" not in engine.kinds()


# ------------------------------------------------------------------ the happy path
def test_postgres_then_its_health_then_one_copy_with_the_state_read_only(kit):
    settings = settings_of(kit)
    engine = Engine()
    said = run(settings, engine)
    kinds = engine.kinds()
    # in order: the look (read-only, no network), postgres alone, its health, the copy
    assert kinds.index("look") < kinds.index("network") < kinds.index("compose-up")
    assert kinds.index("compose-up") < kinds.index("wait") < kinds.index("copy")
    assert "down" not in kinds  # the brain was not running: nothing stopped
    up = next(c for c in engine.calls if c[0] == "compose-up")
    assert up[1] == "01-infra" and up[2]["services"] == ["postgres"] and up[2]["detach"]
    assert "postgres" in engine.profiles  # the service's profile is on
    volume = f"{settings.project_prefix}-brain-state"
    state = {volume: {"bind": "/state", "mode": "ro"}}
    look = next(c for c in engine.calls if c[0] == "look")
    assert look[1] == settings.image and look[2]["volumes"] == state
    assert look[2]["network_mode"] == "none"
    assert look[2]["labels"] == {PROBE_LABEL: "store-move"}
    copy = next(c for c in engine.calls if c[0] == "copy")
    image, options = copy[1], copy[2]
    assert image == settings.image
    assert options["network"] == settings.network and "network_mode" not in options
    assert options["volumes"] == state
    assert options["environment"] == {"BRAIN_DATABASE_URL": postgres.database_url(settings)}
    assert options["labels"] == {PROBE_LABEL: "store-move"}
    assert options["name"].startswith(f"{settings.project_prefix}-store-move-")
    assert options["cap_drop"] == ["ALL"]
    assert "migrate-store" in options["command"][-1]
    assert "BRAIN_DATABASE_URL" not in " ".join(options["command"])  # not on a command line
    assert ("remove", "copy", True) in engine.calls  # removed after
    assert kinds.count("remove") == 2  # the look's and the copy's
    # the copy's per-table lines are relayed, then the next step
    assert "plans                   3 rows, checksum 00000000000000aa matches" in said
    assert "Run `python start_services.py up`" in said[-1]
    assert any("(3 plans)" in line for line in said)


def test_yes_stops_03_agents_before_postgres_and_says_so(kit):
    engine = Engine(brain=True)
    said = run(settings_of(kit), engine, yes=True)
    kinds = engine.kinds()
    assert kinds.index("look") < kinds.index("down") < kinds.index("compose-up")
    assert ("down", "03-agents") in engine.calls
    assert [c for c in engine.calls if c[0] == "down"] == [("down", "03-agents")]
    assert any(line.startswith("Stopping 03-agents") for line in said)


def test_yes_stops_nothing_when_there_is_no_store_to_copy(kit):
    engine = Engine(brain=True, look={"store": False})
    with pytest.raises(StoreMoveError, match="no SQLite store"):
        run(settings_of(kit), engine, yes=True)
    assert engine.changes() == []


def test_the_password_is_in_no_printed_line_even_when_the_container_echoes_it(kit):
    settings = settings_of(kit)
    url = postgres.database_url(settings)
    engine = Engine(copy_code=2, copy_err=f"connection to {url} failed: {HOSTILE}\n".encode())
    # the copy's output, cut mid-password across chunks
    echoed = f"url={url} raw={HOSTILE} encoded={quote(HOSTILE, safe='')}\n".encode()
    engine.copy_out = [echoed[:17], echoed[17:40], echoed[40:]]
    said: list[str] = []
    with pytest.raises(StoreMoveError) as caught:
        move_store(settings, engine, said.append)
    printed = "\n".join([*said, caught.value.message, caught.value.hint])
    for secret in (url, HOSTILE, quote(HOSTILE, safe=""), "o%rd#?&"):
        assert secret not in printed
    assert "url=*** raw=*** encoded=***" in said


# ------------------------------------------------------------------ a failed copy
def test_a_failed_copy_is_one_line_with_postgres_left_running_and_nothing_else(kit):
    engine = Engine(copy_code=2, copy_err=b"some\ncannot copy the brain's store into x: "
                    b"server closed the connection\n")  # fmt: skip
    said: list[str] = []
    with pytest.raises(StoreMoveError) as caught:
        move_store(settings_of(kit), engine, said.append)
    error = caught.value
    assert error.message == (
        "the store's copy failed: cannot copy the brain's store into x: server closed the "
        "connection"
    )
    assert "postgres service is left running" in error.hint
    # postgres started once and never stopped, nothing else stopped or removed but the copy
    assert [c[0] for c in engine.changes()] == ["network", "compose-up", "copy"]
    assert ("remove", "copy", True) in engine.calls
    assert not any("Run `python start_services.py up`" in line for line in said)


def test_a_copy_that_dies_without_a_word_says_its_exit(kit):
    engine = Engine(copy_code=137, copy_err=b"")
    with pytest.raises(StoreMoveError) as caught:
        run(settings_of(kit), engine)
    assert caught.value.message == "the store's copy failed: exit 137"


def test_a_target_that_holds_rows_says_how_to_go_on(kit):
    settings = settings_of(kit)
    engine = Engine(copy_code=2, copy_err=(
        b"the database postgresql+psycopg://airig:***@postgres:5432/brain already holds rows "
        b"in workers: migrate-store copies into an empty store only; name a new database\n"
    ))  # fmt: skip
    with pytest.raises(StoreMoveError) as caught:
        run(settings, engine)
    error = caught.value
    volume = f"{settings.project_prefix}-brain-postgres"
    assert f"the PostgreSQL store (volume {volume}) already holds data" in error.message
    assert f"docker volume rm {volume}" in error.hint
    assert "`python start_services.py down`" in error.hint and "keep it" in error.hint


def test_ctrl_c_during_the_copy_removes_its_container(kit):
    engine = Engine()

    def interrupted() -> Any:
        yield b"copying events: 9000000 rows\n"
        raise KeyboardInterrupt

    engine.copy_out = interrupted()  # type: ignore[assignment]
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        move_store(settings_of(kit), engine, said.append)
    assert ("remove", "copy", True) in engine.calls
    assert said[-1] == "copying events: 9000000 rows"


def test_an_engine_that_refuses_the_copy_container_is_one_line(kit):
    engine = Engine()

    def refuse(image: str, **options: Any) -> Any:
        if options.get("detach"):
            raise docker.errors.APIError("network ai-network not found")
        return engine.look_out

    engine.containers_api.run = refuse
    with pytest.raises(DockerError, match="network ai-network not found"):
        run(settings_of(kit), engine)


# ------------------------------------------------------------------ pieces
def test_the_scrubber_takes_the_longest_secret_first():
    url = f"postgresql://airig:{quote(HOSTILE, safe='')}@postgres:5432/brain"
    scrub = scrubber(HOSTILE, url)
    assert scrub(f"a {url} b") == "a *** b"
    assert scrub(f"{HOSTILE}{HOSTILE}") == "******"
    assert scrub("nothing secret") == "nothing secret"


def test_lines_are_whole_whatever_the_chunks():
    chunks = [b"ab", b"c\nd", b"", b"e\r\n\n", b"\xff", b"tail"]
    assert list(store_move._lines(iter(chunks))) == ["abc", "de", "", "\ufffdtail"]


# ------------------------------------------------------------------ the command line
def test_the_command_refuses_the_sqlite_knob_in_one_line(launcher_kit, monkeypatch, capsys):
    write_env(launcher_kit, AIRIG_BRAIN_STORE="sqlite")
    engine = Engine()
    monkeypatch.setattr("airig.launcher.cli.store.Docker", lambda: engine)
    code, _out, err = run_cli(monkeypatch, capsys, None, "migrate-store")
    one_error(code, err, "AIRIG_BRAIN_STORE is sqlite")
    assert engine.calls == []


def test_the_command_without_env_refuses_and_makes_none(launcher_kit, monkeypatch, capsys):
    engine = Engine()
    monkeypatch.setattr("airig.launcher.cli.store.Docker", lambda: engine)
    code, _out, err = run_cli(monkeypatch, capsys, None, "migrate-store", "--yes")
    one_error(code, err, "AIRIG_BRAIN_STORE is sqlite")
    assert not (launcher_kit / ".env").exists() and engine.calls == []


def test_the_command_runs_the_move_and_prints_its_lines(launcher_kit, monkeypatch, capsys):
    write_env(launcher_kit, AIRIG_BRAIN_STORE="postgres", POSTGRES_PASSWORD=HOSTILE,
              AIRIG_PROJECT_PREFIX=f"mv{os.getpid()}")  # fmt: skip
    engine = Engine(brain=True)
    monkeypatch.setattr("airig.launcher.cli.store.Docker", lambda: engine)
    code, out, err = run_cli(monkeypatch, capsys, None, "migrate-store", "--yes")
    assert code == 0, err
    assert "Stopping 03-agents" in out and "checksum 00000000000000aa matches" in out
    assert HOSTILE not in out + err and quote(HOSTILE, safe="") not in out + err


# ------------------------------------------------------------------ the scripts, for real
def in_state(script: str, state: Path) -> str:
    """A container script with the state volume's mount point moved to ``state``."""
    assert script.count('"/state') >= 1
    return script.replace('"/state', f'"{state}')


def state_files(state: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in state.iterdir()}


def test_the_container_scripts_copy_a_brains_store_and_leave_the_volume_as_it_was(tmp_path, pg_url):
    """What runs in the kit's image, run here on a store a brain wrote and stopped cleanly
    (WAL mode, no -wal/-shm left: what a read-only mount cannot open in place) against the
    throwaway cluster: the look counts its plans, the copy moves it, a second copy is
    refused in the words store_move recognises, and the state folder is never written."""
    from unit.brain.test_store_migrate import brain_store

    state = tmp_path / "state"
    state.mkdir()
    source = brain_store(tmp_path / "brain")
    shutil.copyfile(source, state / "brain.db")
    # WAL mode (the file header's read and write versions are 2), as a brain leaves it
    assert (state / "brain.db").read_bytes()[18:20] == b"\x02\x02"
    before = state_files(state)
    assert set(before) == {"brain.db"}
    env = {**os.environ, "TMPDIR": str(tmp_path), "BRAIN_DATABASE_URL": pg_url}

    def run_script(script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", in_state(script, state)], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    looked = run_script(store_move.LOOK_SCRIPT)
    assert looked.returncode == 0, looked.stderr
    assert json.loads(looked.stdout.splitlines()[-1]) == {"store": True, "plans": 2}
    copied = run_script(store_move.COPY_SCRIPT)
    assert copied.returncode == 0, copied.stderr
    assert any(
        line.startswith("plans ") and "2 rows" in line for line in copied.stdout.splitlines()
    )
    again = run_script(store_move.COPY_SCRIPT)
    assert again.returncode == 2
    assert store_move.REFUSED_NON_EMPTY in again.stderr.strip().splitlines()[-1]
    assert state_files(state) == before  # not upgraded, no -wal or -shm made there


def test_the_look_says_no_store_for_a_folder_without_one_or_with_another_file(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    script = in_state(store_move.LOOK_SCRIPT, state)
    for content in (None, b"", b"not sqlite" * 1000):
        if content is not None:
            (state / "brain.db").write_bytes(content)
        said = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=60, check=True)  # fmt: skip
        assert json.loads(said.stdout) == {"store": False, "plans": None}
