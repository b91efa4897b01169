"""Fixtures for tests on the real Docker engine.

They run the real launcher on a copy of the kit, and the kit's own image built from its
real Dockerfile with the test base image and the local wheelhouse. The third-party images
are the stand-ins, pushed under their upstream names to a real registry on 127.0.0.1
(tests/images/registry.sh): `.env` names that registry in AIRIG_IMAGE_REGISTRY and pins no
image, so `up` picks the images as for a user and pulls them through `docker compose pull`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e_lanes import LANES, Lane, lane_for
from images import build_kit
from images.build_kit import KIT_IMAGE

ROOT = Path(__file__).resolve().parents[2]
KIT_FILES = [
    "01-infra",
    "02-compute",
    "03-agents",
    "airig",
    "pyproject.toml",
    "README.md",
    ".env.example",
    "start_services.py",
    ".dockerignore",
    "recipes",
]


def docker_reachable() -> str | None:
    """None when the engine and Compose v2 answer, else why not."""
    if not shutil.which("docker"):
        return "docker command not installed"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        return "Docker daemon not reachable"
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0:
        return "Compose v2 plugin not installed"
    return None


def pytest_collection_modifyitems(config, items):
    why = docker_reachable()
    if why:
        skip = pytest.mark.skip(reason=why)
        for item in items:
            if "docker" in item.keywords:
                item.add_marker(skip)


def _run_script(*args: str) -> str:
    done = subprocess.run(["bash", *args], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


_current: Lane = LANES["a"]


@pytest.fixture(autouse=True, scope="module")
def lane(request: pytest.FixtureRequest) -> Lane:
    """The module's lane (tests/e2e_lanes.py), which the helpers below work in: its
    projects, network, ports and registry name. Autouse, so it is set before the module's
    own kit fixtures, and after the previous module's kits were torn down."""
    global _current
    _current = lane_for(request.node.nodeid)
    return _current


def current_lane() -> Lane:
    return _current


@pytest.fixture(scope="session")
def test_images() -> None:
    """Every image the kits use (tests/images/build-all.sh: base, Vulkan, wheelhouse,
    stand-ins, the kit's own image, the stand-ins pushed to the test registry), each cached.
    The script holds the machine's images lock: a session fixture runs once per xdist
    worker, two pytest runs may share the engine, and .ci/run starts the same script in the
    background before pytest, so a kit waits here for that build rather than making its own."""
    _run_script("tests/images/build-all.sh")


@pytest.fixture(scope="session")
def early_images() -> None:
    """The base, Vulkan and stand-in images only (``build-all.sh --early``): the e2e modules
    that start no kit (``e2e_lanes.EARLY``) wait for these and not for the kit's own image,
    so they run first in their lane while it builds."""
    _run_script("tests/images/build-all.sh", "--early")


def registry() -> str:
    """The test registry's address as this lane names it (127.0.0.1:PORT or
    localhost:PORT: one registry), started if it is not running."""
    address = _run_script("tests/images/registry.sh", "start").strip()
    return f"{_current.registry_host}:{address.rsplit(':', 1)[1]}"


def forget_pulled() -> None:
    """Untag every image this lane pulled from the test registry, so its next `up` pulls
    it again through the registry (the stand-in's own airig-test/... tag keeps the layers).
    Only this lane's names: the other lane's `up` may be between its pull and its create."""
    running = subprocess.run(
        ["bash", "tests/images/registry.sh", "address"], cwd=ROOT, capture_output=True, text=True
    )
    if running.returncode != 0:
        return  # no registry, nothing pulled from it
    prefix = f"{_current.registry_host}:{running.stdout.strip().rsplit(':', 1)[1]}/"
    listed = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    pulled = [ref for ref in listed if ref.startswith(prefix)]
    if pulled:
        subprocess.run(["docker", "rmi", *pulled], capture_output=True)


@dataclass
class Kit:
    root: Path

    def run(
        self, *args: str, timeout: int = 900, stdin: str | None = None
    ) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRIG_", "OLLAMA_"))}
        env.update(AIRIG_HOME=str(self.root), COLUMNS="200", AIRIG_NO_BOOTSTRAP="1")
        return subprocess.run(
            [sys.executable, str(self.root / "start_services.py"), *args],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
        )

    def env(self) -> dict[str, str]:
        from dotenv import dotenv_values

        return {k: v or "" for k, v in dotenv_values(self.root / ".env").items()}

    def status(self) -> list[dict]:
        done = self.run("status", "--json", timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["services"]


def write_test_env(root: Path, **overrides: str) -> None:
    """The user's .env.example with the kit's image built from local parts and the compute
    images pulled from the test registry (what tests may change)."""
    values = {
        **_current.env(),  # the lane's projects, network and ports
        "AIRIG_IMAGE": KIT_IMAGE,  # built ahead by tests/images/build_kit.py, same arguments
        **build_kit.build_args(),
        "AIRIG_IMAGE_REGISTRY": registry(),
        "AIRIG_MIN_FREE_DISK_GB": "1",
        "AIRIG_WAIT_TIMEOUT": "300",
        **overrides,
    }
    lines = []
    for line in (root / ".env.example").read_text().splitlines():
        key = line.split("=", 1)[0]
        if "=" in line and not line.startswith("#") and key in values:
            line = f"{key}='{values.pop(key)}'"
        lines.append(line)
    lines += [f"{k}='{v}'" for k, v in values.items()]
    (root / ".env").write_text("\n".join(lines) + "\n")


def worker_container(name: str) -> str:
    """The container of the worker the brain knows as ``name``: a CPU worker is named by
    its Compose slot (`cpu-2`, or `<rig>-cpu-2` on a joined rig: airig/worker/naming.py),
    so its container is `<prefix>-agents-worker-cpu-2`; any other name is its hostname (a
    container id), which docker accepts as it is."""
    slot = re.fullmatch(r"(?:.+-)?cpu-(\d+)", name)
    return _current.container("agents", "worker-cpu", int(slot[1])) if slot else name


def copy_kit(dest: Path) -> Path:
    for name in KIT_FILES:
        src = ROOT / name
        if src.is_dir():
            # wheels are ~100 MB: hard links, not copies
            shutil.copytree(
                src,
                dest / name,
                copy_function=os.link,
                ignore=shutil.ignore_patterns("__pycache__", ".env"),
            )
        else:
            shutil.copy2(src, dest / name)
    return dest


def airig_leftovers() -> dict[str, list[str]]:
    """Containers, networks and volumes of this lane's kit that exist now (the other lane
    and test_two_rigs run their kits meanwhile, under prefixes of their own)."""

    def names(*cmd: str) -> list[str]:
        out = subprocess.run(["docker", *cmd], capture_output=True, text=True).stdout
        return [n for n in out.split() if n]

    mine = f"{_current.prefix}-"
    return {
        "containers": [
            c
            for c in names(
                "ps",
                "-a",
                "--filter",
                "label=com.docker.compose.project",
                "--format",
                '{{.Label "com.docker.compose.project"}}:{{.Names}}',
            )
            if c.startswith(mine)
        ],
        "networks": [
            n for n in names("network", "ls", "--format", "{{.Name}}") if n == _current.network
        ],
        "volumes": [
            v for v in names("volume", "ls", "--format", "{{.Name}}") if v.startswith(mine)
        ],
    }


def force_clean() -> None:
    """Remove anything a failed test of this lane left, so the next test starts clean (and
    pulls its compute images from the registry again)."""
    for stack in ("agents", "compute", "infra"):
        ids = subprocess.run(
            ["docker", "ps", "-aq", "--filter",
             f"label=com.docker.compose.project={_current.project(stack)}"],
            capture_output=True,
            text=True,
        ).stdout.split()  # fmt: skip
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
    subprocess.run(["docker", "network", "rm", _current.network], capture_output=True)
    for v in airig_leftovers()["volumes"]:
        subprocess.run(["docker", "volume", "rm", "-f", v], capture_output=True)
    forget_pulled()


@pytest.fixture
def kit(tmp_path, test_images) -> Kit:
    force_clean()
    root = copy_kit(tmp_path / "airig")
    write_test_env(
        root,
        AIRIG_OLLAMA_MODELS="qwen2.5:0.5b,nomic-embed-text",
        AIRIG_WHISPER_MODELS="Systran/faster-whisper-tiny",
    )
    yield Kit(root)
    force_clean()
