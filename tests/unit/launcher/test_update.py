"""`update` (airig/launcher/lifecycle/update.py): one image at a time, pulled before anything
changes, recreated, waited for, smoke-checked, rolled back on any failure; `up`'s record;
the command's refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airig.common.errors import ConfigError, DockerError
from airig.launcher.compose.container import ContainerState, verdict
from airig.launcher.compose.plan import StackPlan, plan_for_running
from airig.launcher.images.choose import ImageChoice, ImageSelection
from airig.launcher.images.lock import (
    Locked,
    Move,
    failed_updates,
    read_lock,
    read_log,
    write_lock,
)
from airig.launcher.lifecycle.update import (
    ImageLock,
    Updater,
    check_lines,
    failed_before,
    log_path,
    outcome_line,
    pick,
    running_lock,
    to_update,
    wait_healthy,
)
from airig.launcher.settings import checkout_settings
from tests.support import one_error, run_cli


def _c(status: str, health: str, restarts: int, exit_code: int) -> ContainerState:
    return ContainerState("whisper-cpu", "c", status, health, exit_code, restarts=restarts)


D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
TAG = "127.0.0.1:5000/speaches-ai/speaches:0.8.3-cpu"
V1, V2 = f"127.0.0.1:5000/speaches-ai/speaches@{D1}", f"127.0.0.1:5000/speaches-ai/speaches@{D2}"


@pytest.fixture
def running(launcher_kit: Path) -> Path:
    """A kit `up` started on the cpu profile, Whisper locked at D1."""
    state = launcher_kit / ".airig"
    state.mkdir()
    (state / "host.env").write_text(f"AIRIG_UP_PROFILE=cpu\nWHISPER_IMAGE_CPU={V1}\n")
    (launcher_kit / ".env").write_text("")
    locked = Locked("whisper", "WHISPER_IMAGE_CPU", TAG, D1, "cpu profile", "", "t")
    write_lock(state, {"WHISPER_IMAGE_CPU": locked})
    return launcher_kit


class FakeEngine:
    """Runs whatever host.env names; ``broken`` digests never get healthy."""

    def __init__(self, state: Path, broken: set[str] = frozenset(), pull_error: str = "") -> None:  # type: ignore[assignment]
        self.state, self.broken, self.pull_error = state, broken, pull_error
        self.calls: list[str] = []

    def current(self) -> str:
        line = next(
            ln
            for ln in (self.state / "host.env").read_text().splitlines()
            if ln.startswith("WHISPER_IMAGE_CPU=")
        )
        return line.split("=", 1)[1]

    def pull(self, ref: str) -> None:
        self.calls.append(f"pull {ref}")
        if self.pull_error:
            raise DockerError(f"pulling {ref} failed: {self.pull_error}", "")

    def running(self, stack: StackPlan) -> set[str]:
        return {"whisper-cpu", "ollama-cpu"} if stack.name == "02-compute" else set()

    def recreate(self, stack: StackPlan, service: str, ref: str) -> None:
        assert ref == self.current()  # host.env already names what is recreated
        self.calls.append(f"recreate {service} {ref}")

    def wait(self, stack: StackPlan, service: str) -> str:
        return "exited (code 3)" if self.current().split("@")[1] in self.broken else "healthy"


def move() -> Move:
    locked = Locked("whisper", "WHISPER_IMAGE_CPU", TAG, D1, "cpu profile", "", "t")
    return Move("whisper", "WHISPER_IMAGE_CPU", locked, TAG, D2, "2026-11-20", "cpu profile")


def updater(engine: FakeEngine, smoke_fails: set[str] = frozenset()) -> Updater:  # type: ignore[assignment]
    """``smoke_fails``: digests whose smoke request answers HTTP 500."""
    settings = checkout_settings()

    def smoke(_service: str) -> str | None:
        fails = engine.current().split("@")[1] in smoke_fails
        return "smoke check GET /v1/models answered HTTP 500" if fails else None

    return Updater(settings, plan_for_running(settings), engine, smoke, engine.wait)  # type: ignore[arg-type]


def test_an_update_that_stays_healthy_is_locked_and_logged(running: Path) -> None:
    engine = FakeEngine(running / ".airig")
    outcome = updater(engine).apply(move())
    assert outcome.ok
    assert engine.calls == [f"pull {V2}", f"recreate whisper-cpu {V2}"]  # ollama untouched
    assert read_lock(running / ".airig")["WHISPER_IMAGE_CPU"].digest == D2
    assert f"WHISPER_IMAGE_CPU={V2}\n" in (running / ".airig" / "host.env").read_text()
    [entry] = read_log(running / ".airig" / "update.log")
    assert (entry["action"], entry["ok"], entry["to"]["digest"]) == ("update", True, D2)
    assert "whisper: now" in outcome_line(outcome)


@pytest.mark.parametrize(
    ("broken", "smoke", "why"),
    [
        ({D2}, None, "whisper-cpu exited (code 3)"),
        (set(), "smoke check GET /v1/models answered HTTP 500", "smoke"),
    ],
)
def test_a_failing_image_is_rolled_back_to_the_locked_digest(
    running: Path, broken: set[str], smoke: str | None, why: str
) -> None:
    engine = FakeEngine(running / ".airig", broken)
    outcome = updater(engine, {D2} if smoke else set()).apply(move())
    assert not outcome.ok and why in outcome.reason
    assert engine.calls == [
        f"pull {V2}",
        f"recreate whisper-cpu {V2}",
        f"recreate whisper-cpu {V1}",
    ]
    assert read_lock(running / ".airig")["WHISPER_IMAGE_CPU"].digest == D1
    assert f"WHISPER_IMAGE_CPU={V1}\n" in (running / ".airig" / "host.env").read_text()
    update, rollback = read_log(running / ".airig" / "update.log")
    assert (update["action"], update["ok"], update["reason"]) == ("update", False, outcome.reason)
    assert (rollback["action"], rollback["to"]["digest"], rollback["from"]["digest"]) == (
        "rollback",
        D1,
        D2,
    )
    line = outcome_line(outcome)
    assert "\n" not in line and f"rolled back to {'1' * 12};" in line
    # the service's queued work waited in the brain's queue (issue 35 §2)
    assert line.endswith("waited in the brain's queue meanwhile (none failed) and run now")


def test_a_rollback_that_fails_too_says_so(running: Path) -> None:
    engine = FakeEngine(running / ".airig", {D1, D2})
    outcome = updater(engine).apply(move())
    assert outcome.rolled_back == "whisper-cpu exited (code 3)"
    line = outcome_line(outcome)
    assert "and the rollback is whisper-cpu exited (code 3);" in line
    assert line.endswith(
        "wait in the brain's queue until it answers (at most AIRIG_MAX_WAIT_S, then they fail)"
    )
    assert read_log(running / ".airig" / "update.log")[-1]["ok"] is False


def test_a_pull_that_fails_changes_nothing(running: Path) -> None:
    before = (
        (running / ".airig" / "host.env").read_text(),
        (running / ".airig" / "images.lock").read_text(),
    )
    engine = FakeEngine(running / ".airig", pull_error="manifest unknown")
    with pytest.raises(DockerError, match=f"cannot pull {V2}: no such tag"):
        updater(engine).apply(move())
    assert engine.calls == [f"pull {V2}"]
    after = (
        (running / ".airig" / "host.env").read_text(),
        (running / ".airig" / "images.lock").read_text(),
    )
    assert after == before and not (running / ".airig" / "update.log").exists()


# ------------------------------------------------------------------ health
@pytest.mark.parametrize(
    ("states", "found"),
    [
        ([], "not running"),
        ([_c("running", "starting", 0, 0)], None),
        ([_c("running", "healthy", 0, 0)], "healthy"),
        ([_c("running", "", 0, 0)], "healthy"),
        ([_c("running", "unhealthy", 0, 0)], "unhealthy"),
        # a crash loop under `restart: unless-stopped` is never "unhealthy": its restarts are
        (
            [_c("running", "starting", 1, 3)],
            "exited (code 3)",
        ),
        ([_c("restarting", "", 0, 3)], "exited (code 3)"),
    ],
)
def test_the_health_verdict(states: list[ContainerState], found: str | None) -> None:
    assert verdict(states) == found


def test_the_wait_gives_up_after_its_timeout() -> None:
    class Starting:
        def state(self, _stack: Any, _service: str) -> list[ContainerState]:
            return [_c("running", "starting", 0, 0)]

    ticks = iter(range(100))
    found = wait_healthy(Starting(), None, "x", 5, lambda _s: None, lambda: next(ticks))  # type: ignore[arg-type]
    assert found == "still starting after 5 s"


# ------------------------------------------------------------------ up's record
def test_up_records_the_pulled_digest_and_keeps_a_held_entry(tmp_path: Path) -> None:
    class Image:
        attrs = {"RepoDigests": [f"other/repo@{D1}", f"127.0.0.1:5000/speaches-ai/speaches@{D2}"],
                 "Created": "2026-11-20T00:00:00Z"}  # fmt: skip

    class Sdk:
        class images:  # noqa: N801 - the docker SDK's shape
            @staticmethod
            def get(ref: str) -> Image:
                assert ref == TAG
                return Image()

    class Engine:
        def sdk(self) -> Sdk:
            return Sdk()

    whisper = ImageChoice("whisper", "WHISPER_IMAGE_CPU", TAG, False, "cpu profile")
    chosen = ImageSelection("cpu", (whisper,), {})

    class Settings:
        state_dir = tmp_path

    ImageLock(Settings(), chosen, chosen).record(Engine())  # type: ignore[arg-type]
    entry = read_lock(tmp_path)["WHISPER_IMAGE_CPU"]
    assert (entry.tag, entry.digest, entry.created) == (TAG, D2, "2026-11-20T00:00:00Z")
    [line] = read_log(tmp_path / "update.log")
    assert (line["action"], line["from"], line["to"]["digest"]) == ("lock", None, D2)
    ImageLock(Settings(), chosen, chosen).record(Engine())  # type: ignore[arg-type]
    assert len(read_log(tmp_path / "update.log")) == 1  # the same digest again: no new line


# ------------------------------------------------------------------ refusals
def test_an_unknown_service_names_the_valid_ones(running: Path) -> None:
    lock = running_lock(checkout_settings(), ImageSelection("cpu", (
        ImageChoice("whisper", "WHISPER_IMAGE_CPU", TAG, False, "cpu profile"),), {}))  # fmt: skip
    assert pick(lock, "whisper") == lock
    with pytest.raises(ConfigError, match="unknown service 'nope': update knows whisper"):
        pick(lock, "nope")


def test_update_refuses_a_stopped_kit_an_unlocked_one_and_a_bad_name(
    launcher_kit: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = run_cli(monkeypatch, capsys, None, "update", "--check")
    one_error(code, err, "the kit is not running")
    state = launcher_kit / ".airig"
    state.mkdir()
    (state / "host.env").write_text("AIRIG_UP_PROFILE=cpu\n")
    code, _out, err = run_cli(monkeypatch, capsys, None, "update")
    one_error(code, err, "no image is locked yet")
    locked = {
        v: Locked(s, v, f"{s}:cpu", D1, "cpu profile", "", "t")
        for s, v in (
            ("ollama", "OLLAMA_IMAGE"),
            ("comfyui", "COMFYUI_IMAGE_CPU"),
            ("whisper", "WHISPER_IMAGE_CPU"),
        )
    }
    write_lock(state, locked)
    before = json.loads((state / "images.lock").read_text())
    code, _out, err = run_cli(monkeypatch, capsys, None, "update", "nope")
    one_error(code, err, "unknown service 'nope': update knows comfyui, ollama, whisper")
    assert json.loads((state / "images.lock").read_text()) == before
    assert not (state / "update.log").exists()


# ------------------------------------------------------------------ a digest rolled back before
def test_a_rolled_back_digest_is_said_not_offered_again(running: Path) -> None:
    """`update --check` after a rolled-back update (issue 35 §5): the digest that failed
    is said ("failed on DATE and was rolled back"), not offered again; `update` skips it
    unless its SERVICE is named."""
    engine = FakeEngine(running / ".airig", {D2})
    assert not updater(engine).apply(move()).ok
    when = read_log(running / ".airig" / "update.log")[0]["time"][:10]
    failed = failed_before(checkout_settings())
    [line] = check_lines([move()], failed)
    assert f"digest {'2' * 12} failed on {when} and was rolled back" in line
    assert "whisper-cpu exited (code 3)" in line and "↑" not in line
    assert to_update([move()], failed, named=False) == ([], [move()])
    assert to_update([move()], failed, named=True) == ([move()], [])  # `update whisper`


def test_a_digest_never_tried_is_offered(running: Path) -> None:
    failed = failed_before(checkout_settings())
    assert failed == {}
    [line] = check_lines([move()], failed)
    assert "↑" in line and "moved upstream" in line
    assert to_update([move()], failed, named=False) == ([move()], [])


def test_a_later_update_of_a_failed_digest_that_passed_clears_it(running: Path) -> None:
    engine = FakeEngine(running / ".airig", {D2})
    updater(engine).apply(move())
    engine.broken = set()
    assert updater(engine).apply(move()).ok
    assert failed_updates(read_log(log_path(checkout_settings()))) == {}


# ------------------------------------------------------------------ each step as it goes
class HealthEngine(FakeEngine):
    """FakeEngine whose containers report their state, for the real health wait (its
    folder moves from ``state``, the name of Engine's method, to ``folder``)."""

    def __init__(self, state: Path, broken: set[str]) -> None:
        super().__init__(state, broken)
        self.folder = state
        del self.state

    def current(self) -> str:
        text = (self.folder / "host.env").read_text()
        return next(ln for ln in text.splitlines() if ln.startswith("WHISPER_IMAGE_CPU="))[18:]

    def state(self, _stack: StackPlan, _service: str) -> list[ContainerState]:  # type: ignore[override]
        broken = self.current().split("@")[1] in self.broken
        status = "exited" if broken else "running"
        return [_c(status, "" if broken else "healthy", 0, 3 if broken else 0)]  # fmt: skip


def run_update(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    running: Path,
    broken: set[str],
) -> tuple[int, str, str, HealthEngine]:
    """`update whisper` through the CLI, the engine, registry and smoke request faked."""
    import airig.launcher.cli.update as cli_update
    import airig.launcher.hardware.choice as choice

    whisper = ImageChoice("whisper", "WHISPER_IMAGE_CPU", TAG, False, "cpu profile")
    chosen = ImageSelection("cpu", (whisper,), {})
    engine = HealthEngine(running / ".airig", broken)
    monkeypatch.setattr(
        choice, "choose_profile", lambda *_a, **_k: type("P", (), {"images": chosen})
    )
    monkeypatch.setattr(cli_update, "Docker", lambda: None)
    monkeypatch.setattr(cli_update, "Engine", lambda _docker: engine)
    monkeypatch.setattr(cli_update, "lookup_cached", lambda: lambda _ref: (D2, "2026-11-20"))
    monkeypatch.setattr(cli_update, "smoke", lambda _settings, _name: None)
    code, out, err = run_cli(monkeypatch, capsys, None, "update", "whisper")
    return code, out, err, engine


def in_order(lines: list[str], *wanted: str) -> list[int]:
    """The index of the first line holding each of ``wanted``, each after the one before."""
    found, start = [], 0
    for word in wanted:
        index = next((i for i in range(start, len(lines)) if word in lines[i]), None)
        assert index is not None, f"{word!r} not after line {start}:\n" + "\n".join(lines)
        found.append(index)
        start = index + 1
    return found


def test_update_says_each_step_as_it_goes(
    running: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`update` printed nothing for minutes (issue 35 §5): each step is a line as it
    starts, plain (no wrapping, no escape codes), the outcome last."""
    code, out, err, engine = run_update(monkeypatch, capsys, running, set())
    assert code == 0, out + err
    assert engine.calls == [f"pull {V2}", f"recreate whisper-cpu {V2}"]
    lines = out.splitlines()
    steps = in_order(
        lines,
        "Checking the registry",
        f"pulling {V2} …",
        f"pulled {V2} (",
        f"writing WHISPER_IMAGE_CPU={V2} to .airig/host.env",
        "recreating whisper-cpu (02-compute) …",
        "waiting for whisper-cpu to be healthy …",
        "whisper-cpu healthy after ",
        "smoke request: GET /v1/models through whisper's port …",
        "smoke request answered",
        f"writing WHISPER_IMAGE_CPU at {'2' * 12} to .airig/images.lock",
        "✔ whisper: now",
    )
    assert steps[-1] == len(lines) - 1  # the outcome is the last line
    assert "\x1b[" not in out and all(len(line) < 400 for line in lines)


def test_a_rolled_back_update_says_its_steps_and_the_rollback(
    running: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err, engine = run_update(monkeypatch, capsys, running, {D2})
    one_error(code, err, "whisper", "rolled back to")
    assert engine.calls == [
        f"pull {V2}",
        f"recreate whisper-cpu {V2}",
        f"recreate whisper-cpu {V1}",
    ]
    in_order(
        out.splitlines(),
        f"pulling {V2} …",
        "recreating whisper-cpu (02-compute) …",
        "whisper-cpu exited (code 3) after ",
        f"whisper-cpu exited (code 3): rolling whisper back to {V1} …",
        f"writing WHISPER_IMAGE_CPU={V1} to .airig/host.env",
        "recreating whisper-cpu (02-compute) …",
        "whisper-cpu healthy after ",
        "smoke request answered",
    )
    assert "images.lock" not in out  # the lock keeps the old digest, and says nothing


def test_a_long_health_wait_says_how_long_it_has_waited() -> None:
    class Starting:
        def state(self, _stack: Any, _service: str) -> list[ContainerState]:
            return [_c("running", "starting", 0, 0)]

    said: list[str] = []
    ticks = iter(range(0, 1000, 5))
    found = wait_healthy(Starting(), None, "whisper-cpu", 60, lambda _s: None,  # type: ignore[arg-type]
                         lambda: next(ticks), said.append)  # fmt: skip
    assert found == "still starting after 60 s"
    assert said and all(
        line.startswith("  still waiting for whisper-cpu (starting, ") for line in said
    )
    assert len(said) < 60 // 5  # every PROGRESS_S, not every poll
