"""The pull path on a real registry: Debian's docker-registry (Distribution 2.8) on
127.0.0.1 holds the stand-ins under their upstream names (tests/images/registry.sh), and
`up` pulls what the engine lacks through `docker compose pull` before it starts anything.
A tag the registry lacks and a registry that is down each stop `up` with one line naming
the image and the fix, exit ≠ 0, and no container, network or build left behind."""

from __future__ import annotations

import socket
import subprocess

import pytest
from support import one_error

pytestmark = pytest.mark.docker


def present(image: str) -> bool:
    done = subprocess.run(["docker", "image", "inspect", image], capture_output=True)
    return done.returncode == 0


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_missing_tag_stops_up_after_the_pulls_before_it_and_leaves_nothing(kit):
    from conftest import airig_leftovers, registry, write_test_env

    mirror = registry()
    comfyui = f"{mirror}/yanwk/comfyui-boot:cpu"
    missing = f"{mirror}/ollama/ollama:0.0.0-absent"
    write_test_env(kit.root, OLLAMA_IMAGE="ollama/ollama:0.0.0-absent")
    assert not present(comfyui)  # force_clean untagged it: `up` must pull it
    before = airig_leftovers()

    done = kit.run(timeout=300)

    line = one_error(done.returncode, done.stderr, missing, "manifest unknown")
    assert line.endswith(f"cannot pull {missing}: no such tag in {mirror} (manifest unknown)")
    assert "OLLAMA_IMAGE in .env" in done.stderr  # the fix names the variable
    # the images before it (services in name order) came through the registry
    assert f"Pulling {comfyui} (comfyui-cpu)" in done.stdout, done.stdout
    assert present(comfyui)
    assert "whisper" not in done.stdout.split(f"Pulling {missing}")[-1]  # never tried
    assert "Building" not in done.stdout and "Starting" not in done.stdout
    assert airig_leftovers() == before  # no container, no network


def test_an_unreachable_registry_stops_up_before_anything_starts(kit):
    from conftest import airig_leftovers, write_test_env

    down = f"127.0.0.1:{closed_port()}"
    write_test_env(kit.root, AIRIG_IMAGE_REGISTRY=down)
    before = airig_leftovers()

    done = kit.run(timeout=300)

    image = f"{down}/yanwk/comfyui-boot:cpu"  # the first image `up` pulls
    line = one_error(done.returncode, done.stderr, image, "connection refused")
    assert line.endswith(f"the registry {down} is unreachable (connection refused)")
    assert "AIRIG_IMAGE_REGISTRY" in done.stderr.split(line)[-1]  # the fix
    assert "Building" not in done.stdout and "Starting" not in done.stdout
    assert airig_leftovers() == before
