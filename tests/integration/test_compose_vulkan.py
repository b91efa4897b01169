"""GPUs that CUDA and ROCm images do not serve, as `up` runs them: a fixture host (fake
sysfs and /dev) → detection → the profile → the image choice with the settings'
overrides → the plan → Compose's own `docker compose config` on the files and env files
`up` writes. AMD cards ROCm dropped, a Radeon 780M, an Intel Arc A770 and an Intel iGPU.

Upstream's facts (02-compute/images.yaml): Ollama's ROCm 7 build has no gfx803 (RX 580) or
gfx1031 (RX 6700 XT) kernels; the plain image's Vulkan runner drives them through /dev/dri
(ollama#17010); gfx1031 runs the ROCm build as gfx1030 with HSA_OVERRIDE_GFX_VERSION=10.3.0
(docs/gpu.mdx "Overrides on Linux"). Intel: Ollama's Vulkan runner, yanwk's `xpu` ComfyUI
(xpu/docker-compose.yml: /dev/dri, ipc: host), Whisper on the CPU image."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support import write_env
from unit.gpu_hosts import alder_lake_igpu, arc_a770, radeon_780m
from unit.hardware_fakes import GIB, FakeDocker, FakeHost

from airig.launcher.compose.plan import build_plan
from airig.launcher.hardware import decide_profile, detect
from airig.launcher.hardware.choice import detected_env, gpu_slots, igpu_on, select_images
from airig.launcher.settings import load_settings

pytestmark = pytest.mark.skipif(
    shutil.which("docker") is None
    or subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0,
    reason="docker compose v2 plugin not installed",
)
AMD = 0x1002
RENDER_GID = 109


def amd_card(root: Path, device: int, gfx_version: int, cards: int = 1):
    """``cards`` discrete AMD GPUs of one model on a host with the ROCm kernel driver."""
    host = FakeHost(root)
    host.kfd_node(0, cpu_cores_count=16, simd_count=0)
    for n in range(cards):
        bus = 3 + n
        host.pci(f"0000:{bus:02x}:00.0", AMD, device, driver="amdgpu", vram=8 * GIB)
        host.kfd_node(1 + n, cpu_cores_count=0, simd_count=64, gfx_target_version=gfx_version,
                      location_id=bus << 8, domain=0, drm_render_minor=128 + n)  # fmt: skip
    host.amd_nodes(render=tuple(f"renderD{128 + n}" for n in range(cards)),
                   kfd_gid=RENDER_GID, render_gid=RENDER_GID)  # fmt: skip
    return detected(host)


def detected(host: FakeHost):
    """Detection with a reachable engine (no probe image): devices present = usable."""
    return detect(host.sys, host.dev, None, None, FakeDocker(), pci_ids=None)


def compose_models(kit: Path, report, profile: str = "gpu-amd") -> tuple[dict, dict, dict]:
    """(02-compute services, 03-agents services, the choice per service) as `up` runs them."""
    settings = load_settings(kit)
    igpu = igpu_on(settings)
    assert decide_profile(report, igpu=igpu).profile == profile  # what detection picks
    images = select_images(settings, report, profile)
    plan = build_plan(settings, profile, gpu_slots(report, profile, igpu),
                      detected_env(report, profile), images)  # fmt: skip
    for path, text in plan.generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    models = []
    for name in ("02-compute", "03-agents"):
        stack = plan.stack(name)
        cmd = ["docker", "compose", *sum((["-f", str(f)] for f in stack.files), [])]
        cmd += [*sum((["--env-file", str(e)] for e in stack.env_files), [])]
        cmd += ["--profile", profile, "-p", stack.project, "config", "--format", "json"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        models.append(json.loads(done.stdout)["services"])
    return models[0], models[1], {c.service: c for c in images.choices}


def assert_ollama_on_vulkan(compute: dict, agents: dict, cards: int) -> None:
    ollama = compute["ollama-gpu-amd"]
    assert ollama["image"] == "airig/ollama-vulkan:0.20.6"
    assert ollama["build"]["args"] == {"OLLAMA_BASE": "ollama/ollama:0.20.6"}
    assert Path(ollama["build"]["context"]).name == "ollama-vulkan"
    assert (Path(ollama["build"]["context"]) / "Dockerfile").is_file()
    assert [d["source"] for d in ollama["devices"]] == ["/dev/dri"]  # no /dev/kfd
    assert ollama["environment"]["OLLAMA_VULKAN"] == "1"
    assert ollama["group_add"] == [str(RENDER_GID)]
    assert ollama["networks"]["ai"]["aliases"] == ["ollama"]
    for n in range(cards):  # each worker's own Ollama: its render node only
        own = agents[f"ollama-gpu{n}"]
        assert own["image"] == "airig/ollama-vulkan:0.20.6"
        assert [d["source"] for d in own["devices"]] == [f"/dev/dri/renderD{128 + n}"]
        assert own["environment"]["OLLAMA_VULKAN"] == "1"
        assert "ROCR_VISIBLE_DEVICES" not in own["environment"]
        assert (Path(own["build"]["context"]) / "Dockerfile").is_file()


def test_rx_580_runs_ollama_on_vulkan_and_comfyui_on_cpu(kit, tmp_path):
    write_env(kit)
    report = amd_card(tmp_path / "host", 0x67DF, 80003, cards=2)  # Polaris 10, gfx803
    compute, agents, chosen = compose_models(kit, report)
    assert_ollama_on_vulkan(compute, agents, cards=2)
    assert "gfx803" in chosen["ollama"].why and chosen["ollama"].backend == "vulkan"
    comfy = compute["comfyui-gpu-amd"]  # no ROCm build carries gfx803, and no Vulkan one
    assert comfy["image"] == "yanwk/comfyui-boot:cpu" and "devices" not in comfy
    assert "gfx803" in (chosen["comfyui"].warning or "")


def test_rx_6700_xt_without_the_override_runs_ollama_on_vulkan(kit, tmp_path):
    write_env(kit)
    report = amd_card(tmp_path / "host", 0x73DF, 100301)  # Navi 22, gfx1031
    compute, agents, chosen = compose_models(kit, report)
    assert_ollama_on_vulkan(compute, agents, cards=1)
    assert "gfx1031" in chosen["ollama"].why


def test_rx_6700_xt_with_the_override_runs_rocm(kit, tmp_path):
    write_env(kit, HSA_OVERRIDE_GFX_VERSION="10.3.0")
    report = amd_card(tmp_path / "host", 0x73DF, 100301)
    compute, agents, chosen = compose_models(kit, report)
    ollama = compute["ollama-gpu-amd"]
    assert ollama["image"] == "ollama/ollama:0.20.6-rocm" and "build" not in ollama
    assert {d["source"] for d in ollama["devices"]} == {"/dev/kfd", "/dev/dri"}
    assert "OLLAMA_VULKAN" not in ollama["environment"]
    assert compute["comfyui-gpu-amd"]["image"] == "yanwk/comfyui-boot:rocm6"
    assert agents["ollama-gpu0"]["image"] == "ollama/ollama:0.20.6-rocm"
    assert chosen["ollama"].backend == "rocm"


def test_ollama_forced_to_vulkan_on_a_card_rocm_serves(kit, tmp_path):
    write_env(kit, OLLAMA_BACKEND="vulkan")
    report = amd_card(tmp_path / "host", 0x744C, 110000)  # RX 7900 XTX, gfx1100
    compute, agents, chosen = compose_models(kit, report)
    assert_ollama_on_vulkan(compute, agents, cards=1)
    assert "OLLAMA_BACKEND=vulkan in .env" in chosen["ollama"].why
    assert compute["comfyui-gpu-amd"]["image"] == "yanwk/comfyui-boot:rocm"  # untouched


def test_an_arc_a770_runs_vulkan_ollama_xpu_comfyui_and_cpu_whisper(kit, tmp_path):
    write_env(kit)
    host = FakeHost(tmp_path / "host")
    arc_a770(host)
    compute, agents, chosen = compose_models(kit, detected(host), "gpu-intel")
    ollama = compute["ollama-gpu-intel"]
    assert ollama["image"] == "airig/ollama-vulkan:0.20.6"
    assert (Path(ollama["build"]["context"]) / "Dockerfile").is_file()
    assert ollama["build"]["args"] == {"OLLAMA_BASE": "ollama/ollama:0.20.6"}
    assert [d["source"] for d in ollama["devices"]] == ["/dev/dri"]
    assert ollama["environment"]["OLLAMA_VULKAN"] == "1"
    assert ollama["group_add"] == ["993"] and ollama["networks"]["ai"]["aliases"] == ["ollama"]
    comfy = compute["comfyui-gpu-intel"]
    assert comfy["image"] == "yanwk/comfyui-boot:xpu" and comfy["ipc"] == "host"
    assert [d["source"] for d in comfy["devices"]] == ["/dev/dri"]
    assert comfy["group_add"] == ["993"]
    whisper = compute["whisper-gpu-intel"]
    assert whisper["image"] == "ghcr.io/speaches-ai/speaches:0.8.3-cpu"
    assert whisper["environment"]["WHISPER__INFERENCE_DEVICE"] == "cpu"
    for name in ("ollama-gpu0", "worker-gpu0"):  # the Arc's render node alone, no /dev/kfd
        assert [d["source"] for d in agents[name]["devices"]] == ["/dev/dri/renderD129"]
        assert agents[name]["group_add"] == ["993"]
    assert agents["ollama-gpu0"]["image"] == "airig/ollama-vulkan:0.20.6"
    assert [c.backend for c in chosen.values()] == ["vulkan", "xpu", "cpu"]


def test_an_intel_igpu_with_the_opt_in_runs_ollama_on_vulkan(kit, tmp_path):
    write_env(kit, AIRIG_IGPU="on")
    host = FakeHost(tmp_path / "host")
    alder_lake_igpu(host)
    compute, agents, chosen = compose_models(kit, detected(host), "gpu-intel")
    assert compute["ollama-gpu-intel"]["image"] == "airig/ollama-vulkan:0.20.6"
    comfy = compute["comfyui-gpu-intel"]  # xpu is listed for Arc; this iGPU: CPU image
    assert comfy["image"] == "yanwk/comfyui-boot:cpu" and "devices" not in comfy
    assert comfy["environment"]["CLI_ARGS"].split() == ["--cpu"]
    assert [d["source"] for d in agents["ollama-gpu0"]["devices"]] == ["/dev/dri/renderD128"]
    assert chosen["ollama"].backend == "vulkan"


def test_an_intel_igpu_without_the_opt_in_runs_the_cpu_profile(kit, tmp_path):
    write_env(kit)
    host = FakeHost(tmp_path / "host")
    alder_lake_igpu(host)
    assert decide_profile(detected(host), igpu=igpu_on(load_settings(kit))).profile == "cpu"


def test_a_radeon_780m_with_the_opt_in_runs_ollamas_rocm_build(kit, tmp_path):
    write_env(kit, AIRIG_IGPU="on")
    host = FakeHost(tmp_path / "host")
    radeon_780m(host)
    compute, agents, chosen = compose_models(kit, detected(host), "gpu-amd")
    assert compute["ollama-gpu-amd"]["image"] == "ollama/ollama:0.20.6-rocm"  # lists gfx1103
    assert compute["comfyui-gpu-amd"]["image"] == "yanwk/comfyui-boot:cpu"  # no tag does
    assert [d["source"] for d in agents["ollama-gpu0"]["devices"]] == [
        "/dev/kfd",
        "/dev/dri/renderD128",
    ]
    assert chosen["ollama"].backend == "rocm"
