"""Locked images and `update`: move one compute image at a time, roll back on failure.

`up` holds each compute image at the digest in ``.airig/images.lock`` (images/lock.py)
and, once the kit is up, locks what it started (``ImageLock``). `update --check` asks the
registry what each chosen tag names now (images/remote.py) and what images.yaml would
choose now (a driver upgrade moves the choice); `update [SERVICE]` then, per image:
pulls the new digest (a pull that fails changes nothing), writes it to ``.airig/host.env``
(the env file Compose reads after .env), recreates the services that run it
(``up --no-deps``), waits until they are healthy, runs a smoke request through the
service, and keeps the new digest in the lock; on any failure it writes the locked digest
back, recreates the services again and says why in one line. Every update, rollback and
lock `up` writes is one JSON line in ``.airig/update.log``.

A pull or a health wait can take minutes: ``Updater`` says each step as it starts (and a
wait every ``container.PROGRESS_S`` with its elapsed time) through ``say``, one plain line each, so
the user sees what it is doing and a piped log reads the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from rich.console import Console
from rich.markup import escape

from airig.common.errors import ConfigError, DockerError
from airig.launcher.compose import container
from airig.launcher.compose.container import WAIT_TIMEOUT_S, ContainerState
from airig.launcher.compose.docker import Docker, engine_errors
from airig.launcher.compose.plan import HOST_ENV, ComposePlan, StackPlan
from airig.launcher.compose.stack_env import stack_env_path, stack_env_text
from airig.launcher.images.choose import ImageChoice, ImageSelection
from airig.launcher.images.lock import (
    FailedUpdate,
    Held,
    Locked,
    Move,
    append_log,
    diff,
    digest_of,
    failed_updates,
    hold,
    log_entry,
    read_lock,
    read_log,
    repository,
    shown,
    write_lock,
)
from airig.launcher.images.remote import Registry
from airig.launcher.lifecycle.restart import queued_work
from airig.launcher.lifecycle.tune import services_using
from airig.launcher.settings import Settings

LOG_FILE = "update.log"
# The request that shows a service answers its API, not only its healthcheck: the routes
# the brain's probes and the executors call (airig/common/gpu_use.py, executors/resource.py).
SMOKE = {"ollama": "/api/tags", "comfyui": "/system_stats", "whisper": "/v1/models"}


def log_path(settings: Settings) -> Path:
    return settings.state_dir / LOG_FILE


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# ------------------------------------------------------------------ up's side
@dataclass
class ImageLock:
    """What `up` chose (``chosen``), what it starts (``selection``: locked digests held)."""

    settings: Settings
    chosen: ImageSelection | None
    selection: ImageSelection | None
    held: list[Held] = field(default_factory=list)

    def adopt(self, selection: ImageSelection, services: set[str]) -> None:
        """A proof moved ``services`` to other images: lock what runs now, and hold no
        digest for them (a held digest that failed would be started again)."""
        if self.chosen is None or not services:
            return
        old = {c.variable for c in self.chosen.choices if c.service in services}
        new = {selection.of(s).variable for s in services}
        self.held = [h for h in self.held if h.variable not in old | new]
        moved = {s: selection.of(s) for s in services}
        choices = tuple(moved.get(c.service, c) for c in self.chosen.choices)
        self.chosen = replace(self.chosen, choices=choices)
        self.selection = selection

    def record(self, docker: Docker) -> None:
        """After a good `up`: lock the digest of each image it started by tag. A held
        image keeps its entry (a moved choice waits for `update`)."""
        if self.chosen is None:
            return
        lock = read_lock(self.settings.state_dir)
        held = {h.variable for h in self.held}
        changed = False
        for choice in self.chosen.choices:
            if choice.variable in held:
                continue
            entry = locked_entry(docker, choice)
            old = lock.get(choice.variable)
            if old is not None and (old.tag, old.digest) == (entry.tag, entry.digest):
                continue
            lock[choice.variable] = entry
            changed = True
            move = Move(entry.service, entry.variable, old, entry.tag, entry.digest,
                        entry.created, entry.why)  # fmt: skip
            append_log(log_path(self.settings), log_entry("lock", move, True, entry.why, now()))
        if changed:
            write_lock(self.settings.state_dir, lock)


def hold_images(
    settings: Settings, images: ImageSelection | None, console: Console, docker: Docker
) -> ImageLock:
    """`up`'s hook before the plan: start the locked digests (images/lock.py ``hold``)."""
    if images is None:
        return ImageLock(settings, None, None)
    from airig.launcher.images import pins_from

    lock = read_lock(settings.state_dir)
    pins = pins_from(settings.value_of)
    selection, held = hold(images, lock, pins, lambda ref: local_digests(docker, ref))
    for item in held:
        if item.note:
            console.print(f"  [yellow]⚠ {escape(item.note)}[/]", soft_wrap=True)
        else:
            digest = short(lock[item.variable].digest)
            console.print(f"  [dim]{escape(item.variable)} locked at {digest}[/]")
    return ImageLock(settings, images, selection, held)


def local_digests(engine: Docker, ref: str) -> set[str]:
    """The registry digests of the engine's image of ``ref`` for its repository; none when
    it lacks it or cannot say (--dry-run without an engine: the digest reference is shown)."""
    import docker.errors

    try:
        with engine_errors(f"inspecting the image {ref}"):
            attrs = engine.sdk().images.get(ref).attrs
    except (DockerError, docker.errors.ImageNotFound):
        return set()
    repo = repository(ref)
    recorded = attrs.get("RepoDigests") or []
    return {d.split("@", 1)[1] for d in recorded if d.startswith(f"{repo}@")}


def locked_entry(engine: Docker, choice: ImageChoice) -> Locked:
    """The lock entry of the image ``choice`` started: the registry digest the engine
    recorded for its repository when it pulled it ("" for an image built locally)."""
    import docker.errors

    with engine_errors(f"inspecting the image {choice.image}"):
        try:
            attrs = engine.sdk().images.get(choice.image).attrs
        except docker.errors.ImageNotFound:
            attrs = {}
    repo = repository(choice.image)
    recorded = attrs.get("RepoDigests") or []
    digests = sorted(d.split("@", 1)[1] for d in recorded if d.startswith(f"{repo}@"))
    digest = digest_of(choice.image) or next(iter(digests), "")
    return Locked(choice.service, choice.variable, choice.image, digest, choice.why,
                  str(attrs.get("Created", "")), now())  # fmt: skip


# ------------------------------------------------------------------ update --check
def running_lock(settings: Settings, chosen: ImageSelection) -> dict[str, Locked]:
    """The lock's entries for the images this profile runs (an entry of another profile,
    e.g. the CUDA Whisper on a rig now on cpu, is kept but not updated)."""
    lock = read_lock(settings.state_dir)
    if not lock:
        raise ConfigError(
            "no image is locked yet", "start the kit: `python start_services.py` locks the "
            "images it starts"
        )  # fmt: skip
    variables = {c.variable for c in chosen.choices}
    return {k: v for k, v in lock.items() if k in variables}


def pick(lock: dict[str, Locked], service: str | None) -> dict[str, Locked]:
    """The entries of SERVICE (``ollama``, ``comfyui``, ``whisper``); unknown: one line
    naming the valid ones."""
    if service is None:
        return lock
    names = sorted({e.service for e in lock.values()})
    picked = {k: v for k, v in lock.items() if v.service == service}
    if not picked:
        raise ConfigError(
            f"unknown service {service!r}: update knows {', '.join(names) or 'none'}",
            "run update --check to see each image",
        )
    return picked


def check(
    lock: dict[str, Locked], chosen: ImageSelection, lookup: Callable[[str], tuple[str, str]]
) -> list[Move]:
    """Each locked image against the registry and the choice now. Every lookup is done
    before anything changes: a registry down or a tag gone raises one line first."""
    wanted = {c.variable: c for c in chosen.choices}
    return diff(lock, wanted, lookup)


def failed_before(settings: Settings) -> dict[tuple[str, str], FailedUpdate]:
    """The digests an earlier `update` rolled back, by (variable, digest)."""
    return failed_updates(read_log(log_path(settings)))


def is_failed(move: Move, failed: dict[tuple[str, str], FailedUpdate]) -> bool:
    return move.kind != "current" and (move.variable, move.digest) in failed


def to_update(
    moves: Sequence[Move], failed: dict[tuple[str, str], FailedUpdate], named: bool
) -> tuple[list[Move], list[Move]]:
    """(what `update` moves, the digests it skips because they were rolled back before).
    A SERVICE named on the command line is tried again all the same."""
    skipped = [] if named else [m for m in moves if is_failed(m, failed)]
    return [m for m in moves if m.kind != "current" and m not in skipped], skipped


def failed_line(move: Move, failed: dict[tuple[str, str], FailedUpdate]) -> str:
    """A digest that failed before, said instead of offered again."""
    was = failed[(move.variable, move.digest)]
    old = short(move.locked.digest) if move.locked else "-"
    reason = f" ({escape(was.reason)})" if was.reason else ""
    return (
        f"  [red]✘[/] {escape(move.service)}: {escape(move.tag)} digest {short(move.digest)} "
        f"failed on {escape(was.time[:10] or 'an earlier update')} and was rolled back{reason}; "
        f"{old} runs. `update {escape(move.service)}` tries it again"
    )


def check_lines(
    moves: Sequence[Move], failed: dict[tuple[str, str], FailedUpdate] | None = None
) -> list[str]:
    lines = []
    for m in moves:
        locked = m.locked
        old = short(locked.digest) if locked else "-"
        # the registry's words: remote.py keeps only a timestamp, escaped all the same
        created = f"built {escape(shown(m.created[:10]))}" if m.created else "build date unknown"
        if failed and is_failed(m, failed):
            lines.append(failed_line(m, failed))
        elif m.kind == "current":
            lines.append(f"  [green]✔[/] {escape(m.service)}: {escape(m.tag)} {old} is current")
        elif m.kind == "choice" and locked is not None:
            lines.append(
                f"  [yellow]↑[/] {escape(m.service)}: {escape(locked.tag)} {old} → "
                f"{escape(m.tag)} {short(m.digest)} ({created}; {escape(m.why)})"
            )
        else:
            lines.append(
                f"  [yellow]↑[/] {escape(m.service)}: {escape(m.tag)} moved upstream: {old} → "
                f"{short(m.digest)} ({created})"
            )
    return lines


def short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12] if digest else "(no digest)"


# ------------------------------------------------------------------ update
class Engine:
    """The Docker calls `update` makes (a fake in the unit tests)."""

    def __init__(self, docker: Docker) -> None:
        self.docker = docker

    def pull(self, ref: str) -> None:
        self.docker.pull_image(ref)

    def running(self, stack: StackPlan) -> set[str]:
        return {s.service for s in self.docker.services(stack)}

    def recreate(self, stack: StackPlan, service: str, ref: str) -> None:
        from airig.launcher.lifecycle.comfy_volumes import SERVER_SERVICES, retire_stale_servers
        from airig.launcher.lifecycle.restart import ComposeServices

        if service in SERVER_SERVICES:
            # Compose hands the old ComfyUI's anonymous /root to its replacement, and with
            # it the old image's code (comfy_volumes.py): remove it as `up` does
            retire_stale_servers(self.docker, stack.project, ref)
        ComposeServices(self.docker).restart(stack, service, recreate=True)

    def state(self, stack: StackPlan, service: str) -> list[ContainerState]:
        """Each container of the service, inspected: state, health, restart count."""
        return self.docker.service_states(stack, service)


def wait_healthy(
    engine: Engine,
    stack: StackPlan,
    service: str,
    timeout: float = WAIT_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    say: Callable[[str], None] = lambda _line: None,
) -> str:
    """The one wait (``container.wait_healthy``) over the recreated service: a restart
    counts as a crash, and every PROGRESS_S it says how long it has waited."""
    return container.wait_healthy(
        lambda: engine.state(stack, service), service, timeout,
        sleep=sleep, clock=clock, say=say,
    )  # fmt: skip


def smoke(settings: Settings, service: str, get: Callable[..., Any] = requests.get) -> str | None:
    """None when the service answers its API on its host port, else why not."""
    port = {"ollama": settings.ollama_port, "comfyui": settings.comfyui_port,
            "whisper": settings.whisper_port}[service]  # fmt: skip
    host = settings.bind_address if settings.bind_address not in ("", "0.0.0.0") else "127.0.0.1"
    url = f"http://{host}:{port}{SMOKE[service]}"
    try:
        answer = get(url, timeout=10)
        body = answer.json() if answer.status_code == 200 else None
    except (requests.RequestException, ValueError) as exc:
        return f"smoke check GET {SMOKE[service]} failed ({type(exc).__name__})"
    if not isinstance(body, dict):
        return f"smoke check GET {SMOKE[service]} answered HTTP {answer.status_code}"
    return None


@dataclass
class Outcome:
    move: Move
    ok: bool
    reason: str  # why it failed ("" when it moved)
    rolled_back: str = ""  # the rollback's verdict ("healthy" …) when it failed


class Updater:
    def __init__(
        self,
        settings: Settings,
        plan: ComposePlan,
        engine: Engine,
        smoke_check: Callable[[str], str | None],
        wait: Callable[[StackPlan, str], str],
        say: Callable[[str], None] = lambda _line: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.plan, self.engine = settings, plan, engine
        self.smoke_check, self.wait = smoke_check, wait
        # each step, as it starts (and what it took): a pull or a wait can last minutes
        self.say, self.clock = say, clock

    def _took(self, since: float) -> str:
        return f"{self.clock() - since:.0f} s"

    def targets(self, move: Move) -> list[tuple[StackPlan, str]]:
        """The running services whose compose definition interpolates the variable (one
        Ollama image runs 02-compute's Ollama and the per-GPU Ollamas of 03-agents)."""
        running = {s.name: self.engine.running(s) for s in self.plan.stacks}
        using = services_using(self.plan, move.variable)
        return [(stack, name) for stack, name in using if name in running[stack.name]]

    def apply(self, move: Move) -> Outcome:
        locked = move.locked
        assert locked is not None  # diff makes a Move per lock entry
        targets = self.targets(move)
        if not targets:
            raise ConfigError(
                f"{move.service} is not running, so there is nothing to update",
                "start the kit: python start_services.py",
            )
        self.say(f"  pulling {move.reference} …")
        started = self.clock()
        try:
            self.engine.pull(move.reference)  # before anything changes
        except DockerError as exc:
            from airig.launcher.compose.pull import pull_error

            raise pull_error(move.reference, move.service, exc.message, move.variable,
                             self.settings.image_registry) from None  # fmt: skip
        self.say(f"  pulled {move.reference} ({self._took(started)})")
        # the rollback writes back what ran: the same image: string, so the next `up`
        # leaves the rolled-back containers alone
        before = host_env_value(self.settings, move.variable) or locked.reference
        reason = self._switch(move.variable, move.reference, targets, smoke=move.service)
        log = log_path(self.settings)
        append_log(log, log_entry("update", move, reason == "", reason, now()))
        if not reason:
            self.say(f"  writing {move.variable} at {short(move.digest)} to .airig/images.lock")
            lock = read_lock(self.settings.state_dir)
            lock[move.variable] = Locked(move.service, move.variable, move.tag, move.digest,
                                         move.why, move.created, now())  # fmt: skip
            write_lock(self.settings.state_dir, lock)
            return Outcome(move, True, "")
        self.say(f"  {reason}: rolling {move.service} back to {before} …")
        back = self._switch(move.variable, before, targets, smoke=move.service)
        undo = replace(move, locked=replace(locked, tag=move.tag, digest=move.digest),
                       tag=locked.tag, digest=locked.digest)  # fmt: skip
        append_log(log, log_entry("rollback", undo, back == "", back or reason, now()))
        return Outcome(move, False, reason, back or "healthy")

    def _switch(
        self, variable: str, ref: str, targets: list[tuple[StackPlan, str]], smoke: str
    ) -> str:
        """Run ``ref`` for ``variable``: host.env, then each service recreated and waited
        for in turn; "" when all are healthy and the smoke request answers, else why."""
        self.say(f"  writing {variable}={ref} to .airig/{HOST_ENV}")
        write_host_env(self.settings, self.plan, variable, ref)
        for stack, name in targets:
            self.say(f"  recreating {name} ({stack.name}) …")
            try:
                self.engine.recreate(stack, name, ref)
            except DockerError as exc:
                return f"{name}: {exc.message}"
            self.say(f"  waiting for {name} to be healthy …")
            started = self.clock()
            found = self.wait(stack, name)
            self.say(f"  {name} {found} after {self._took(started)}")
            if found != "healthy":
                return f"{name} {found}"
        self.say(f"  smoke request: GET {SMOKE.get(smoke, '/')} through {smoke}'s port …")
        failed = self.smoke_check(smoke)
        self.say(f"  {failed}" if failed else "  smoke request answered")
        return failed or ""


def host_env_value(settings: Settings, variable: str) -> str:
    path = settings.state_dir / HOST_ENV
    lines = path.read_text().splitlines() if path.is_file() else []
    return next((ln.split("=", 1)[1] for ln in lines if ln.startswith(f"{variable}=")), "")


def write_host_env(settings: Settings, plan: ComposePlan, variable: str, ref: str) -> None:
    """``variable=ref`` in ``.airig/host.env`` (the env file Compose reads after .env, so
    it wins over a pin there), and each stack folder's copy for compose by hand."""
    path = settings.state_dir / HOST_ENV
    lines = path.read_text().splitlines() if path.is_file() else []
    kept = [line for line in lines if line.split("=", 1)[0] != variable]
    path.write_text("".join(f"{line}\n" for line in sorted([*kept, f"{variable}={ref}"])))
    for stack in plan.stacks:
        copy = stack_env_path(settings, stack.name)
        if copy.is_file():
            copy.write_text(stack_env_text(stack))


def outcome_line(outcome: Outcome) -> str:
    m = outcome.move
    if outcome.ok:
        return (
            f"[green]✔[/] {escape(m.service)}: now {escape(m.tag)} {short(m.digest)} "
            f"(healthy, smoke check passed){queued_work(m.service, True)}"
        )
    old = short(m.locked.digest) if m.locked else "-"
    back = outcome.rolled_back
    waits = queued_work(m.service, back == "healthy")
    back = "" if back == "healthy" else f", and the rollback is {back}"
    return (
        f"{m.service}: {m.tag} {short(m.digest)} failed ({outcome.reason}); rolled back to "
        f"{old}{back}{waits}"
    )


def lookup_cached(registry: Registry | None = None) -> Callable[[str], tuple[str, str]]:
    registry = registry or Registry()
    seen: dict[str, tuple[str, str]] = {}

    def lookup(ref: str) -> tuple[str, str]:
        if ref not in seen:
            seen[ref] = registry.lookup(ref)
        return seen[ref]

    return lookup


# ------------------------------------------------------------------ status
def image_rows(settings: Settings, when: datetime | None = None) -> list[dict[str, str]]:
    """Per locked image: service, tag, short digest, and age (since it was built, else
    since it was locked), for `status`."""
    try:
        lock = read_lock(settings.state_dir)
    except ConfigError:
        return []  # status reports, it does not refuse: `update` says what is wrong
    rows = []
    for entry in sorted(lock.values(), key=lambda e: (e.service, e.variable)):
        rows.append({
            "service": entry.service,
            "variable": entry.variable,
            "tag": entry.tag,
            "digest": short(entry.digest),
            "age": age(entry.created or entry.locked_at, when),
        })  # fmt: skip
    return rows


def age(stamp: str, when: datetime | None = None) -> str:
    try:
        # Docker writes nanoseconds (2026-11-20T03:12:09.123456789Z): seconds are enough
        then = datetime.fromisoformat(stamp.split(".")[0].removesuffix("Z"))
    except ValueError:
        return "?"
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = ((when or datetime.now(UTC)) - then).total_seconds()
    if seconds < 3600:
        return f"{max(0, int(seconds // 60))} min"
    if seconds < 2 * 86400:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} days"
