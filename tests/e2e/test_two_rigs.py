"""Two rigs on one engine: rig A runs the brain, rig B joins it with a join token.

Both are kit copies brought up by the real launcher with the stand-in images; only .env
differs (what tests may change): their own project prefix, network, volumes and host
ports. Rig A publishes its ports on the Docker bridge's gateway address, which this host
and rig B's containers (on another network) both reach, as a LAN address would be
reached from another machine. A plan runs on workers of both rigs; rig B's workers are
then killed mid-task and their tasks are re-queued and finished by rig A; `down` of both
leaves nothing of either.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import time

import pytest
import requests

pytestmark = pytest.mark.docker
PREFIXES = ("tworig-a", "tworig-b")  # not airig-*: other e2e tests clean those up
PORT_KEYS = ("FILES_PORT", "OLLAMA_PORT", "COMFYUI_PORT", "WHISPER_PORT", "BRAIN_PORT")


def bridge_gateway() -> str:
    """The default bridge's gateway: an address of this host that containers reach."""
    out = subprocess.run(
        ["docker", "network", "inspect", "bridge", "--format", "{{json .IPAM.Config}}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for config in json.loads(out) or []:
        if config.get("Gateway"):
            return config["Gateway"]
        if config.get("Subnet") and ":" not in config["Subnet"]:
            return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
    raise AssertionError(f"the bridge network has no IPv4 gateway: {out}")


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("0.0.0.0", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def leftovers() -> dict[str, list[str]]:
    """Containers, networks and volumes of either rig that exist now."""

    def names(*cmd: str) -> list[str]:
        out = subprocess.run(["docker", *cmd], capture_output=True, text=True).stdout
        return [n for n in out.split() if n.startswith(PREFIXES)]

    return {
        "containers": names("ps", "-a", "--format", '{{.Label "com.docker.compose.project"}}'),
        "networks": names("network", "ls", "--format", "{{.Name}}"),
        "volumes": names("volume", "ls", "--format", "{{.Name}}"),
    }


def clean() -> None:
    for prefix in PREFIXES:
        for stack in ("agents", "compute", "infra"):
            label = f"label=com.docker.compose.project={prefix}-{stack}"
            ids = subprocess.run(
                ["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True
            ).stdout.split()
            if ids:
                # with their anonymous volumes: none left dangling for the other kits'
                # tests to count (test_kit_comfyui_upgrade.py runs meanwhile)
                subprocess.run(["docker", "rm", "-f", "-v", *ids], capture_output=True)
    left = leftovers()
    for network in left["networks"]:
        subprocess.run(["docker", "network", "rm", network], capture_output=True)
    for volume in left["volumes"]:
        subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True)


@pytest.fixture(scope="module")
def rigs(tmp_path_factory, test_images):
    from conftest import Kit, copy_kit, write_test_env

    gateway = bridge_gateway()
    with socket.socket() as probe:
        try:
            probe.bind((gateway, 0))
        except OSError:
            pytest.skip(f"the bridge gateway {gateway} is not an address of this host")
    clean()
    kits = []
    ports = iter(free_ports(2 * len(PORT_KEYS)))
    for prefix, address in zip(PREFIXES, (gateway, "127.0.0.1"), strict=True):
        root = copy_kit(tmp_path_factory.mktemp(prefix) / "airig")
        write_test_env(
            root,
            AIRIG_PROJECT_PREFIX=prefix, AIRIG_NETWORK=f"{prefix}-net",
            AIRIG_BIND_ADDRESS=address, AIRIG_RIG_NAME=prefix.replace("tworig", "rig"),
            AIRIG_OLLAMA_MODELS="qwen2.5:0.5b",
            AIRIG_WHISPER_MODELS="Systran/faster-whisper-tiny",
            **{key: str(next(ports)) for key in PORT_KEYS},
        )  # fmt: skip
        kits.append(Kit(root))
    yield gateway, kits[0], kits[1]
    for kit in reversed(kits):
        kit.run("down", "--volumes", "--yes", timeout=300)
    clean()


def brain_url(kit) -> str:
    env = kit.env()
    return f"http://{env['AIRIG_BIND_ADDRESS']}:{env['BRAIN_PORT']}"


def admin(kit) -> dict:
    return {"Authorization": f"Bearer {kit.env()['BRAIN_ADMIN_TOKEN']}"}


def submit(kit, tasks: str) -> str:
    answer = requests.post(
        f"{brain_url(kit)}/v1/plans", data=f"tasks:\n{tasks}", timeout=10,
        headers={**admin(kit), "Content-Type": "application/yaml"},
    )  # fmt: skip
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def plan(kit, plan_id: str) -> dict:
    url = f"{brain_url(kit)}/v1/plans/{plan_id}"
    return requests.get(url, headers=admin(kit), timeout=10).json()


def wait_plan(kit, plan_id: str, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = plan(kit, plan_id)
        if found["status"] != "running":
            return found
        time.sleep(1)
    raise AssertionError(f"plan {plan_id} still running after {timeout}s: {found}")


def hosts(kit) -> dict[str, str]:
    """Worker name -> its rig, as the brain lists them."""
    listed = requests.get(f"{brain_url(kit)}/v1/workers", headers=admin(kit), timeout=10)
    return {w["name"]: w["host"] for w in listed.json()["workers"]}


def noop_tasks(count: int, sleep_s: float) -> str:
    return "".join(
        f"  - {{id: t{i}, type: noop, payload: {{sleep_s: {sleep_s}}}}}\n" for i in range(count)
    )


def join_rig_b(gateway: str, rig_a, rig_b) -> set[str]:
    """`token create --join` on A, its printed command on B; B's worker names."""
    made = rig_a.run("token", "create", "--join", "--name", "rig-b")
    assert made.returncode == 0, made.stdout + made.stderr
    command = next(line.split() for line in made.stdout.splitlines() if " join --brain " in line)
    assert command[:4] == ["python", "start_services.py", "join", "--brain"]
    assert command[4] == brain_url(rig_a) and command[4].startswith(f"http://{gateway}:")
    assert command[-1] == "--insecure"  # plain http to another address: said out loud

    joined = rig_b.run(*command[2:], "--profile", "cpu")
    assert joined.returncode == 0, joined.stdout + joined.stderr
    assert "Traceback" not in joined.stdout + joined.stderr
    b_services = {r["service"] for r in rig_b.status()}
    assert "brain" not in b_services and {"worker-cpu", "models-ready"} <= b_services
    status = json.loads(rig_b.run("status", "--json").stdout)
    assert status["joined"]["token"] == "accepted", status

    # The brain's machine lists rig B's workers with their host, in `status` too.
    names = hosts(rig_a)
    rig_b_workers = {n for n, h in names.items() if h == "rig-b"}
    assert len(rig_b_workers) == 2 and all(n.startswith("rig-b-") for n in rig_b_workers)
    assert len([h for h in names.values() if h == "rig-a"]) == 2, names
    status = rig_a.run("status")
    assert status.returncode == 0, status.stderr
    rows = [line for line in status.stdout.splitlines() if "rig-b-" in line]
    assert len(rows) == 2 and all(" rig-b " in row.replace("│", " ") for row in rows), rows
    return rig_b_workers


def running_on(kit, plan_id: str, workers: set[str], timeout: float = 60) -> dict[str, dict]:
    """Tasks of the plan running on these workers, as soon as there are some."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tasks = plan(kit, plan_id)["tasks"]
        found = {t["id"]: t for t in tasks if t["state"] == "RUNNING" and t["worker_id"] in workers}
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError("no task of the plan ran on those workers")


def kill_for_good(project: str, service: str) -> None:
    """docker kill, with the restart policy off first: the workers stay dead."""
    containers = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={project}",
         "--filter", f"label=com.docker.compose.service={service}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert len(containers) == 2, containers
    subprocess.run(["docker", "update", "--restart=no", *containers], check=True,
                   capture_output=True)  # fmt: skip
    subprocess.run(["docker", "kill", *containers], check=True, capture_output=True)


def test_a_second_rig_joins_shares_the_work_and_its_loss_is_recovered(rigs):
    gateway, rig_a, rig_b = rigs
    started = time.monotonic()
    up = rig_a.run("--profile", "cpu")
    assert up.returncode == 0, up.stdout + up.stderr
    print(f"rig A up after {time.monotonic() - started:.0f}s")
    rig_b_workers = join_rig_b(gateway, rig_a, rig_b)
    print(f"rig B joined after {time.monotonic() - started:.0f}s")

    # One plan, run by workers of both rigs.
    plan_id = submit(rig_a, noop_tasks(20, 1))
    done = wait_plan(rig_a, plan_id)
    assert {t["state"] for t in done["tasks"]} == {"SUCCEEDED"}, done
    names = hosts(rig_a)
    assert {names[t["worker_id"]] for t in done["tasks"]} == {"rig-a", "rig-b"}, done["tasks"]
    print(f"plan on both rigs done after {time.monotonic() - started:.0f}s")

    # Rig B's workers die mid-task (and stay dead): their tasks finish on rig A.
    plan_id = submit(rig_a, noop_tasks(6, 15))
    on_b = running_on(rig_a, plan_id, rig_b_workers)
    kill_for_good("tworig-b-agents", "worker-cpu")
    done = wait_plan(rig_a, plan_id, timeout=240)
    finished = {t["id"]: t for t in done["tasks"]}
    assert {t["state"] for t in finished.values()} == {"SUCCEEDED"}, done
    for key, was in on_b.items():
        task = finished[key]
        assert task["attempt"] > was["attempt"], task  # re-queued, not lost
        assert names[task["worker_id"]] == "rig-a", task
    print(f"rig B's lost tasks done on rig A after {time.monotonic() - started:.0f}s")

    # down on both rigs: nothing of either is left.
    for kit in (rig_b, rig_a):
        down = kit.run("down", "--volumes", "--yes", timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
    assert leftovers() == {"containers": [], "networks": [], "volumes": []}
    print(f"two-rig test took {time.monotonic() - started:.0f}s")
