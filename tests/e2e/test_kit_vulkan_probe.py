"""The Vulkan probe on the real engine, with the real Vulkan loader and Mesa (issue 28 §1).

``airig-test/vulkan:bookworm`` (tests/images/build-vulkan.sh) holds Debian's vulkan-tools
and mesa-vulkan-drivers: the packages 02-compute/ollama-vulkan/Dockerfile adds to Ollama's
image. The test machines have no GPU, so what Vulkan lists in it is what a user sees when
Mesa cannot drive the card: llvmpipe alone. The probe must call that a failure, and the
launcher must then run Ollama on its CPU image with one warning, or refuse a forced Vulkan
in one line; nothing of the probe may stay behind in the engine."""

from __future__ import annotations

import os
import subprocess

import docker
import pytest
from support import copy_kit
from unit.hardware_fakes import GIB, FakeHost

from airig.launcher.compose.docker import PROBE_LABEL, Docker
from airig.launcher.hardware import detect
from airig.launcher.hardware.choice import select_images, vulkan_settled
from airig.launcher.hardware.vulkan import run_probe
from airig.launcher.settings import load_settings

# its images, not the kit's own: first in its lane (e2e_lanes.EARLY)
pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("early_images")]

IMAGE = os.environ.get("AIRIG_TEST_VULKAN_IMAGE", "airig-test/vulkan:bookworm")
AMD, RX580, GFX803 = 0x1002, 0x67DF, 80003


@pytest.fixture(scope="module")
def client():
    engine = docker.from_env(timeout=120)
    try:
        engine.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"image {IMAGE} not built (bash tests/images/build-vulkan.sh)")
    yield engine
    left = engine.containers.list(all=True, filters={"label": PROBE_LABEL})
    assert left == [], "a probe container stayed behind"


def test_real_vulkaninfo_without_a_gpu_lists_llvmpipe_and_the_probe_fails(client):
    # /dev/null stands for a render node Mesa cannot drive: mapped like one, no GPU behind it
    probe = run_probe(client, IMAGE, "amd", ["/dev/null"])
    assert probe.failed, probe
    (device,) = probe.devices
    assert device.driver == "llvmpipe" and device.device_type == "PHYSICAL_DEVICE_TYPE_CPU"
    assert "sees 0 AMD GPU(s) for 1 render node(s)" in probe.detail
    assert "(a CPU renderer)" in probe.detail


def test_a_render_node_the_host_lacks_is_the_engines_refusal(client):
    probe = run_probe(client, IMAGE, "intel", ["/dev/dri/renderD250"])
    assert probe.failed
    assert "/dev/dri/renderD250" in probe.detail and "no such file or directory" in probe.detail


def test_an_image_without_vulkaninfo_is_not_run(client):
    base = os.environ.get("AIRIG_TEST_BASE_IMAGE", "airig-test/base:bookworm")
    probe = run_probe(client, base, "amd", ["/dev/null"])
    assert probe.status == "not run" and "install vulkan-tools" in probe.detail


def test_an_rx_580_whose_vulkan_sees_no_gpu_runs_ollama_on_cpu_or_refuses_a_forced_vulkan(
    client, tmp_path
):
    """Polaris (gfx803): no ROCm build has it, so the catalogue sends Ollama to Vulkan; the
    real probe in the real Mesa image sees no GPU here, so Ollama goes to its CPU image with
    one warning, and OLLAMA_BACKEND=vulkan is refused."""
    host = FakeHost(tmp_path / "host")
    host.kfd_node(0, cpu_cores_count=16, simd_count=0)
    host.pci("0000:03:00.0", AMD, RX580, driver="amdgpu", vram=8 * GIB)
    host.kfd_node(1, cpu_cores_count=0, simd_count=36, gfx_target_version=GFX803,
                  location_id=3 << 8, domain=0, drm_render_minor=128)  # fmt: skip
    host.amd_nodes(render=("renderD128",), kfd_gid=993, render_gid=993)
    report = detect(host.sys, host.dev, None, None, None, pci_ids=None)
    kit = copy_kit(tmp_path / "kit")
    env = (kit / ".env.example").read_text().replace("change-me", "s3cret")
    (kit / ".env").write_text(env + f"\nOLLAMA_IMAGE_VULKAN={IMAGE}\n")
    settings = load_settings(kit)
    images = select_images(settings, report, "gpu-amd")
    assert images.of("ollama").backend == "vulkan"
    settled, probe = vulkan_settled(settings, Docker(), client, report, "gpu-amd", images)
    assert probe is not None and probe.failed
    ollama = settled.of("ollama")
    assert (ollama.on_gpu, ollama.backend) == (False, "cpu")
    assert (
        ollama.warning.startswith("Ollama runs on CPU: ")
        and "/dev/dri/renderD128" in ollama.warning
    )

    (kit / ".env").write_text(env.replace("OLLAMA_BACKEND=auto", "OLLAMA_BACKEND=vulkan")
                              + f"\nOLLAMA_IMAGE_VULKAN={IMAGE}\n")  # fmt: skip
    forced = load_settings(kit)
    settled, _ = vulkan_settled(forced, Docker(), client, report, "gpu-amd",
                                select_images(forced, report, "gpu-amd"))  # fmt: skip
    (refusal,) = settled.refusals
    assert refusal.message.startswith("OLLAMA_BACKEND=vulkan in .env, but Vulkan in Ollama's")
    listed = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={PROBE_LABEL}"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert listed.stdout.strip() == ""


def test_the_vulkan_image_build_takes_its_base_and_a_failed_build_is_one_line(client, tmp_path):
    """`up` builds Ollama's Vulkan image outside Compose (Docker.build_image) before it
    probes: OLLAMA_BASE reaches the FROM line, and a base it cannot pull is one DockerError
    with the engine's words and the caller's fix."""
    from airig.common.errors import DockerError

    context = tmp_path / "ctx"
    context.mkdir()
    # the shipped Dockerfile's first lines; the rest installs Mesa from Ubuntu's archive,
    # which the test machines do not reach from a build
    (context / "Dockerfile").write_text(
        "ARG OLLAMA_BASE=ollama/ollama:0.20.6\nFROM ${OLLAMA_BASE}\nENV OLLAMA_VULKAN=1\n"
    )
    tag = "airig-test/vulkan-build:check"
    try:
        Docker().build_image(context, tag, {"OLLAMA_BASE": IMAGE}, "the fix")
        built = client.images.get(tag)
        assert "OLLAMA_VULKAN=1" in built.attrs["Config"]["Env"]
        assert (
            built.attrs["RootFS"]["Layers"][0]
            == client.images.get(IMAGE).attrs["RootFS"]["Layers"][0]
        )
        with pytest.raises(DockerError) as failed:
            Docker().build_image(
                context, tag + "2", {"OLLAMA_BASE": "127.0.0.1:9/no/base:1"}, "the fix"
            )
        assert failed.value.message.startswith(f"building {tag}2 failed: ")
        assert "127.0.0.1:9" in failed.value.message and failed.value.hint == "the fix"
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
