"""02-compute/images.yaml on a matrix of fixture hosts: detection (fake sysfs + NVML) →
the image each service runs. The expectations are the upstream facts the file cites:
CUDA 13 builds need driver ≥ 580 and compute capability ≥ 7.5; cu126 builds have no
Blackwell kernels; an archived tag (cu128-slim) only when no maintained one fits, and no
Volta promised on it; speaches' CUDA images refuse GeForce drivers older than their CUDA,
except the 12.4.1 one on the 525 and 535 branches, and run float16 on compute capability
12.x (CTranslate2 4.5.0's int8 fails in cuBLAS there) and int8 on 6.1 (float16 runs as
float32 there); Ollama's version follows the driver (0.32.15 needs 550+, 570+ for CC
5.0-6.2; below that 0.24.0, floor 531; never 0.30.0-0.31.1) and its CUDA 12 runner carries
PTX; ComfyUI on AMD in yanwk's order (rocm, rocm7; rocm6 for RDNA2), Vega on none."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hardware_fakes import GIB, FakeCard, FakeDocker, FakeHost, FakeNvml

from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware import detect
from airig.launcher.hardware.choice import profile_gpus
from airig.launcher.images import ImageSelection, choose_images, load_catalog, misfit

ROOT = Path(__file__).resolve().parents[3]
NVIDIA, AMD = 0x10DE, 0x1002
CATALOG = load_catalog(ROOT)
VULKAN_OLLAMA = "airig/ollama-vulkan:0.20.6"  # built on ollama/ollama:0.20.6 with Mesa


def card(name: str, bus: int, capability: tuple[int, int]) -> FakeCard:
    return FakeCard(name, f"00000000:{bus:02X}:00.0", 8 * GIB, 7 * GIB, capability)


PASCAL = ("NVIDIA GeForce GTX 1060 6GB", (6, 1))
VOLTA = ("Tesla V100-PCIE-16GB", (7, 0))
TURING = ("NVIDIA GeForce RTX 2080", (7, 5))
TURING_2060 = ("NVIDIA GeForce RTX 2060", (7, 5))
AMPERE = ("NVIDIA GeForce RTX 3060", (8, 6))
HOPPER = ("NVIDIA H100 PCIe", (9, 0))
BLACKWELL = ("NVIDIA GeForce RTX 5090", (12, 0))
B200 = ("NVIDIA B200", (10, 0))


def nvidia_host(
    tmp_path: Path, driver: str, *models: tuple[str, tuple[int, int]]
) -> ImageSelection:
    gpus = nvidia_gpus(tmp_path, driver, *models)
    return choose_images(CATALOG, "gpu-nvidia", gpus, {})


def nvidia_gpus(tmp_path: Path, driver: str, *models: tuple[str, tuple[int, int]]) -> list[GpuInfo]:
    host = FakeHost(tmp_path)
    cards = []
    for position, (name, capability) in enumerate(models):
        bus = position + 1
        host.pci(f"0000:{bus:02x}:00.0", NVIDIA, 0x1C03, driver="nvidia")
        cards.append(card(name, bus, capability))
    report = detect(host.sys, host.dev, FakeNvml(cards, driver=driver), None, FakeDocker())
    return profile_gpus(report, "gpu-nvidia")


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
        "ollama": "ollama/ollama:0.24.0 gpu",  # its CUDA 12 runner: 5.0+, driver ≥ 531
        "comfyui": "yanwk/comfyui-boot:cu126-slim gpu",  # the only build with sm_60 kernels
        # the 12.4.1 base's NVIDIA_REQUIRE_CUDA accepts GeForce on the 535 branch
        "whisper": "ghcr.io/speaches-ai/speaches:0.8.3-cuda-12.4.1 gpu",
    }
    assert all(c.warning is None for c in chosen.choices)


@pytest.mark.parametrize(
    ("driver", "whisper"),
    [
        ("525.60.13", "0.8.3-cuda-12.4.1 gpu"),  # the 525 branch, from 12.x's floor
        ("525.147.05", "0.8.3-cuda-12.4.1 gpu"),
        ("535.54.03", "0.8.3-cuda-12.4.1 gpu"),
        ("530.41.03", "0.8.3-cpu cpu"),  # between the branches: the runtime refuses it
        ("545.29.06", "0.8.3-cpu cpu"),
        ("550.54.14", "0.8.3-cuda-12.4.1 gpu"),
        ("560.35.03", "0.8.3-cuda-12.6.3 gpu"),
    ],
)
def test_whisper_on_pascal_follows_the_12_4_1_bases_driver_branches(tmp_path, driver, whisper):
    chosen = nvidia_host(tmp_path, driver, PASCAL)
    assert summary(chosen)["whisper"] == f"ghcr.io/speaches-ai/speaches:{whisper}"
    warning = chosen.of("whisper").warning
    if "cpu" in whisper:
        assert driver in warning and "upgrade the NVIDIA driver to ≥ 550.54.14" in warning
    else:
        assert warning is None


def test_a_gpu_past_ollamas_cuda_12_sass_runs_its_ptx(tmp_path):
    """A B200 (10.0): 0.32.15's CUDA 12 runner has sm_100 SASS; 0.24.0's has none, but its
    arch list has no -real suffix, so compute_90's PTX is JITed there."""
    (b200,) = nvidia_gpus(tmp_path, "570.124.06", B200)
    ollama = choose_images(CATALOG, "gpu-nvidia", [b200], {}).of("ollama")
    assert (ollama.image, ollama.on_gpu, ollama.warning) == ("ollama/ollama:0.32.15", True, None)
    pre_030 = CATALOG.known("ollama", "ollama/ollama:0.24.0")
    assert pre_030 is not None and "10.0" not in pre_030.archs and misfit(pre_030, b200) is None


@pytest.mark.parametrize(
    ("driver", "model", "comfyui", "whisper"),
    [
        # cu128-slim fits these too, but upstream archived it: the maintained cu126-slim
        ("550.144.03", TURING, "cu126-slim", "0.8.3-cuda-12.4.1"),
        ("550.144.03", AMPERE, "cu126-slim", "0.8.3-cuda-12.4.1"),
        ("570.124.06", AMPERE, "cu126-slim", "0.8.3-cuda-12.6.3"),
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


def test_the_archived_tag_only_where_no_maintained_one_fits_and_never_for_volta(tmp_path):
    blackwell = nvidia_host(tmp_path / "b", "570.124.06", BLACKWELL).of("comfyui")
    assert blackwell.image == "yanwk/comfyui-boot:cu128-slim"
    assert "archived upstream" in blackwell.why  # detect says the tag is frozen
    cu128 = CATALOG.known("comfyui", "yanwk/comfyui-boot:cu128-slim")
    assert cu128 is not None and cu128.archived and "7.0" not in cu128.archs
    # a V100 on 570: the maintained cu126-slim (sm_70 kernels), not the frozen cu128-slim
    volta = nvidia_host(tmp_path / "v", "570.124.06", VOLTA).of("comfyui")
    assert (volta.image, volta.on_gpu) == ("yanwk/comfyui-boot:cu126-slim", True)
    assert "archived" not in volta.why


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


@pytest.mark.parametrize(
    ("driver", "model", "ollama"),
    [
        # since 0.30.0 the CUDA 12 runner's compressed fatbins need 550 on every card (#16895)
        ("535.183.01", AMPERE, "0.24.0"),  # RTX 3060 on 535
        ("545.29.06", TURING_2060, "0.24.0"),  # RTX 2060 on 545
        ("550.54.14", AMPERE, "0.32.15"),  # RTX 3060 on 550+: the newest, past 0.31.2
        ("580.95.05", AMPERE, "0.32.15"),
        ("535.183.01", PASCAL, "0.24.0"),  # the seed rig (GTX 1060) keeps its GPUs
        ("560.35.03", PASCAL, "0.24.0"),  # CC 5.0-6.2 need 570 past 0.24.0
        ("570.124.06", PASCAL, "0.32.15"),  # native sm_61 + flash attention (dba1e27f)
        ("535.183.01", VOLTA, "0.24.0"),  # V100 on 535: #16449 (0.30.0), #16533 (0.30.5)
        ("570.124.06", BLACKWELL, "0.32.15"),
        ("580.95.05", BLACKWELL, "0.32.15"),
    ],
)
def test_ollamas_version_follows_the_driver(tmp_path, driver, model, ollama):
    chosen = nvidia_host(tmp_path, driver, model).of("ollama")
    assert (chosen.image, chosen.on_gpu, chosen.warning) == (f"ollama/ollama:{ollama}", True, None)


def test_no_ollama_entry_between_0_30_0_and_0_31_1_and_every_0_3x_needs_550():
    """0.30.0-0.31.1: PTX-only Pascal with flash attention off (#16754); from 0.30.0 on, every
    CUDA 12 runner needs driver 550 (fatbin compression), Maxwell/Pascal 570."""
    entries = CATALOG.gpu[("ollama", "nvidia")]
    versions = [tuple(int(n) for n in e.image.rsplit(":", 1)[1].split(".")) for e in entries]
    assert not [v for v in versions if (0, 30, 0) <= v < (0, 31, 2)]
    for entry, version in zip(entries, versions, strict=True):
        if version >= (0, 30, 0):
            floor = "550" if entry.min_capability == "7.0" else "570"
            assert entry.min_driver == floor, entry.image


def test_a_0_32_pin_on_the_seed_rig_is_refused_with_the_driver_it_needs(tmp_path):
    gpus = nvidia_gpus(tmp_path, "535.183.01", PASCAL)
    pinned = choose_images(CATALOG, "gpu-nvidia", gpus, {"OLLAMA_IMAGE": "ollama/ollama:0.32.15"})
    refusal = pinned.of("ollama").refusal
    assert refusal is not None and "ollama/ollama:0.32.15 cannot run" in refusal.message
    assert "535.183.01" in refusal.message and "needs driver ≥ 550" in refusal.message
    # the CPU/Vulkan tag pinned on the same rig runs (its CUDA 12 runner: 531, sm_61)
    older = choose_images(CATALOG, "gpu-nvidia", gpus, {"OLLAMA_IMAGE": "ollama/ollama:0.20.6"})
    assert older.of("ollama").refusal is None and older.of("ollama").on_gpu


@pytest.mark.parametrize(
    ("driver", "model", "compute_type"),
    [
        ("570.124.06", BLACKWELL, "float16"),  # 12.6.3 image, CTranslate2 4.5.0
        ("580.95.05", BLACKWELL, "float16"),  # 0.8.3-cuda, the same CTranslate2
        ("580.95.05", HOPPER, None),  # int8 works there: the model's own type
        ("550.144.03", AMPERE, None),
        ("535.183.01", PASCAL, "int8"),  # float16 would run as float32 on CC 6.1
        ("570.124.06", PASCAL, "int8"),
        ("570.124.06", ("Tesla P100-PCIE-16GB", (6, 0)), None),  # no int8 on 6.0
    ],
)
def test_whisper_compute_type_follows_ctranslate2s_table(tmp_path, driver, model, compute_type):
    """CTranslate2 4.5.0: int8 fails in cuBLAS on CC 12.x (OpenNMT/CTranslate2#1865, fixed in
    4.7.0); on CC 6.1 float16 runs as float32 and int8 as int8_float32 (docs/quantization.md)."""
    selection = nvidia_host(tmp_path, driver, model)
    whisper = selection.of("whisper")
    assert whisper.on_gpu
    assert whisper.env.get("WHISPER_COMPUTE_TYPE") == compute_type
    assert selection.service_env.get("WHISPER_COMPUTE_TYPE") == compute_type
    assert ("compute type float16" in whisper.why) == (compute_type == "float16")
    assert ("compute type int8" in whisper.why) == (compute_type == "int8")


def test_a_mixed_rig_with_blackwell_runs_whisper_float16_on_every_card(tmp_path):
    whisper = nvidia_host(tmp_path, "580.95.05", AMPERE, BLACKWELL).of("whisper")
    assert whisper.env == {"WHISPER_COMPUTE_TYPE": "float16"}
    # Pascal and Blackwell together: float16 (int8 can fail on 12.x; float16 only costs memory)
    mixed = nvidia_host(tmp_path / "pb", "580.95.05", PASCAL, BLACKWELL).of("whisper")
    assert mixed.env == {"WHISPER_COMPUTE_TYPE": "float16"}


def test_whisper_on_a_geforce_on_535_is_the_12_4_1_image_and_its_proof_decides(tmp_path):
    """GTX 1060 on 535: the runtime's NVIDIA_REQUIRE_CUDA takes GeForce on the 535 branch, but
    the image's cuda-compat-12-4 (550) is forward compatibility, data-center GPUs only: the
    kit's runtime proof decides, and the catalogue says so."""
    whisper = nvidia_host(tmp_path, "535.183.01", PASCAL).of("whisper")
    image = "ghcr.io/speaches-ai/speaches:0.8.3-cuda-12.4.1"
    assert (whisper.image, whisper.on_gpu, whisper.warning) == (image, True, None)
    raw = yaml.safe_load((ROOT / "02-compute" / "images.yaml").read_text())
    (entry,) = [e for e in raw["whisper"]["nvidia"] if e["image"] == image]
    assert "proof" in entry["notes"] and "error 804" in entry["notes"]
    assert "cuda-compat-12-4" in entry["source"]


def test_pascal_plus_ampere_share_the_cu126_build(tmp_path):
    chosen = nvidia_host(tmp_path, "550.144.03", PASCAL, AMPERE)
    assert chosen.of("comfyui").image == "yanwk/comfyui-boot:cu126-slim"


def test_rdna3_gfx1100_runs_rocm_everywhere_it_can(tmp_path):
    chosen = amd_host(tmp_path, 110000)
    assert summary(chosen) == {
        "ollama": "ollama/ollama:0.20.6-rocm gpu",
        "comfyui": "yanwk/comfyui-boot:rocm gpu",  # yanwk: "use the rocm image first"
        "whisper": "ghcr.io/speaches-ai/speaches:0.8.3-cpu cpu",
    }
    assert all(c.warning is None for c in chosen.choices)  # whisper on CPU is by design


@pytest.mark.parametrize(("gfx_version", "gfx"), [(90000, "gfx900"), (90006, "gfx906")])
def test_vega_is_never_sent_to_a_rocm_build_without_its_rocblas(tmp_path, gfx_version, gfx):
    """gfx900 (Vega 56/64), gfx906 (Radeon VII, MI50): PyTorch's ROCm 7.2 wheel lists them,
    but its rocBLAS has no kernels for them (pytorch#179865); rocm7, rocm6 and Ollama's
    ROCm 7 build lack them too: ComfyUI on CPU, with the line that says so; Ollama on its
    Vulkan runner (RADV drives Vega), saying why ROCm did not fit."""
    chosen = amd_host(tmp_path, gfx_version)
    comfy, ollama = chosen.of("comfyui"), chosen.of("ollama")
    assert (comfy.image, comfy.on_gpu) == ("yanwk/comfyui-boot:cpu", False)
    assert gfx in comfy.warning
    assert (ollama.image, ollama.on_gpu, ollama.backend) == (VULKAN_OLLAMA, True, "vulkan")
    assert gfx in ollama.why and "no ROCm image in" in ollama.why and ollama.warning is None


@pytest.mark.parametrize(
    ("gfx_version", "override", "comfyui"),
    [
        (100300, "", "rocm6"),  # gfx1030 (RX 6800/6900, PRO W6800): RDNA2 → rocm6
        (100301, "10.3.0", "rocm6"),  # gfx1031 (RX 6700 XT) running as gfx1030
        (110001, "", "rocm"),  # RDNA3: ROCm 7, rocm first
        (110501, "", "rocm"),  # RDNA3.5 (Ryzen AI Max) needs ROCm 7
        (120001, "", "rocm"),  # RDNA4 needs ROCm 7
    ],
)
def test_comfyui_on_amd_follows_yanwks_version_choice(tmp_path, gfx_version, override, comfyui):
    chosen = amd_host(tmp_path, gfx_version, override)
    comfy = chosen.of("comfyui")
    assert (comfy.image, comfy.on_gpu, comfy.warning) == (
        f"yanwk/comfyui-boot:{comfyui}",
        True,
        None,
    )
    if comfyui == "rocm6":
        assert "upstream advises it for gfx1030" in comfy.why


def test_a_card_no_rocm_build_carries_runs_ollama_on_vulkan_and_the_rest_on_cpu(tmp_path):
    chosen = amd_host(tmp_path, 80003)  # gfx803, Polaris (RX 580)
    assert [(c.on_gpu, c.backend) for c in chosen.choices] == [
        (True, "vulkan"),
        (False, "cpu"),
        (False, "cpu"),
    ]
    assert chosen.of("ollama").variable == "OLLAMA_IMAGE_VULKAN"
    assert "gfx803" in chosen.of("comfyui").warning
    assert "HSA_OVERRIDE_GFX_VERSION" in chosen.of("comfyui").warning


def test_rdna2_consumer_cards_fit_through_the_override(tmp_path):
    without = amd_host(tmp_path / "a", 100301)  # gfx1031, RX 6700 XT
    assert not without.of("comfyui").on_gpu
    assert (without.of("ollama").image, without.of("ollama").backend) == (VULKAN_OLLAMA, "vulkan")
    overridden = amd_host(tmp_path / "b", 100301, override="10.3.0")
    assert overridden.of("comfyui").image == "yanwk/comfyui-boot:rocm6"  # yanwk's RDNA2 advice
    assert overridden.of("ollama").image == "ollama/ollama:0.20.6-rocm"
    assert overridden.of("ollama").backend == "rocm"


@pytest.mark.parametrize(
    ("service", "wanted", "gfx_version", "refused", "backend"),
    [
        ("ollama", "vulkan", 110000, False, "vulkan"),  # RDNA3 fits ROCm; forced to Vulkan
        ("ollama", "rocm", 80003, True, "cpu"),  # no ROCm build carries gfx803: ✘
        ("ollama", "cuda", 110000, True, "cpu"),  # no NVIDIA GPU here: ✘
        ("comfyui", "vulkan", 110000, True, "cpu"),  # ComfyUI has no Vulkan image: ✘
        ("whisper", "cpu", 110000, False, "cpu"),
        ("comfyui", "cpu", 110000, False, "cpu"),  # a GPU it could use, left on request
        ("comfyui", "rocm", 110000, False, "rocm"),
    ],
)
def test_a_backend_forced_in_env_is_taken_or_refused(
    tmp_path, service, wanted, gfx_version, refused, backend
):
    host = FakeHost(tmp_path)
    host.pci("0000:03:00.0", AMD, 0x744C, driver="amdgpu", vram=24 * GIB, vram_used=GIB)
    host.kfd_node(0, cpu_cores_count=16, simd_count=0)
    host.kfd_node(1, cpu_cores_count=0, simd_count=192, gfx_target_version=gfx_version,
                  location_id=3 << 8, domain=0, drm_render_minor=128)  # fmt: skip
    host.amd_nodes()
    gpus = profile_gpus(detect(host.sys, host.dev, None, None, FakeDocker()), "gpu-amd")
    chosen = choose_images(CATALOG, "gpu-amd", gpus, {}, backends={service: wanted}).of(service)
    assert chosen.backend == backend
    assert (chosen.refusal is not None) == refused
    knob = f"{service.upper()}_BACKEND={wanted} in .env"
    if refused:
        assert chosen.refusal.message.startswith(knob) and not chosen.on_gpu
    else:
        assert knob in chosen.why


def test_every_entry_cites_its_source():
    entries = [v for variants in CATALOG.gpu.values() for v in variants]
    entries += list(CATALOG.cpu.values())
    assert entries and all(len(v.source) > 40 for v in entries)
