"""`up` and `down`: the launcher's sequence, with rollback.

up:   .env → detect → choose profile (say which source won) → preflight → pull the
      images it lacks (pull.py) → network → build the kit's image → stacks in order with
      `compose up --wait` → summary.
The GPU judgement comes before any build: on a first run the probe has no local image,
so the base image (which the build starts FROM anyway) is pulled to probe with.
A failed stack names the failing service, shows its last log lines and takes down what
this run started, so nothing is left half-started. Running `up` twice changes nothing.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.markup import escape

from airig.common.errors import AirigError, DockerError, PreflightError
from airig.launcher.compose.container import (
    HEALTHY,
    SERVICE_LABEL,
    ContainerState,
    is_ok,
    verdict,
)
from airig.launcher.compose.docker import PROJECT_LABEL, Docker, engine_errors
from airig.launcher.compose.plan import (
    ESCALATION_PROFILE,
    ComposePlan,
    StackPlan,
    build_plan,
    project_names,
)
from airig.launcher.compose.postgres import VOLUME as POSTGRES_VOLUME
from airig.launcher.compose.pull import pull_missing
from airig.launcher.compose.stack_env import remove_written, stack_env_path, stack_env_text
from airig.launcher.hardware.choice import Choice, choose_profile, probe_images
from airig.launcher.images import ImageSelection, comfyui_flag_clash
from airig.launcher.lifecycle.backup_archive import BackupError
from airig.launcher.lifecycle.builds import ImageBuilds
from airig.launcher.lifecycle.comfy_volumes import (
    COMPUTE_STACK,
    LEGACY_VOLUME,
    MODELS_VOLUME,
    USER_VOLUMES,
)
from airig.launcher.lifecycle.comfy_volumes import prepare as prepare_comfyui
from airig.launcher.lifecycle.preflight import (
    Check,
    disk_check,
    docker_checks,
    env_check,
    escalation_check,
    port_checks,
)
from airig.launcher.lifecycle.restore import apply_pending as apply_restore
from airig.launcher.lifecycle.rig_lock import rig_lock
from airig.launcher.lifecycle.update import hold_images
from airig.launcher.proofs.host import (
    load_failure,
    load_proof_env,
    prove_images,
    record_load_failure,
)
from airig.launcher.recipes import pull_env as recipe_pull_env
from airig.launcher.settings import Settings

# The shared volumes, named "<AIRIG_PROJECT_PREFIX>-<name>" (see 01-infra/compose.yaml).
VOLUMES = {
    # brain-postgres: the store with AIRIG_BRAIN_STORE=postgres (compose/postgres.py)
    "data": ["data", "results", "brain-state", *USER_VOLUMES, POSTGRES_VOLUME],
    # comfyui-data: an older kit's volume on ComfyUI's /root, models inside until `up`
    # moves them (comfy_volumes.py)
    "models": ["ollama-models", MODELS_VOLUME, LEGACY_VOLUME, "whisper-models"],
}
# The escalation gateway's service in 03-agents (profile `escalation`).
GATEWAY_SERVICE = "gateway"
# 02-compute's init containers, whose JSON lines become the progress bars
INIT_SERVICES = ("ollama-init", "comfyui-init", "whisper-init")


@dataclass
class UpResult:
    plan: ComposePlan
    choice: Choice
    started: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


class Interrupted(AirigError):
    """Ctrl-C during `up`, after this run's stacks and network were undone: one line."""

    exit_code = 130  # 128 + SIGINT, as a shell reports it

    def __init__(self) -> None:
        super().__init__("interrupted")


class LoadProofFailed(Exception):
    """ollama-init's model load failed on the GPU (its load proof): the stack is rolled
    back and `up` tries the next image once (``Launcher._after_load_failure``)."""

    def __init__(self, error: DockerError, said: str) -> None:
        super().__init__(error.message)
        self.error, self.said = error, said


class Launcher:
    def __init__(self, settings: Settings, docker: Docker, console: Console) -> None:
        self.settings, self.docker, self.console = settings, docker, console
        self._load_retried = False  # `up` runs again at most once after a failed load
        self._network_created = False  # this `up` created the shared network
        self._starting: str | None = None  # the stack being started that was not up before
        self._sigint: _Flag = _Flag()

    # ------------------------------------------------------------------ up
    def up(self, dry_run: bool = False, reprove: bool = False) -> UpResult:
        # one `up` or `down` of this rig at a time on this engine: a second one's compose
        # would recreate the containers this one's waits on (rig_lock.py)
        with rig_lock(
            self.settings, "up", getattr(self.console, "print", None), enabled=not dry_run
        ):
            return self._up(dry_run, reprove)

    def _up(self, dry_run: bool, reprove: bool) -> UpResult:
        if not dry_run:
            _require(docker_checks(self.docker))
        choice = choose_profile(self.settings, self.docker, strict=not dry_run)
        if not dry_run and _probe_lacked_image(choice):
            # A GPU probe needs a local image, and a fresh host has none. Judge the GPUs
            # now, not after a long build of the kit's image: pull the base image that
            # build starts FROM anyway, and probe with it.
            base = probe_images(self.settings)[-1]
            self.console.print(f"[bold]Pulling[/] {escape(base)} to probe the GPUs with …")
            self.docker.pull_image(base)
            choice = choose_profile(self.settings, self.docker, strict=True)
        if not dry_run and _vulkan_unbuilt(choice):
            # Ollama's Vulkan image is judged by what Vulkan sees inside it: build it now,
            # then probe (hardware/vulkan.py) before anything is written or started
            self.builds().vulkan(choice)
            choice = choose_profile(self.settings, self.docker, strict=True)
        self._say_profile(choice)
        # .airig/images.lock: start the digests that ran before, not what a tag names now
        lock = hold_images(self.settings, choice.images, self.console, self.docker)
        images = lock.selection
        if images is not None and not dry_run and not images.refusals:
            # each GPU image runs on the GPU before the kit relies on it (proofs/); a pin
            # the catalogue refuses stops `up` below first, with nothing pulled
            settled = prove_images(
                self.settings, self.docker, choice, images, self.console.print, reprove
            )
            images = settled.selection
            lock.adopt(images, set(settled.moved))
        if images is not None:
            self._say_images(images, dry_run)
            if images.refusals and not dry_run:
                raise images.refusals[0]  # a pin that cannot run here: nothing started
            clash = comfyui_flag_clash(images, self.settings.comfyui_cli_args)
            if clash is not None:
                raise clash
        # ollama-init loads the smallest model on the GPU once pulled (proofs/host.py);
        # the init containers pull AIRIG_RECIPES' models too (recipes.py)
        host_env = {
            **choice.host_env, **load_proof_env(self.settings, images),
            **recipe_pull_env(self.settings),
        }  # fmt: skip
        plan = build_plan(self.settings, choice.profile, choice.gpus, host_env, images)
        result = UpResult(plan=plan, choice=choice)
        if dry_run:
            result.commands = self.commands(plan)
            return result
        _require(self.preflight())
        self.write_generated(plan)
        # before the network, the build and any container: a bad tag or a registry that is
        # down stops `up` with one line and nothing started
        pull_missing(self.docker, plan, images, self.settings.image_registry, self.console)
        try:
            self.start(plan, images, result)
        except LoadProofFailed as failed:
            return self._after_load_failure(failed, choice, images, dry_run, reprove)
        self._retire_gateway(plan)
        lock.record(self.docker)  # the kit is up: these digests ran
        return result

    def start(self, plan: ComposePlan, images: ImageSelection | None, result: UpResult) -> None:
        """The network, the kit's image, then each stack in order.

        Ctrl-C (SIGINT) on the way is no failing service: what this run started is rolled
        back, the network too when this run created it, and the edge says "interrupted"
        (Interrupted, exit 130). Compose gets the same SIGINT and may fail first: its
        error then counts as the interrupt, not as services to fix .env for.
        """
        self._network_created |= self.docker.ensure_network(plan.network)
        with _sigint_noted() as sigint:
            self._sigint = sigint
            try:
                self._build(plan)
                for stack in plan.stacks:
                    self._start_stack(plan, stack, images, result)
            except KeyboardInterrupt:
                self._after_interrupt(plan, result)
                raise Interrupted from None

    def _start_stack(
        self, plan: ComposePlan, stack: StackPlan, images: ImageSelection | None, result: UpResult
    ) -> None:
        if stack.name == COMPUTE_STACK:  # its volumes exist now (01-infra made them)
            try:
                # a `restore` puts the archive's files back before a service reads them
                apply_restore(self.settings, self.docker, self.console.print)
                prepare_comfyui(self.settings, self.docker, stack, images, self.console)
            except (DockerError, BackupError):
                self.rollback([s for s in plan.stacks if s.name in result.started])
                raise
        self.console.print(f"[bold]Starting[/] {escape(stack.name)} …")
        self._up_stack(plan, stack, result)

    def _after_interrupt(self, plan: ComposePlan, result: UpResult) -> None:
        """Undo this run: the stacks it started (the one starting included), its network."""
        started = [s for s in plan.stacks if s.name in result.started or s.name == self._starting]
        self.rollback(started)
        if self._network_created:
            self.console.print(f"[yellow]Removing[/] the network {escape(plan.network)} …")
            self.docker.remove_network(plan.network)
            self._network_created = False

    def _after_load_failure(
        self,
        failed: LoadProofFailed,
        choice: Choice,
        images: ImageSelection | None,
        dry_run: bool,
        reprove: bool,
    ) -> UpResult:
        """The first model load failed in Ollama's image (what proofs before the start
        cannot see: "device kernel image is invalid" shows only at a load). Its verdict is
        kept as a failed proof and `up` runs again, once: the next image takes over, or a
        pin is refused, before anything starts."""
        if images is None or self._load_retried:
            raise failed.error
        ollama = images.of("ollama")
        record_load_failure(self.settings, self.docker, choice, ollama, failed.said)
        self.console.print(
            f"  [red]✘[/] {escape(ollama.image)}: a model load failed on the GPU: "
            f'"{escape(failed.said)}"; trying the next image'
        )
        self._load_retried = True
        return self.up(dry_run, reprove)

    def _retire_gateway(self, plan: ComposePlan) -> None:
        """With AIRIG_ESCALATION=off, stop a gateway an earlier `up` started. Compose leaves
        running a service whose profile is no longer active (`--remove-orphans` only removes
        services the files no longer define), and that one holds the provider's key."""
        agents = plan.stack("03-agents")
        if ESCALATION_PROFILE in agents.profiles:
            return
        from docker.errors import NotFound

        for container in self.docker.containers(label=f"{SERVICE_LABEL}={GATEWAY_SERVICE}"):
            if container.labels.get(PROJECT_LABEL) != agents.project:
                continue
            with engine_errors("removing the escalation gateway"):
                try:
                    container.remove(force=True)
                except NotFound:
                    continue  # removed since it was listed: nothing left to stop
            self.console.print("Stopped the escalation gateway (AIRIG_ESCALATION is off).")

    def builds(self) -> ImageBuilds:
        """The image builds of this `up` (builds.py), through this launcher's adapter."""
        return ImageBuilds(self.settings, self.docker, self.console)

    def _build(self, plan: ComposePlan) -> None:
        # one seam for `start`: tests that start stacks without an engine replace it
        self.builds().kit_images(plan)

    def commands(self, plan: ComposePlan) -> list[str]:
        """The exact commands `up` runs, in order (for --dry-run)."""
        lines = [f"docker network create {plan.network}   # if missing"]
        stack_envs = [stack_env_path(self.settings, s.name) for s in plan.stacks]
        for path in [*plan.generated, *stack_envs]:
            lines.append(f"# write {path.relative_to(self.settings.root)}")
        for stack in plan.stacks:  # launcher/compose/pull.py: which services, from compose config
            pull = self.docker.command(stack, "pull", "--policy", "missing", "SERVICE")
            lines.append(f"{pull}   # per image it runs that the engine lacks, one at a time")
        lines += self.builds().commands(plan)
        for stack in plan.stacks:
            lines.append(
                self.docker.command(
                    stack,
                    "up",
                    "--detach",
                    "--wait",
                    "--wait-timeout",
                    str(stack.wait_timeout),
                    "--remove-orphans",
                )
            )
        return lines

    def preflight(self) -> list[Check]:
        checks = [env_check(self.settings), escalation_check(self.settings)]
        docker_root = self.docker.engine_info().get("DockerRootDir")
        checks.append(disk_check(self.settings, docker_root))
        checks += port_checks(self.settings, self.own_ports())
        return checks

    def own_ports(self) -> set[int]:
        """Host ports already published by this rig's containers (a second `up` is fine).
        Only this rig's projects: another rig's port on this engine is a real clash."""
        by_project = self.docker.project_services(set(project_names(self.settings).values()))
        return {host_port(p) for states in by_project.values() for s in states for p in s.ports}

    def _say_profile(self, choice: Choice) -> None:
        # reasons and fixes quote drivers and the engine ("capabilities: [[gpu]]"): never markup
        self.console.print(
            f"Profile [bold cyan]{escape(choice.profile)}[/] (from {escape(choice.source)})"
        )
        if choice.refusal is not None:  # dry-run: say it, since nothing else will
            self.console.print(
                f"  [bold yellow]⚠ up would refuse {escape(choice.profile)}:[/] "
                f"{escape(choice.refusal.message)}"
            )
        else:
            for reason in choice.reasons:
                self.console.print(f"  · {escape(reason)}")
        if choice.fix:
            self.console.print(f"  [yellow]→ {escape(choice.fix)}[/]")
        from airig.provision.fit import check_fit

        models = list(self.settings.ollama_models)
        # each worker owns one GPU, so a model must fit the largest single card
        largest = max((g.vram_bytes for g in choice.gpus), default=0)
        for warning in check_fit(models, [largest] if largest else []):
            self.console.print(f"  [yellow]⚠ {escape(warning)}[/]")
        unprovisioned = planner_warning(self.settings)
        if unprovisioned:
            self.console.print(f"  [yellow]⚠ {escape(unprovisioned)}[/]", soft_wrap=True)

    def _say_images(self, images: ImageSelection, dry_run: bool) -> None:
        """Which image each compute service runs and why; a fallback to CPU or a pin that
        cannot run is one line (the pin's ✘ line is the error `up` stops with)."""
        for line in image_lines(images):
            if dry_run or not line.startswith("[red]✘"):
                self.console.print(line, highlight=False, soft_wrap=True)

    def write_generated(self, plan: ComposePlan) -> None:
        for path, text in plan.generated.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            # private: host.env holds the brain's database URL, password and all
            # (AIRIG_BRAIN_STORE=postgres); an older kit's file is narrowed too
            path.touch(mode=0o600)
            path.chmod(0o600)
            path.write_text(text)
        # `docker compose logs` run inside a stack folder reads only that folder's .env:
        # link each to a file holding what this run used (.env, the generated values, the
        # project, profile and files), so the stacks work by hand exactly as `up` ran them.
        for stack in plan.stacks:
            env_path = stack_env_path(self.settings, stack.name)
            env_path.parent.mkdir(parents=True, exist_ok=True)
            env_path.touch(mode=0o600)  # it holds the secrets .env holds
            env_path.write_text(stack_env_text(stack))
            link = self.settings.root / stack.name / ".env"
            target = Path("..") / env_path.relative_to(self.settings.root)
            if link.is_symlink() and Path(os.readlink(link)) != target:
                link.unlink()  # an older kit linked ../.env
            if not link.exists() and not link.is_symlink():
                link.symlink_to(target)

    def _up_stack(self, plan: ComposePlan, stack: StackPlan, result: UpResult) -> None:
        was_up = _all_healthy(self.docker.services(stack))
        self._starting = None if was_up else stack.name
        try:
            if stack.name == "02-compute":
                self._up_with_progress(stack)
            else:
                self.docker.up(stack)
        except DockerError as exc:
            if self._sigint.set:  # compose stopped on the user's Ctrl-C: not a failure
                raise KeyboardInterrupt from None
            diagnosis = self.diagnose(stack)
            load = self._load_failure(stack, diagnosis)
            started = [s for s in plan.stacks if s.name in result.started or s is stack]
            if not was_up or load is not None:
                self.rollback(started)
            error = diagnosis.error(stack.name, exc)
            if load is not None:
                raise LoadProofFailed(error, str(load.get("said") or "")) from None
            raise error from None
        if not was_up:
            result.started.append(stack.name)
        self._starting = None

    def _up_with_progress(self, stack: StackPlan) -> None:
        """`compose up --wait` in a thread while the init containers' lines become bars.

        The bars follow the init containers' structured progress lines live, then the
        model → size → verified table; rich draws in this (main) thread.
        """
        from airig.launcher.lifecycle.init_logs import InitLogs
        from airig.provision.progress import render

        follower = InitLogs(self.docker.sdk(), stack.project, INIT_SERVICES, since=time.time())
        failure: list[BaseException] = []

        def run_up() -> None:
            try:
                self.docker.up(stack)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                failure.append(exc)
            finally:
                follower.close()

        worker = threading.Thread(target=run_up, name="compose-up", daemon=True)
        follower.start()
        worker.start()
        try:
            render(follower.lines(), self.console)
        except KeyboardInterrupt:
            # compose got the SIGINT too: let it stop before the rollback runs `down`
            follower.close()
            worker.join(timeout=60)
            raise
        worker.join()
        if failure:
            raise failure[0]

    def _load_failure(self, stack: StackPlan, diagnosis: Diagnosis) -> dict[str, Any] | None:
        """ollama-init's failed load proof (its JSON line), when that is why it failed."""
        from docker.errors import NotFound

        init = "ollama-init"
        if stack.name != COMPUTE_STACK or init in diagnosis.gone:
            return None
        if not any(f.service == init for f in diagnosis.failing):
            return None
        try:
            return load_failure(self.docker.logs(stack, init, tail=50))
        except (DockerError, NotFound):
            return None  # its container went away since: no verdict to read

    def diagnose(self, stack: StackPlan) -> Diagnosis:
        """Print the last log lines of every service that is not up and healthy.

        A container removed between `compose up` and this look (another `down`, a
        `docker rm`) is said as such, not a crash of the diagnosis; a service whose
        logs cannot be read gets one line saying so."""
        from docker.errors import NotFound

        diagnosis = Diagnosis([s for s in self.docker.services(stack) if not is_ok(s)])
        for svc in diagnosis.failing:
            code = "" if svc.exit_code in (None, 0) else f", exit code {svc.exit_code}"
            self.console.print(
                f"[red]✘ {escape(svc.service)}[/]: {escape(f'{svc.state} {svc.health}{code}')}"
            )
            try:
                text = self.docker.logs(stack, svc.service, tail=15)
            except (DockerError, NotFound) as exc:
                said = exc.message if isinstance(exc, DockerError) else str(exc)
                if _container_gone(exc):
                    diagnosis.gone.append(svc.service)
                    said = "its container is gone: it was removed while `up` waited for it"
                self.console.print(f"    ({escape(said)})")
                continue
            lines = [line for line in text.splitlines()[-15:] if line.strip()]
            if svc.health == "unhealthy":
                lines += self._last_check(svc)
            for line in lines:
                self.console.print(f"    {line}", markup=False, highlight=False)
            diagnosis.printed |= bool(lines)
        return diagnosis

    def _last_check(self, svc: ContainerState) -> list[str]:
        """The last healthcheck's output of an unhealthy service, the one line that says
        why: its log may show a server that started fine (a check that timed out)."""
        from docker.errors import NotFound

        try:
            outputs = self.docker.health_log(svc.container)
        except (DockerError, NotFound):
            return []
        last = outputs[-1].splitlines()[-1] if outputs and outputs[-1] else ""
        return [f"healthcheck: {last[:300]}"] if last else []

    def rollback(self, stacks: list[StackPlan]) -> None:
        for stack in reversed(stacks):
            self.console.print(f"[yellow]Rolling back[/] {escape(stack.name)} …")
            self.docker.down(stack)

    # ------------------------------------------------------------------ down
    def down(self, plan: ComposePlan, volumes: bool, keep_models: bool) -> list[str]:
        """Remove the stacks of ``plan`` (plan_for_running: whatever `up` started), the
        network, and every file any `up` wrote, whichever profile it ran; after any `up`
        of this rig that is running (rig_lock.py)."""
        with rig_lock(self.settings, "down", getattr(self.console, "print", None)):
            return self._down(plan, volumes, keep_models)

    def _down(self, plan: ComposePlan, volumes: bool, keep_models: bool) -> list[str]:
        done = []
        for stack in reversed(plan.stacks):
            self.docker.down(stack)
            done.append(f"{stack.name} down")
        if volumes:
            kept = [] if keep_models else VOLUMES["models"]
            names = [f"{self.settings.project_prefix}-{v}" for v in VOLUMES["data"] + kept]
            done += [f"volume {v} removed" for v in self.docker.remove_volumes(names)]
        done.append(self.docker.remove_network(plan.network))
        remove_written(self.settings)
        return done


@dataclass
class Diagnosis:
    """What `diagnose` found and printed about a stack that failed to start."""

    failing: list[ContainerState]
    printed: bool = False  # some log lines were shown above the error
    gone: list[str] = field(default_factory=list)  # services whose container vanished

    def error(self, stack: str, exc: DockerError) -> DockerError:
        """The one error `up` stops with: the hint points at log lines only when some
        were printed; a vanished container is said, not taken for a crash."""
        vanished = bool(self.gone) or _container_gone(exc)
        if self.gone and len(self.gone) == len(self.failing):
            what = f"{', '.join(self.gone)}: container removed while `up` waited for it"
        elif vanished and not self.failing:
            what = "a container was removed while `up` waited for it"
        else:
            names = ", ".join(f.service for f in self.failing) or stack
            what = f"{names} failed to start"
        if vanished:
            # the kit's own runs wait for each other (rig_lock.py): the remover ran outside
            # them (compose or docker by hand, an older kit, the same engine reached under
            # another DOCKER_HOST)
            hint = (
                "something outside this `up` removed or recreated it (`docker compose` or "
                "`docker rm` on these projects, an older kit with the same "
                "AIRIG_PROJECT_PREFIX): run up again once that is done"
            )
        elif self.printed:
            hint = "read the log lines above; fix .env or the host, then run up again"
        else:
            hint = "it printed no log lines; fix .env or the host, then run up again"
        return DockerError(f"{stack}: {what} ({exc.message})", hint)


def _container_gone(exc: BaseException) -> bool:
    """Docker's "No such container" (the CLI's words, or the SDK's NotFound)."""
    from docker.errors import NotFound

    if isinstance(exc, NotFound):
        return True
    said = exc.message if isinstance(exc, DockerError) else str(exc)
    return "no such container" in said.lower()


def planner_warning(settings: Settings) -> str | None:
    """AIRIG_PLANNER_MODEL drafts every goal's plan, but only AIRIG_OLLAMA_MODELS is
    pulled: said at `up`, not left for the first goal to fail on. Said, not pulled
    behind the user's back: a model is gigabytes, and the fix is one of two edits."""
    from airig.common.errors import ConfigError
    from airig.common.ollama_names import OllamaName

    if settings.source_of("AIRIG_OLLAMA_MODELS") == "default":
        return None  # no .env yet: `up` makes it from .env.example, whose lists agree
    try:
        wanted = OllamaName.parse(settings.planner_model).display
        pulled = {OllamaName.parse(m).display for m in settings.ollama_models}
    except ConfigError as exc:
        return exc.message
    if wanted in pulled:
        return None
    return (
        f"AIRIG_PLANNER_MODEL {settings.planner_model} is not in AIRIG_OLLAMA_MODELS, so it "
        "is not pulled and `submit --goal` and `plan` tasks will fail: add it to "
        "AIRIG_OLLAMA_MODELS in .env, or set AIRIG_PLANNER_MODEL to one listed there"
    )


def image_lines(images: ImageSelection) -> list[str]:
    """Rich-markup lines: per service its image and why, then warnings and refusals."""
    lines = []
    for choice in images.choices:
        device = "GPU" if choice.on_gpu else "CPU"
        lines.append(
            f"  Image [bold]{escape(choice.service)}[/] ({device}): {escape(choice.image)}"
            f" [dim]({escape(choice.why)})[/]"
        )
    for choice in images.choices:
        if choice.warning:
            lines.append(f"  [bold yellow]⚠ {escape(choice.warning)}[/]")
        if choice.refusal:
            lines.append(f"[red]✘ {escape(choice.refusal.message)}[/]")
            lines.append(f"  [yellow]→ {escape(choice.refusal.hint or '')}[/]")
    return lines


def host_port(mapping: str) -> int:
    """The host side of a published port, ``IP:PORT->PORT/PROTO`` (IPv6: ``:::PORT->…``)."""
    return int(mapping.partition("->")[0].rpartition(":")[2])


def _all_healthy(services: list[ContainerState]) -> bool:
    return verdict(services, done_ok=True) == HEALTHY


def _probe_lacked_image(choice: Choice) -> bool:
    return any(
        p.status == "not run" and "no probe image" in p.detail
        for p in choice.report.probes.values()
    )


def _vulkan_unbuilt(choice: Choice) -> bool:
    """Ollama is on Vulkan and its image is not built yet, so Vulkan was not probed."""
    probe = choice.vulkan
    return probe is not None and probe.status == "not run" and "not built yet" in probe.detail


@dataclass
class _Flag:
    set: bool = False


@contextmanager
def _sigint_noted() -> Iterator[_Flag]:
    """While inside: a SIGINT is noted on the flag, then raised as KeyboardInterrupt as
    Python's own handler does. Off the main thread (signals cannot be set there) the flag
    stays down."""
    flag = _Flag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def noted(signum: int, frame: FrameType | None) -> None:
        flag.set = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, noted)
    try:
        yield flag
    finally:
        signal.signal(
            signal.SIGINT, previous if previous is not None else signal.default_int_handler
        )


def _require(checks: list[Check]) -> None:
    for check in checks:
        if not check.ok:
            raise PreflightError(f"{check.name}: {check.detail}", check.fix)
