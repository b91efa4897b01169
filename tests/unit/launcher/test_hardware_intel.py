"""Intel GPUs and integrated GPUs on fixture hosts (fake sysfs and /dev): detection → the
profile → the image per service, with the reasons `detect` prints.

Upstream's facts: an Intel GPU is vendor 0x8086 bound to i915 or xe, reached through its
render node (yanwk's xpu README: `--device=/dev/dri`); Ollama has no Intel build, its
Vulkan runner drives it (Mesa ANV); yanwk's `xpu` ComfyUI lists Arc cards (and Core Ultra
iGPUs, whose generation airig cannot tell); speaches has no Intel build. Integrated GPUs
share the host's memory: used only with AIRIG_IGPU=on."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_hosts import RENDER_GID, alder_lake_igpu, arc_a770, radeon_780m
from hardware_fakes import GIB, FakeDocker, FakeHost

from airig.common.errors import HardwareError
from airig.launcher.hardware import HardwareReport, decide_profile, detect
from airig.launcher.hardware.choice import detected_env, gpu_slots, profile_gpus
from airig.launcher.images import ImageSelection, choose_images, load_catalog

ROOT = Path(__file__).resolve().parents[3]
CATALOG = load_catalog(ROOT)
AMD = 0x1002
VULKAN_OLLAMA = "airig/ollama-vulkan:0.20.6"


def detected(host: FakeHost) -> HardwareReport:
    return detect(host.sys, host.dev, None, None, FakeDocker(), pci_ids=None)


def chosen(report: HardwareReport, igpu: bool = False, **pins: str) -> tuple[str, ImageSelection]:
    profile = decide_profile(report, igpu=igpu).profile
    return profile, choose_images(CATALOG, profile, profile_gpus(report, profile, igpu), pins)


def summary(selection: ImageSelection) -> dict[str, str]:
    return {c.service: f"{c.image} {c.backend}" for c in selection.choices}


def test_an_arc_a770_gets_vulkan_ollama_xpu_comfyui_and_cpu_whisper(tmp_path):
    host = FakeHost(tmp_path)
    arc_a770(host)
    report = detected(host)
    (arc,) = report.gpus_of("intel")
    assert (arc.kind, arc.kernel_driver, arc.render_node) == ("discrete", "xe", "renderD129")
    profile, images = chosen(report)
    assert profile == "gpu-intel"
    assert summary(images) == {
        "ollama": f"{VULKAN_OLLAMA} vulkan",  # no Intel build of Ollama: its Vulkan runner
        "comfyui": "yanwk/comfyui-boot:xpu xpu",  # yanwk's README lists the A770
        "whisper": "ghcr.io/speaches-ai/speaches:0.8.3-cpu cpu",  # no Intel build exists
    }
    assert all(c.warning is None for c in images.choices)
    assert "Vulkan runner" in images.of("ollama").why
    # the worker and its Ollama get the card's render node and the group owning it
    (slot,) = gpu_slots(report, profile)
    assert (slot.render_node, slot.gids) == ("/dev/dri/renderD129", (RENDER_GID,))
    assert detected_env(report, profile) == {"AIRIG_INTEL_GIDS": str(RENDER_GID)}


def test_an_arc_on_i915_works_as_on_xe(tmp_path):
    host = FakeHost(tmp_path)
    arc_a770(host, driver="i915")
    assert chosen(detected(host))[0] == "gpu-intel"


def test_an_intel_card_without_its_driver_is_unusable_with_the_fix(tmp_path):
    host = FakeHost(tmp_path)
    arc_a770(host, driver=None)
    decision = decide_profile(detected(host))
    assert decision.profile == "cpu"
    assert "none is bound to i915 or xe" in decision.reasons[0]
    assert decision.fix is not None and "modprobe xe" in decision.fix
    with pytest.raises(HardwareError, match="gpu-intel was requested by --profile"):
        decide_profile(detected(host), flag="gpu-intel")


def test_an_intel_igpu_is_left_alone_unless_the_user_allows_it(tmp_path):
    host = FakeHost(tmp_path)
    alder_lake_igpu(host)
    report = detected(host)
    off = decide_profile(report)
    assert off.profile == "cpu"
    assert (
        "Intel integrated GPU at 0000:00:02.0 not used: its memory is the host's: set "
        "AIRIG_IGPU=on in .env to use it"
    ) in off.reasons
    with pytest.raises(HardwareError) as refused:  # forced without the opt-in: refused
        decide_profile(report, flag="gpu-intel")
    assert refused.value.hint == "Set AIRIG_IGPU=on in .env."
    profile, images = chosen(report, igpu=True)
    assert profile == "gpu-intel"
    assert any(
        "integrated used: AIRIG_IGPU=on" in r for r in decide_profile(report, igpu=True).reasons
    )
    ollama, comfy = images.of("ollama"), images.of("comfyui")
    assert (ollama.image, ollama.on_gpu) == (VULKAN_OLLAMA, True)
    # yanwk lists Core Ultra iGPUs only; airig cannot tell the generation: ComfyUI on CPU
    assert (comfy.image, comfy.on_gpu) == ("yanwk/comfyui-boot:cpu", False)
    assert "integrated" in (comfy.warning or "")


def test_an_arc_beside_an_igpu_takes_the_arc_only(tmp_path):
    host = FakeHost(tmp_path)
    alder_lake_igpu(host)
    arc_a770(host)
    report = detected(host)
    profile, images = chosen(report)
    assert profile == "gpu-intel"
    assert [s.render_node for s in gpu_slots(report, profile)] == ["/dev/dri/renderD129"]
    assert images.of("comfyui").image == "yanwk/comfyui-boot:xpu"


def test_nvidia_and_amd_still_come_before_intel(tmp_path):
    host = FakeHost(tmp_path)
    arc_a770(host)
    host.pci("0000:05:00.0", AMD, 0x744C, driver="amdgpu", vram=24 * GIB, vram_used=GIB)
    host.kfd_node(0, cpu_cores_count=16, simd_count=0)
    host.kfd_node(1, cpu_cores_count=0, simd_count=192, gfx_target_version=110000,
                  location_id=5 << 8, domain=0, drm_render_minor=130)  # fmt: skip
    host.amd_nodes(render=("renderD130",), render_gid=RENDER_GID, kfd_gid=RENDER_GID)
    assert decide_profile(detected(host)).profile == "gpu-amd"


def test_a_radeon_780m_works_only_with_the_opt_in(tmp_path):
    """gfx1103: Ollama 0.20.6's ROCm 7 build lists it (CMakePresets "ROCm 7"); no ComfyUI
    ROCm tag does (images.yaml), so ComfyUI stays on the CPU."""
    host = FakeHost(tmp_path)
    radeon_780m(host)
    report = detected(host)
    (apu,) = report.gpus_of("amd")
    assert (apu.kind, apu.gfx_target) == ("integrated", "gfx1103")
    assert decide_profile(report).profile == "cpu"  # an APU is not picked without opt-in
    profile, images = chosen(report, igpu=True)
    assert profile == "gpu-amd"
    assert "integrated (APU), used: AIRIG_IGPU=on" in decide_profile(report, igpu=True).reasons[0]
    assert summary(images)["ollama"] == "ollama/ollama:0.20.6-rocm rocm"
    assert images.of("comfyui").on_gpu is False and "gfx1103" in images.of("comfyui").warning
    assert [s.render_node for s in gpu_slots(report, profile, igpu=True)] == ["/dev/dri/renderD128"]


def test_ollama_forced_to_rocm_on_intel_is_refused(tmp_path):
    host = FakeHost(tmp_path)
    arc_a770(host)
    report = detected(host)
    images = choose_images(CATALOG, "gpu-intel", profile_gpus(report, "gpu-intel"), {},
                           backends={"ollama": "rocm", "comfyui": "cpu"})  # fmt: skip
    refusal = images.of("ollama").refusal
    assert refusal is not None and refusal.message.startswith("OLLAMA_BACKEND=rocm in .env")
    assert images.of("comfyui").image == "yanwk/comfyui-boot:cpu"
    assert images.of("comfyui").refusal is None
