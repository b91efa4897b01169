"""The kit with its brain's store on PostgreSQL (issue 38): `AIRIG_BRAIN_STORE=postgres`,
01-infra's `postgres` service on a real server, for real.

The server is Debian bookworm's PostgreSQL 15 (tests/standins/postgres, built by
tests/images/build-postgres.sh on the debootstrap base with upstream's entrypoint
contract), pushed to the test registry as `library/postgres:15-debian`: not upstream's
`postgres:17` the kit names by default, so POSTGRES_IMAGE points at that honest tag, a
mirror's path as a user's .env may give it.

One kit for the module (its start is most of the time), with two brains (AIRIG_BRAINS=2:
brain and brain-2 under one name on ai-network): `up` starts the service, the brains make
their store there and a plan finishes in it; brain-2 is SIGKILLed mid-plan and the plan
still finishes with every task completed once; `backup` holds `pg_dump -Fc` of it as
`brain.dump`, `down --volumes --yes` stops the server with a clean shutdown and leaves
nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tarfile
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from e2e_lanes import lane_for

LANE = lane_for(__file__)
# tests/images/registry.sh POSTGRES_PATH: the test image's path in the test registry
POSTGRES_PATH = "library/postgres:15-debian"
# the local tag build-postgres.sh gives the same image
IMAGE = "airig-test/postgres:15-debian"
# A password the user chose, with every character that ends a URL's user part early or
# means something to a shell, Compose's interpolation or a .env file: the brain's URL must
# carry it percent-encoded (airig/launcher/compose/postgres.py) and the server must have
# been initialised with it. A space too: pg.py once re-rendered the URL with its password
# decoded bare, which libpq refused, quoting it. Not in it: a single quote
# (write_test_env quotes with it).
HOSTILE_PASSWORD = 'p@ss w:rd/%2F#?$HOME"x&y;\\z'
# masked as the brain prints every URL (airig/brain/store/migrations/postgres.py `masked`)
MASKED_URL = "postgresql+psycopg://airig:***@postgres:5432/brain"

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def up(tmp_path_factory, test_images):
    """`up --profile cpu` on PostgreSQL, once: (the kit, what `up` printed)."""
    from conftest import Kit, copy_kit, force_clean, registry, write_test_env

    force_clean()
    root = copy_kit(tmp_path_factory.mktemp("kit") / "airig")
    write_test_env(
        root,
        AIRIG_OLLAMA_MODELS="qwen2.5:0.5b",
        AIRIG_WHISPER_MODELS="Systran/faster-whisper-tiny",
        AIRIG_BRAIN_STORE="postgres",
        AIRIG_BRAINS="2",
        POSTGRES_IMAGE=f"{registry()}/{POSTGRES_PATH}",
        POSTGRES_PASSWORD=HOSTILE_PASSWORD,
    )
    kit = Kit(root)
    done = kit.run("--profile", "cpu")
    yield kit, done
    kit.run("down", "--volumes", "--yes", timeout=300)
    force_clean()


@pytest.fixture
def kit(up):
    kit, done = up
    assert done.returncode == 0, done.stdout + done.stderr
    return kit


def auth(kit) -> dict[str, str]:
    return {"Authorization": f"Bearer {kit.env()['BRAIN_ADMIN_TOKEN']}"}


def psql(sql: str) -> str:
    """One query in the postgres container over its unix socket, as `backup` runs pg_dump."""
    done = subprocess.run(
        ["docker", "exec", LANE.container("infra", "postgres"),
         "psql", "-tA", "-U", "airig", "-d", "brain", "-c", sql],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def logs(container: str) -> str:
    done = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
    return done.stdout + done.stderr


def test_the_image_refuses_to_initialise_without_a_password(test_images):
    """Upstream's contract, which the kit's `up` relies on refusing an empty password
    before the service starts: an empty data folder and no POSTGRES_PASSWORD is exit 1
    with upstream's error, and nothing is initialised."""
    done = subprocess.run(
        ["docker", "run", "--rm", "--user", "999:999", "--read-only", "--tmpfs", "/tmp",
         "--tmpfs", "/var/run/postgresql", "-e", "POSTGRES_PASSWORD=", IMAGE],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Error: Database is uninitialized and superuser password is not specified." in (
        done.stderr
    )
    assert "init process complete" not in done.stdout


def test_up_starts_postgres_and_the_brain_makes_its_store_there(up):
    kit, done = up
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "Traceback" not in said
    password = kit.env()["POSTGRES_PASSWORD"]
    assert password == HOSTILE_PASSWORD  # the user's, kept: not replaced by a generated one
    encoded = quote(password, safe="")
    assert password not in said and encoded not in said

    rows = {r["service"]: r for r in kit.status()}
    assert (rows["postgres"]["state"], rows["postgres"]["health"]) == ("running", "healthy")
    assert (rows["brain"]["state"], rows["brain"]["health"]) == ("running", "healthy")
    assert (rows["brain-2"]["state"], rows["brain-2"]["health"]) == ("running", "healthy")
    health = requests.get(f"{LANE.url('BRAIN_PORT')}/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok", health.text

    # the service as 01-infra/compose.yaml runs it: the test image, uid 999, read-only
    server = LANE.container("infra", "postgres")
    facts = json.loads(subprocess.run(
        ["docker", "inspect", server], capture_output=True, text=True, check=True
    ).stdout)[0]  # fmt: skip
    assert facts["Config"]["Image"].endswith(f"/{POSTGRES_PATH}")
    assert facts["Config"]["User"] == "999:999"
    assert facts["HostConfig"]["ReadonlyRootfs"] is True
    assert facts["HostConfig"]["PortBindings"] in (None, {})  # never on the host
    # the real server, and its version says what the tag says
    assert psql("SHOW server_version").startswith("15.")

    # one brain made the store there (the two start together: the schema's lock makes the
    # other wait, then find it made), naming the server with its password masked
    brain_log = logs(LANE.container("agents", "brain")) + logs(LANE.container("agents", "brain-2"))
    assert brain_log.count("brain store made") == 1, brain_log[-3000:]
    assert MASKED_URL in brain_log
    assert password not in brain_log and encoded not in brain_log
    # the brain's URL carried that password: the server takes it over TCP, as the brain
    over_tcp = subprocess.run(
        ["docker", "exec", "-e", f"PGPASSWORD={password}", server, "psql", "-h", "postgres",
         "-U", "airig", "-d", "brain", "-tAc", "SELECT current_user"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert over_tcp.stdout.strip() == "airig", over_tcp.stderr
    wrong = subprocess.run(
        ["docker", "exec", "-e", "PGPASSWORD=wrong", server, "psql", "-h", "postgres",
         "-U", "airig", "-d", "brain", "-tAc", "SELECT 1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr
    assert psql("SELECT count(*) FROM alembic_version") == "1"
    assert "Traceback" not in logs(server)


def test_a_plan_finishes_and_its_rows_are_in_postgres(kit):
    plan = {"name": "on-postgres", "tasks": [
        {"id": "hello", "type": "shell", "task_class": "cpu",
         "payload": {"command": "echo hello from postgres"}},
        {"id": "after", "type": "noop", "depends_on": ["hello"]},
    ]}  # fmt: skip
    brain = LANE.url("BRAIN_PORT")
    answer = requests.post(f"{brain}/v1/plans", json=plan, headers=auth(kit), timeout=30)
    assert answer.status_code == 201, answer.text
    plan_id = answer.json()["id"]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        view = requests.get(f"{brain}/v1/plans/{plan_id}", headers=auth(kit), timeout=10).json()
        if view["status"] not in ("pending", "running"):
            break
        time.sleep(1)
    states = {t["id"]: (t["state"], t.get("error")) for t in view["tasks"]}
    assert view["status"] == "succeeded", states
    assert {s for s, _ in states.values()} == {"SUCCEEDED"}, states
    # the rows are the server's (the id is the brain's hex, so no quote reaches the SQL)
    assert plan_id.isalnum(), plan_id
    assert psql(f"SELECT name FROM plans WHERE id = '{plan_id}'") == "on-postgres"
    stored = psql(f"SELECT key, state FROM tasks WHERE plan_id = '{plan_id}' ORDER BY key")
    assert stored.splitlines() == ["after|SUCCEEDED", "hello|SUCCEEDED"]


def served(container: str, kit) -> dict[str, float]:
    """Requests one brain answered per route ("POST /v1/exchange"), from its own /metrics
    (inside its container: brain-2 has no port on the host)."""
    script = (
        "import sys, urllib.request as u; r = u.Request('http://127.0.0.1:8080/metrics', "
        "headers={'Authorization': 'Bearer ' + sys.argv[1]}); "
        "print(u.urlopen(r, timeout=10).read().decode())"
    )
    done = subprocess.run(
        ["docker", "exec", container, "python", "-c", script, kit.env()["BRAIN_ADMIN_TOKEN"]],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    counts: dict[str, float] = {}
    for line in done.stdout.splitlines():
        if line.startswith("airig_brain_request_seconds_count{"):
            route = line.split('route="', 1)[1].split('"', 1)[0]
            counts[route] = float(line.rsplit(" ", 1)[1])
    return counts


def test_two_brains_serve_the_fleet_and_a_killed_one_loses_nothing(kit):
    """brain-2 answers the workers beside brain (one name on ai-network), is SIGKILLed while
    a plan runs, and the plan finishes anyway: every task completed exactly once, and
    brain-2 is back (restart: unless-stopped) on the same store."""
    second = LANE.container("agents", "brain-2")
    brain = LANE.url("BRAIN_PORT")
    # brain-2 answers the workers (Docker's DNS gives both addresses; which requests reach
    # it is the draw of each new connection, and uvicorn closes idle ones after 5 s, so a
    # worker's next heartbeat or exchange draws again): a heartbeat, an exchange, a
    # renewal, each counts
    worker_routes = ("POST /v1/workers/", "POST /v1/exchange", "POST /v1/claims", "POST /v1/tasks/")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        answered = served(second, kit)
        if sum(n for route, n in answered.items() if route.startswith(worker_routes)):
            break
        time.sleep(2)
    assert sum(n for route, n in answered.items() if route.startswith(worker_routes)), answered
    tasks = [
        {"id": f"t{i}", "type": "shell", "task_class": "cpu",
         "payload": {"command": f"sleep 1; echo task {i}"}}
        for i in range(12)
    ]  # fmt: skip
    tasks.append({"id": "end", "type": "noop", "depends_on": [t["id"] for t in tasks]})
    answer = requests.post(
        f"{brain}/v1/plans", json={"name": "two-brains", "tasks": tasks}, headers=auth(kit),
        timeout=30,
    )  # fmt: skip
    assert answer.status_code == 201, answer.text
    plan_id = answer.json()["id"]

    def view() -> dict:
        return requests.get(f"{brain}/v1/plans/{plan_id}", headers=auth(kit), timeout=10).json()

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # mid-plan: some done, most not
        done = [t for t in view()["tasks"] if t["state"] == "SUCCEEDED"]
        if len(done) >= 2:
            break
        time.sleep(0.3)
    # A crash, not a stop: SIGKILL to the brain's process from the host. `docker kill`
    # would be a user's stop, which the restart policy leaves stopped.
    pid = subprocess.run(
        ["docker", "inspect", "--format", "{{.State.Pid}}", second],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    try:
        os.kill(int(pid), signal.SIGKILL)
    except PermissionError:  # not root: the engine kills it, and starts it as a crash would
        subprocess.run(["docker", "kill", "--signal", "KILL", second], check=True)
        subprocess.run(["docker", "start", second], check=True)

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        now = view()
        if now["status"] not in ("pending", "running"):
            break
        time.sleep(1)
    states = {t["id"]: (t["state"], t.get("error")) for t in now["tasks"]}
    assert now["status"] == "succeeded", states
    events = requests.get(
        f"{brain}/v1/plans/{plan_id}/events", headers=auth(kit), timeout=10
    ).json()["events"]  # fmt: skip
    completed: dict[str, int] = {}
    for event in events:
        if event["event_type"] == "task_completed":
            completed[event["task_id"]] = completed.get(event["task_id"], 0) + 1
    # none lost, none run to completion twice (a lease the dead brain granted, unanswered,
    # is the reaper's to expire and hand out again: never a second completion)
    assert sorted(completed.values()) == [1] * len(tasks), completed
    # brain-2 is back on the same store, healthy, and the fleet never saw an error
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        rows = {r["service"]: r for r in kit.status()}
        if (rows["brain-2"]["state"], rows["brain-2"]["health"]) == ("running", "healthy"):
            break
        time.sleep(2)
    assert (rows["brain-2"]["state"], rows["brain-2"]["health"]) == ("running", "healthy")
    for name in ("brain", "brain-2"):
        said = logs(LANE.container("agents", name))
        assert "Traceback" not in said, said[-3000:]
    # one brain runs the timers at a time: exactly one holds the lock on the server now
    from airig.brain.store.pg import TIMERS_LOCK

    high, low = TIMERS_LOCK >> 32, TIMERS_LOCK & 0xFFFFFFFF  # a bigint key's two halves
    holders = psql(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
        f"AND objsubid = 1 AND classid = {high} AND objid = {low}"
    )
    assert holders == "1", holders


def test_doctor_asks_the_server_itself(kit):
    done = kit.run("doctor", timeout=300)
    said = " ".join(done.stdout.split())  # rich wraps a long row at COLUMNS
    server = LANE.container("infra", "postgres")
    assert f"{server} healthy, pg_isready: 127.0.0.1:5432 - accepting connections" in said, (
        done.stdout + done.stderr
    )


def test_backup_holds_the_databases_dump(kit, tmp_path):
    done = kit.run("backup", "--to", str(tmp_path), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [archive] = tmp_path.glob("airig-backup-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        member = next(
            (m for m in tar.getmembers() if m.name.endswith("brain-state/brain.dump")), None
        )
        assert member is not None, names
        extracted = tar.extractfile(member)
        assert extracted is not None, member
        dumped = extracted.read()
    assert dumped.startswith(b"PGDMP"), dumped[:16]  # pg_dump's custom format
    assert not any(n.endswith("brain.db") for n in names), names  # no SQLite snapshot
    # the dump is whole: the server's own pg_restore lists the store's tables in it
    listed = subprocess.run(
        ["docker", "exec", "-i", LANE.container("infra", "postgres"), "pg_restore", "--list"],
        input=dumped, capture_output=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    for table in (b"TABLE public plans", b"TABLE public tasks", b"TABLE DATA public plans"):
        assert table in listed.stdout, listed.stdout[-2000:]
    checked = kit.run("backup", "--verify", str(archive))
    assert checked.returncode == 0 and "every sha256 matches" in checked.stdout, checked.stdout


def test_down_stops_the_server_cleanly_and_leaves_nothing(kit):
    from conftest import airig_leftovers

    server = LANE.container("infra", "postgres")
    events = subprocess.Popen(
        ["docker", "events", "--filter", "type=container", "--filter", f"container={server}",
         "--filter", "event=die", "--format", "{{json .}}"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        done = kit.run("down", "--volumes", "--yes", timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        time.sleep(2)  # the die event reaches the stream
    finally:
        events.terminate()
        out, _ = events.communicate(timeout=30)
    died = [json.loads(line) for line in out.splitlines() if line.strip()]
    # SIGINT (the image's STOPSIGNAL: a fast shutdown with its checkpoint), never SIGKILL
    assert [e["Actor"]["Attributes"].get("exitCode") for e in died] == ["0"], died
    assert airig_leftovers() == {"containers": [], "networks": [], "volumes": []}
    generated = [p for p in Path(kit.root, ".airig").rglob("*") if p.name == "host.env"]
    assert generated == []  # the URL with the password went with the kit
