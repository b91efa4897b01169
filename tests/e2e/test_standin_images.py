"""The stand-in images on the real engine: each answers as its upstream image does inside its
container. Their servers' contracts are tests/integration/test_standins.py and
test_standin_comfyui.py (processes on 127.0.0.1); these two need the engine, so they live
here, with the other tests xdist runs on one worker (tests/conftest.py, "Parallel runs")."""

from __future__ import annotations

import hashlib
import subprocess
import time

import pytest
from standins import conftest_helpers as helpers

# its images, not the kit's own: first in its lane (e2e_lanes.EARLY)
pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("early_images")]


def test_ollama_image_answers_ollama_list_inside_the_container():
    if not helpers.docker_available():
        pytest.skip("no Docker engine reachable (`docker info` failed)")
    build = subprocess.run(
        [str(helpers.STANDINS_DIR / "build.sh"), "ollama"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    name = f"airig-standin-test-{hashlib.sha256(str(time.time()).encode()).hexdigest()[:8]}"
    run = helpers.docker(
        "run", "-d", "--name", name, "-e", "STANDIN_MODEL_BYTES=4096", "airig-test/ollama:test"
    )
    assert run.returncode == 0, run.stderr
    try:
        deadline = time.monotonic() + 20
        while (listed := helpers.docker("exec", name, "ollama", "list")).returncode != 0:
            assert time.monotonic() < deadline, listed.stderr + helpers.docker("logs", name).stdout
            time.sleep(0.2)
        assert listed.stdout.split() == ["NAME", "ID", "SIZE", "MODIFIED"]
        assert helpers.docker("exec", name, "ollama", "pull", "tinyllama").returncode == 0
        assert "tinyllama:latest" in helpers.docker("exec", name, "ollama", "list").stdout
        store = helpers.docker(
            "exec", name, "ls", "/root/.ollama/models/manifests/registry.ollama.ai/library"
        )
        assert store.stdout.split() == ["tinyllama"]
    finally:
        helpers.docker("rm", "-f", name)


def test_comfyui_image_starts_as_yanwk_cpu_and_dies_without_cpu():
    """The image's default CLI_ARGS is "--cpu" (yanwk/comfyui-boot cpu/Dockerfile); a compose
    file that sets CLI_ARGS without it (as 02-compute once did) must see the container die."""
    if not helpers.docker_available():
        pytest.skip("no Docker engine reachable (`docker info` failed)")
    build = subprocess.run(
        [str(helpers.STANDINS_DIR / "build.sh"), "comfyui"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    died = helpers.docker("run", "--rm", "-e", "CLI_ARGS=", "airig-test/comfyui:test", timeout=60)
    assert died.returncode == 1, died.stdout + died.stderr
    assert "AssertionError: Torch not compiled with CUDA enabled" in died.stderr
    name = f"airig-standin-test-{hashlib.sha256(str(time.time()).encode()).hexdigest()[:8]}"
    assert helpers.docker("run", "-d", "--name", name, "airig-test/comfyui:test").returncode == 0
    probe = (
        "import json, urllib.request as u; "
        "print(json.load(u.urlopen('http://127.0.0.1:8188/system_stats'))['devices'][0]['type'])"
    )
    try:
        deadline = time.monotonic() + 20
        while (stats := helpers.docker("exec", name, "python3", "-c", probe)).returncode != 0:
            assert time.monotonic() < deadline, stats.stderr + helpers.docker("logs", name).stderr
            time.sleep(0.2)
        assert stats.stdout.strip() == "cpu"
    finally:
        helpers.docker("rm", "-f", name)
