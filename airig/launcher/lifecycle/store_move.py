"""`migrate-store`: the brain's SQLite store moved into the kit's own PostgreSQL service.

A kit that ran on SQLite and now has ``AIRIG_BRAIN_STORE=postgres`` in .env must copy its
store BEFORE a brain starts on PostgreSQL: the brain's first writes there (a worker
registering) make the target non-empty, and the copy (the brain's ``migrate-store``,
``airig/brain/store/migrations/migrate_store.py``) goes into an empty store only. So:

1. refuse, with nothing changed, what cannot work: the knob is ``sqlite``, a joined rig
   (no brain here), the kit's image not built, no SQLite store on the brain's state volume
   (a look in a container: the host cannot read volumes), the brain running (it would
   write on while the copy reads; ``--yes`` stops 03-agents first, and says so);
2. start 01-infra's ``postgres`` service alone (its profile) and wait for its health
   (``container.wait_healthy``, the one wait);
3. copy in a one-off container of the kit's image on the kit's network, the state volume
   mounted read-only, ``BRAIN_DATABASE_URL`` the URL `up` writes into host.env for the
   brain (``postgres.database_url``; in the container's environment, never on a command
   line, never printed: every relayed line is scrubbed of the password);
4. relay the copy's per-table lines; success says to run `up`, a target that already holds
   rows says how to go on, any other failure is one line with postgres left running.

Why the copy works on a copy of the file: the store is in WAL mode, and after the brain's
clean stop its ``-wal``/``-shm`` files are gone; SQLite cannot open such a database on a
read-only mount (it must create ``-shm``: "unable to open database file"). So the
container copies ``brain.db`` (and a ``-wal`` a crash left) into its own scratch folder
and migrates from there; the volume itself is never written, not even upgraded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from airig.common.errors import AirigError
from airig.launcher.compose import postgres
from airig.launcher.compose.container import HEALTHY, SERVICE_LABEL, wait_healthy
from airig.launcher.compose.docker import (
    PROJECT_LABEL,
    Docker,
    docker_errors,
    engine_errors,
    one_off,
)
from airig.launcher.compose.plan import ComposePlan, plan_for_running
from airig.launcher.lifecycle.rig_lock import rig_lock
from airig.launcher.settings import Settings

AGENTS_STACK = "03-agents"
BRAIN_SERVICE = "brain"
STATE_VOLUME = "brain-state"  # without the rig's prefix, as 01-infra/compose.yaml names it
STATE_MOUNT = "/state"  # where the brain mounts it (03-agents/compose.yaml, BRAIN_DB)
LABEL = "store-move"  # PROBE_LABEL's value on this command's containers
# A large store's tables take minutes each with no line between them: the engine client
# that follows the copy's output must not give up on a quiet minute.
COPY_TIMEOUT_S = 24 * 3600.0
LOOK_TIMEOUT_S = 120.0
REFUSED_NON_EMPTY = "already holds rows"  # migrate_store._lock_empty's words

# In the kit's image, on the state volume (read-only): is there a SQLite store, and how
# many plans does it hold (immutable=1: a read-only mount cannot take WAL's -shm file).
LOOK_SCRIPT = """\
import json, sqlite3
path = "/state/brain.db"
found = {"store": False, "plans": None}
try:
    with open(path, "rb") as file:
        found["store"] = file.read(16) == b"SQLite format 3\\x00"
except OSError:
    pass
if found["store"]:
    try:
        conn = sqlite3.connect("file:" + path + "?immutable=1", uri=True)
        found["plans"] = conn.execute("SELECT count(*) FROM plans").fetchone()[0]
    except sqlite3.Error:
        pass
print(json.dumps(found))
"""
# The copy: the store (and the -wal a crash left) into the container's own scratch
# folder, then the brain's migrate-store from there (see the module's docstring).
COPY_SCRIPT = """\
import shutil, sys, tempfile
from pathlib import Path
scratch = Path(tempfile.mkdtemp(prefix="airig-store-"))
try:
    for name in ("brain.db", "brain.db-wal"):
        if Path("/state", name).exists():
            shutil.copyfile(Path("/state", name), scratch / name)
except OSError as exc:
    print(f"cannot copy the store out of the state volume: {exc}", file=sys.stderr)
    sys.exit(2)
from airig.brain.store.migrations.__main__ import main
sys.exit(main(["migrate-store", "--from", str(scratch / "brain.db")]))
"""


class StoreMoveError(AirigError):
    """migrate-store refused or failed; the message says what changed (nothing, or only
    the postgres service started)."""


@dataclass(frozen=True)
class Look:
    """What the state volume holds: a SQLite store, and its plans (None: unknown)."""

    store: bool
    plans: int | None


Say = Callable[[str], None]


def move_store(settings: Settings, docker: Docker, say: Say, *, yes: bool = False) -> None:
    """The whole step, under the rig's lock (no `up` or `down` of this rig meanwhile)."""
    with rig_lock(settings, "migrate-store", say):
        _move(settings, docker, say, yes)


def _move(settings: Settings, docker: Docker, say: Say, yes: bool) -> None:
    refuse_settings(settings)
    url = postgres.database_url(settings)  # a placeholder password: one line, first
    plan = plan_for_running(settings)
    if not docker.has_image(settings.image):
        raise StoreMoveError(
            f"the kit's image {settings.image} is not on this engine, so there is no brain "
            "store to move",
            "nothing changed; a kit that never ran has nothing to copy: run "
            "`python start_services.py up`",
        )
    running = brain_running(docker, plan)
    if running and not yes:
        raise StoreMoveError(
            "the brain is running (03-agents): it would record on while its store is copied",
            "nothing changed; run `python start_services.py migrate-store --yes` to stop "
            "03-agents first (its workers too; `up` starts them again)",
        )
    volume = state_volume(settings)
    found = look(settings, docker, volume)
    if not found.store:
        raise StoreMoveError(
            f"no SQLite store on the brain's state volume {volume} ({STATE_MOUNT}/brain.db)",
            "nothing changed; there is nothing to copy: `python start_services.py up` starts "
            "the brain on an empty PostgreSQL store",
        )
    if running:
        say("Stopping 03-agents (the brain and its workers; `up` starts them again) …")
        docker.down(plan.stack(AGENTS_STACK))
    start_postgres(settings, docker, plan, say)
    plans = "" if found.plans is None else f" ({found.plans} plans)"
    say(f"Copying the brain's SQLite store{plans} from volume {volume} into PostgreSQL …")
    copy(settings, docker, volume, url, say)
    say(
        "The store is in PostgreSQL now; the SQLite file stays on its volume as it was. "
        "Run `python start_services.py up` to start the brain on it."
    )


def refuse_settings(settings: Settings) -> None:
    """What .env alone rules out, before the engine is asked anything."""
    if settings.brain_store != postgres.STORE_POSTGRES:
        raise StoreMoveError(
            "AIRIG_BRAIN_STORE is sqlite: migrate-store moves the SQLite store into the "
            "kit's PostgreSQL service",
            "nothing changed; set AIRIG_BRAIN_STORE=postgres in .env, then run it again",
        )
    if settings.joined:
        raise StoreMoveError(
            "this rig joined another machine's brain: it has no store of its own to move",
            "run migrate-store on the brain's machine",
        )


def state_volume(settings: Settings) -> str:
    return f"{settings.project_prefix}-{STATE_VOLUME}"


def brain_running(docker: Docker, plan: ComposePlan) -> bool:
    """A running brain container of this rig's 03-agents project."""
    project = plan.stack(AGENTS_STACK).project
    return any(
        c.labels.get(SERVICE_LABEL) == BRAIN_SERVICE
        for c in docker.containers(label=f"{PROJECT_LABEL}={project}")
    )


def look(settings: Settings, docker: Docker, volume: str) -> Look:
    """The state volume's store, read in a container of the kit's image (no network, the
    volume read-only, removed after): the host cannot read a Docker volume."""
    import docker.errors as errors

    with engine_errors(f"looking for the volume {volume}"):
        try:
            docker.sdk().volumes.get(volume)
        except errors.NotFound:
            return Look(store=False, plans=None)
    client = docker.probe_sdk(LOOK_TIMEOUT_S)
    reading = engine_errors(f"reading the brain's store on volume {volume}")
    with reading, one_off(
        client, settings.image, f"{settings.project_prefix}-store-look", LABEL,
        command=["python", "-c", LOOK_SCRIPT], volumes=_state_mount(volume), **_hardened(),
    ) as output:  # fmt: skip
        said = _text(output).strip().splitlines()
    try:
        found = json.loads(said[-1])
        plans = found.get("plans")
        return Look(bool(found.get("store")), plans if isinstance(plans, int) else None)
    except (IndexError, ValueError, AttributeError):
        raise StoreMoveError(
            f"cannot tell what the volume {volume} holds: the kit's image answered "
            f"{(said[-1] if said else 'nothing')[:120]!r}",
            "nothing changed; run `python start_services.py up` once to rebuild the image",
        ) from None


def start_postgres(settings: Settings, docker: Docker, plan: ComposePlan, say: Say) -> None:
    """01-infra's postgres service alone (its profile is on: the knob says postgres), then
    the one health wait."""
    stack = plan.stack(postgres.INFRA_STACK)
    docker.ensure_network(plan.network)
    say("Starting 01-infra's postgres service …")
    with docker_errors(
        "starting the postgres service", "see `python start_services.py logs postgres`"
    ):
        docker.client(stack).compose.up(services=[postgres.SERVICE], detach=True, quiet=True)
    health = wait_healthy(
        lambda: docker.service_states(stack, postgres.SERVICE),
        postgres.SERVICE,
        settings.wait_timeout,
        say=say,
    )
    if health != HEALTHY:
        raise StoreMoveError(
            f"the postgres service is not healthy: {health}",
            "nothing was copied; see `python start_services.py logs postgres`",
        )


def copy(settings: Settings, docker: Docker, volume: str, url: str, say: Say) -> None:
    """The brain's migrate-store in a one-off container; its lines relayed, scrubbed."""
    scrub = scrubber(settings.postgres_password, url)
    client = docker.probe_sdk(COPY_TIMEOUT_S)
    with engine_errors("starting the store's copy"), one_off(
        client, settings.image, f"{settings.project_prefix}-store-move", LABEL,
        network=settings.network, detach=True, command=["python", "-c", COPY_SCRIPT],
        volumes=_state_mount(volume), environment={"BRAIN_DATABASE_URL": url}, **_hardened(),
    ) as container, engine_errors("following the store's copy"):  # fmt: skip
        for line in _lines(container.logs(stream=True, follow=True, stderr=False)):
            say(scrub(line))
        code = int((container.wait() or {}).get("StatusCode", 1))
        errors = _text(container.logs(stdout=False, stderr=True)).strip().splitlines()
    if code == 0:
        return
    last = scrub(errors[-1]) if errors else f"exit {code}"
    prefix = settings.project_prefix
    if REFUSED_NON_EMPTY in last:
        raise StoreMoveError(
            f"the PostgreSQL store (volume {prefix}-{postgres.VOLUME}) already holds data: a "
            "brain ran on it, and migrate-store copies into an empty store only",
            "keep it: `python start_services.py up` runs the brain on what it holds (the "
            "SQLite store stays on its volume); or start it fresh: `python start_services.py "
            f"down`, `docker volume rm {prefix}-{postgres.VOLUME}` (what it holds is lost), "
            "then migrate-store again",
        )
    raise StoreMoveError(
        f"the store's copy failed: {last}",
        "PostgreSQL holds none of its rows and the SQLite store is as it was; the postgres "
        "service is left running; fix the cause and run migrate-store again",
    )


def scrubber(password: str, url: str) -> Callable[[str], str]:
    """A line with the password (as typed, percent-encoded) and the URL replaced by ***."""
    secrets = sorted({s for s in (url, quote(password, safe=""), password) if s}, key=len)
    pattern = re.compile("|".join(re.escape(s) for s in reversed(secrets))) if secrets else None
    return (lambda line: pattern.sub("***", line)) if pattern else (lambda line: line)


def _state_mount(volume: str) -> dict[str, dict[str, str]]:
    return {volume: {"bind": STATE_MOUNT, "mode": "ro"}}


def _hardened() -> dict[str, Any]:
    # as the kit's services (x-hardened): no capability, no privilege gained; the image's
    # own user (the brain's, which owns the store's files)
    return {"cap_drop": ["ALL"], "security_opt": ["no-new-privileges:true"]}


def _lines(chunks: Any) -> Iterator[str]:
    """The engine's log stream (bytes, cut anywhere) as whole lines."""
    pending = ""
    for chunk in chunks:
        pending += _text(chunk)
        *done, pending = pending.split("\n")
        yield from (line.rstrip("\r") for line in done)
    if pending:
        yield pending


def _text(data: Any) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
