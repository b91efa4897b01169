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

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = os.environ.get("AIRIG_TEST_BASE_IMAGE", "airig-test/base:bookworm")
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


@pytest.fixture(scope="session")
def test_images() -> None:
    """Base image, wheelhouse and stand-ins (each cached; .ci/run builds them first), and
    the stand-ins pushed to the test registry under every name of 02-compute/images.yaml.
    One process at a time (a session fixture runs once per xdist worker, and two pytest
    runs may share the engine): the scripts' caches are not safe to fill twice at once."""
    import fcntl
    import tempfile

    # read-only: any user may lock the file whoever made it
    lock = os.open(Path(tempfile.gettempdir()) / "airig-test-images.lock", os.O_RDONLY | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _run_script("tests/images/build-base.sh")
        _run_script("tests/images/wheelhouse.sh")
        _run_script("tests/standins/build.sh")
        _run_script("tests/images/registry.sh", "push")
    finally:
        os.close(lock)  # releases the lock


def registry() -> str:
    """The test registry's address (127.0.0.1:PORT), started if it is not running."""
    return _run_script("tests/images/registry.sh", "start").strip()


def forget_pulled() -> None:
    """Untag every image pulled from the test registry, so the next `up` pulls it again
    through the registry (the stand-in's own airig-test/... tag keeps the layers)."""
    running = subprocess.run(
        ["bash", "tests/images/registry.sh", "address"], cwd=ROOT, capture_output=True, text=True
    )
    if running.returncode != 0:
        return  # no registry, nothing pulled from it
    prefix = f"{running.stdout.strip()}/"
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
        "AIRIG_IMAGE": "airig/airig:e2e",
        "AIRIG_BASE_IMAGE": BASE_IMAGE,
        "AIRIG_PIP_INSTALL_ARGS": "--no-index --find-links /tmp/wheels",
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
    so its container is `airig-agents-worker-cpu-2`; any other name is its hostname (a
    container id), which docker accepts as it is."""
    slot = re.fullmatch(r"(?:.+-)?cpu-(\d+)", name)
    return f"airig-agents-worker-cpu-{slot[1]}" if slot else name


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
    """Containers, networks and volumes of the kit that exist now."""

    def names(*cmd: str) -> list[str]:
        out = subprocess.run(["docker", *cmd], capture_output=True, text=True).stdout
        return [n for n in out.split() if n]

    return {
        # this kit's projects only: test_two_rigs.py runs its tworig-* kits meanwhile
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
            if c.startswith("airig-")
        ],
        "networks": [
            n for n in names("network", "ls", "--format", "{{.Name}}") if n == "ai-network"
        ],
        "volumes": [
            v for v in names("volume", "ls", "--format", "{{.Name}}") if v.startswith("airig-")
        ],
    }


def force_clean() -> None:
    """Remove anything a failed test left, so the next test starts clean (and pulls its
    compute images from the registry again)."""
    for project in ("airig-agents", "airig-compute", "airig-infra"):
        ids = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
            capture_output=True,
            text=True,
        ).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
    subprocess.run(["docker", "network", "rm", "ai-network"], capture_output=True)
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
