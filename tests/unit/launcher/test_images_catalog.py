"""02-compute/images.yaml on a matrix of fixture hosts: detection (fake sysfs + NVML) →
the image each service runs. The expectations are the upstream facts the file cites:
CUDA 13 builds need driver ≥ 580 and compute capability ≥ 7.5; cu126 builds have no
Blackwell kernels; speaches' CUDA images refuse GeForce drivers older than their CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest
from hardware_fakes import GIB, FakeCard, FakeDocker, FakeHost, FakeNvml

from airig.launcher.hardware import detect
from airig.launcher.hardware.choice import profile_gpus
from airig.launcher.images import ImageSelection, choose_images, load_catalog

ROOT = Path(__file__).resolve().parents[3]
NVIDIA, AMD = 0x10DE, 0x1002
CATALOG = load_catalog(ROOT)


def card(name: str, bus: int, capability: tuple[int, int]) -> FakeCard:
    return FakeCard(name, f"00000000:{bus:02X}:00.0", 8 * GIB, 7 * GIB, capability)


PASCAL = ("NVIDIA GeForce GTX 1060 6GB", (6, 1))
TURING = ("NVIDIA GeForce RTX 2080", (7, 5))
AMPERE = ("NVIDIA GeForce RTX 3060", (8, 6))
HOPPER = ("NVIDIA H100 PCIe", (9, 0))
BLACKWELL = ("NVIDIA GeForce RTX 5090", (12, 0))


def nvidia_host(
    tmp_path: Path, driver: str, *models: tuple[str, tuple[int, int]]
) -> ImageSelection:
    host = FakeHost(tmp_path)
    cards = []
    for position, (name, capability) in enumerate(models):
        bus = position + 1
        host.pci(f"0000:{bus:02x}:00.0", NVIDIA, 0x1C03, driver="nvidia")
        cards.append(card(name, bus, capability))
    report = detect(host.sys, host.dev, FakeNvml(cards, driver=driver), None, FakeDocker())
    return choose_images(CATALOG, "gpu-nvidia", profile_gpus(report, "gpu-nvidia"), {})


def amd_host(tmp_path: Path, gfx_version: int, override: str = "") -> ImageSelection:
    host = FakeHost(tmp_path)
    host.pci("0000:03:00.0", AMD, 0x744C, driver="amdgpu", vram=24 * GIB, vram_used=GIB)
    host.kfd_node(0, cpu_cores_count=16, simd_count=0)
    host.kfd_node(1, cpu_cores_count=0, simd_count=192, gfx_target_version=gfx_version,
                  location_id=3 << 8, domain=0, drm_render_minor=128)  # fmt: skip
    host.amd_nodes()
    report = detect(host.sys, host.dev, None, None, FakeDocker())
    return choose_images(CATALOG, "gpu-amd", profile_gpus(report, "gpu-amd"), {}, override)


def summary(selection: ImageSelection) -> dict[str, str]:
    return {c.service: f"{c.image} {'gpu' if c.on_gpu else 'cpu'}" for c in selection.choices}


def test_the_seed_rig_pascal_on_535(tmp_path):
    chosen = nvidia_host(tmp_path, "535.183.01", *[PASCAL] * 5)
    assert summary(chosen) == {
        "ollama": "ollama/ollama:0.20.6 gpu",  # its CUDA 12 runner: 5.0+, driver ≥ 531
        "comfyui": "yanwk/comfyui-boot:cu126-slim gpu",  # the only build with sm_60 kernels
        "whisper": "ghcr.io/speaches-ai/speaches:0.8.3-cpu cpu",  # every CUDA tag needs ≥ 550
    }
    warning = chosen.of("whisper").warning
    assert "GTX 1060" in warning and "6.1" in warning and "535.183.01" in warning
    assert "upgrade the NVIDIA driver to ≥ 550.54.14" in warning
    assert chosen.of("comfyui").warning is None


@pytest.mark.parametrize(
    ("driver", "model", "comfyui", "whisper"),
    [
        ("550.144.03", TURING, "cu128-slim", "0.8.3-cuda-12.4.1"),
        ("550.144.03", AMPERE, "cu128-slim", "0.8.3-cuda-12.4.1"),
        ("570.124.06", AMPERE, "cu128-slim", "0.8.3-cuda-12.6.3"),
        ("580.95.05", HOPPER, "cu130-slim-v2", "0.8.3-cuda"),
        ("570.124.06", BLACKWELL, "cu128-slim", "0.8.3-cuda-12.6.3"),
        ("580.95.05", BLACKWELL, "cu130-slim-v2", "0.8.3-cuda"),
    ],
)
def test_each_generation_gets_the_newest_build_it_can_run(
    tmp_path, driver, model, comfyui, whisper
):
    chosen = nvidia_host(tmp_path, driver, model)
    assert chosen.of("comfyui").image == f"yanwk/comfyui-boot:{comfyui}"
    assert chosen.of("whisper").image == f"ghcr.io/speaches-ai/speaches:{whisper}"
    assert all(c.on_gpu and c.warning is None for c in chosen.choices)


def test_blackwell_never_gets_a_build_without_its_kernels(tmp_path):
    for driver in ("570.124.06", "580.95.05"):
        image = nvidia_host(tmp_path / driver, driver, BLACKWELL).of("comfyui").image
        assert "cu126" not in image


def test_a_mixed_rig_has_no_one_comfyui_build_and_says_which_cards(tmp_path):
    chosen = nvidia_host(tmp_path, "580.95.05", PASCAL, BLACKWELL)
    comfy = chosen.of("comfyui")
    assert (comfy.image, comfy.on_gpu) == ("yanwk/comfyui-boot:cpu", False)
    assert "GTX 1060" in comfy.warning and "RTX 5090" in comfy.warning
    assert chosen.of("ollama").on_gpu  # the rest of the kit still uses both GPUs
    assert chosen.of("whisper").on_gpu  # PTX 8.6 covers Blackwell, sm_60/61 the 1060


def test_pascal_plus_ampere_share_the_cu126_build(tmp_path):
    chosen = nvidia_host(tmp_path, "550.144.03", PASCAL, AMPERE)
    assert chosen.of("comfyui").image == "yanwk/comfyui-boot:cu126-slim"


def test_rdna3_gfx1100_runs_rocm7_everywhere_it_can(tmp_path):
    chosen = amd_host(tmp_path, 110000)
    assert summary(chosen) == {
        "ollama": "ollama/ollama:0.20.6-rocm gpu",
        "comfyui": "yanwk/comfyui-boot:rocm7 gpu",
        "whisper": "ghcr.io/speaches-ai/speaches:0.8.3-cpu cpu",
    }
    assert all(c.warning is None for c in chosen.choices)  # whisper on CPU is by design


def test_a_card_rocm7_dropped_keeps_what_still_supports_it(tmp_path):
    """gfx906 (Radeon VII, MI50): not in ROCm 7's Ollama or rocm7 ComfyUI lists; PyTorch's
    own ROCm 7.2 wheel still carries it."""
    chosen = amd_host(tmp_path, 90006)
    assert chosen.of("comfyui").image == "yanwk/comfyui-boot:rocm"
    ollama = chosen.of("ollama")
    assert (ollama.image, ollama.on_gpu) == ("ollama/ollama:0.20.6", False)
    assert "gfx906" in ollama.warning


def test_a_card_no_rocm_build_carries_runs_on_cpu_with_the_override_hint(tmp_path):
    chosen = amd_host(tmp_path, 80003)  # gfx803, Polaris (RX 580)
    assert [c.on_gpu for c in chosen.choices] == [False, False, False]
    assert "gfx803" in chosen.of("comfyui").warning
    assert "HSA_OVERRIDE_GFX_VERSION" in chosen.of("comfyui").warning


def test_rdna2_consumer_cards_fit_through_the_override(tmp_path):
    without = amd_host(tmp_path / "a", 100301)  # gfx1031, RX 6700 XT
    assert not without.of("comfyui").on_gpu
    overridden = amd_host(tmp_path / "b", 100301, override="10.3.0")
    assert overridden.of("comfyui").image == "yanwk/comfyui-boot:rocm7"
    assert overridden.of("ollama").image == "ollama/ollama:0.20.6-rocm"


def test_every_entry_cites_its_source():
    entries = [v for variants in CATALOG.gpu.values() for v in variants]
    entries += list(CATALOG.cpu.values())
    assert entries and all(len(v.source) > 40 for v in entries)
