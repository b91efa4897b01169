"""The image-choice rules on a small catalogue written here: newest fit wins, a pin wins
(refused when it cannot run), no fit means the CPU image and one warning line."""

from __future__ import annotations

import pytest

from airig.launcher.gpu_info import GpuInfo
from airig.launcher.images import (
    capability_fits,
    choose_images,
    driver_fits,
    gfx_of_override,
    misfit,
    parse_catalog,
    version_tuple,
)

CATALOG_DATA: dict = {
    "comfyui": {
        "nvidia": [
            {"image": "c:new", "min_driver": "580.65.06", "archs": ["7.5", "8.0", "12.0"]},
            {"image": "c:mid", "min_driver": "525.60.13", "archs": ["7.5", "8.0", "12.0"]},
            {"image": "c:old", "min_driver": "525.60.13", "archs": ["5.0", "6.0", "8.0"]},
        ],
        "amd": [
            {"image": "c:rocm7", "gfx": ["gfx1100", "gfx1030"]},
            {"image": "c:rocm6", "gfx": ["gfx906", "gfx1030"]},
        ],
        "cpu": {"image": "c:cpu", "args": "--cpu"},
    },
    "ollama": {
        "nvidia": [
            {"image": "o:1", "min_driver": "531", "archs": ["5.0", "6.0", "7.0"], "ptx": "7.0"}
        ],  # fmt: skip
        "amd": [{"image": "o:1-rocm", "gfx": ["gfx1100", "gfx1030"]}],
        "cpu": {"image": "o:1"},
    },
    "whisper": {
        "nvidia": [
            {"image": "w:cuda", "min_driver": "560.28.03", "archs": ["5.0"], "ptx": "5.0"}
        ],  # fmt: skip
        "amd": [],
        "cpu": {"image": "w:cpu"},
    },
}
CATALOG = parse_catalog(CATALOG_DATA)


def nvidia(cc: str, driver: str, index: int = 0, name: str = "GPU") -> GpuInfo:
    return GpuInfo("nvidia", name, "discrete", index=index, compute_capability=cc,
                   driver_version=driver)  # fmt: skip


def amd(gfx: str) -> GpuInfo:
    return GpuInfo("amd", "Radeon", "discrete", gfx_target=gfx, render_node="renderD128")


def test_versions_compare_as_numbers():
    assert version_tuple("535.183.01") < version_tuple("580.65.06")
    assert version_tuple("1000.1") > version_tuple("999.99.99")
    assert version_tuple("570.86.10-beta") == (570, 86, 10)


@pytest.mark.parametrize(
    ("cc", "archs", "ptx", "fits"),
    [
        ("6.1", ("6.0",), None, True),  # same major, newer minor: the 6.0 cubin runs
        ("6.0", ("6.1",), None, False),  # an older minor cannot run a newer cubin
        ("8.9", ("8.6",), None, True),
        ("12.0", ("9.0",), None, False),  # no cubin across majors
        ("12.0", ("9.0",), "9.0", True),  # PTX JITs forward
        ("6.1", ("7.5",), "7.5", False),  # PTX never runs backward
        ("10.0", ("9.0", "12.0"), "5.0", True),  # every arch with PTX: the lowest is `ptx`
    ],
)
def test_capability_rules(cc, archs, ptx, fits):
    assert capability_fits(cc, archs, ptx) is fits


def test_the_newest_variant_that_fits_every_gpu_wins():
    chosen = choose_images(CATALOG, "gpu-nvidia", [nvidia("8.6", "580.95.05")], {})
    assert chosen.of("comfyui").image == "c:new"
    older_driver = choose_images(CATALOG, "gpu-nvidia", [nvidia("8.6", "570.86.10")], {})
    assert older_driver.of("comfyui").image == "c:mid"
    assert "driver" not in (older_driver.of("comfyui").warning or "")


def test_no_fit_runs_cpu_with_one_warning_naming_the_gpu_and_the_fix():
    # a card older than every build's lowest target and a driver too old for the new one
    chosen = choose_images(CATALOG, "gpu-nvidia", [nvidia("3.7", "470.1", name="Tesla K80")], {})
    comfy = chosen.of("comfyui")
    assert (comfy.image, comfy.on_gpu, comfy.args) == ("c:cpu", False, "--cpu")
    assert comfy.warning is not None and "\n" not in comfy.warning
    assert "Tesla K80" in comfy.warning and "3.7" in comfy.warning and "470.1" in comfy.warning
    assert chosen.env["COMFYUI_IMAGE_CPU"] == "c:cpu"
    assert [c.service for c in chosen.on_cpu] == ["ollama", "comfyui", "whisper"]


def test_a_driver_that_is_too_old_names_the_upgrade():
    chosen = choose_images(CATALOG, "gpu-nvidia", [nvidia("8.6", "520.1")], {})
    assert "upgrade the NVIDIA driver to ≥ 525.60.13" in chosen.of("comfyui").warning


def test_a_mixed_rig_needs_one_image_for_all_cards():
    gpus = [nvidia("6.1", "580.95.05", 0, "GTX 1060"), nvidia("12.0", "580.95.05", 1, "RTX 5090")]
    comfy = choose_images(CATALOG, "gpu-nvidia", gpus, {}).of("comfyui")
    assert not comfy.on_gpu
    assert "GTX 1060" in comfy.warning and "RTX 5090" in comfy.warning
    # a card both builds fit keeps the GPU: only the pair has no common image
    both = choose_images(CATALOG, "gpu-nvidia", [gpus[0], nvidia("8.0", "580.95.05", 1)], {})
    assert both.of("comfyui").image == "c:old"


def test_a_pin_wins_and_a_pin_that_cannot_run_is_refused_with_the_fix():
    ok = choose_images(
        CATALOG, "gpu-nvidia", [nvidia("6.1", "535.1")], {"COMFYUI_IMAGE_NVIDIA": "c:old"}
    )
    assert ok.of("comfyui").image == "c:old" and not ok.refusals
    bad = choose_images(
        CATALOG, "gpu-nvidia", [nvidia("6.1", "535.1")], {"COMFYUI_IMAGE_NVIDIA": "c:new"}
    )
    (refusal,) = bad.refusals
    assert "COMFYUI_IMAGE_NVIDIA=c:new cannot run on GPU 0" in refusal.message
    assert "6.1" in refusal.message and "535.1" in refusal.message
    assert "empty COMFYUI_IMAGE_NVIDIA" in refusal.hint


def test_a_digest_pin_is_checked_by_its_tag_and_an_unknown_pin_is_kept_unchecked():
    digest = "c:new@sha256:" + "a" * 64
    bad = choose_images(
        CATALOG, "gpu-nvidia", [nvidia("6.1", "535.1")], {"COMFYUI_IMAGE_NVIDIA": digest}
    )
    assert bad.refusals and bad.env["COMFYUI_IMAGE_NVIDIA"] == digest
    unknown = choose_images(CATALOG, "gpu-nvidia", [nvidia("6.1", "535.1")],
                            {"COMFYUI_IMAGE_NVIDIA": "me/comfy:own"})  # fmt: skip
    choice = unknown.of("comfyui")
    assert choice.image == "me/comfy:own" and "not checked" in choice.why and not unknown.refusals


def test_amd_targets_and_the_hsa_override():
    assert gfx_of_override("10.3.0") == "gfx1030"
    assert gfx_of_override("11.0.1") == "gfx1101"
    rdna3 = choose_images(CATALOG, "gpu-amd", [amd("gfx1100")], {})
    assert rdna3.of("comfyui").image == "c:rocm7" and rdna3.of("ollama").image == "o:1-rocm"
    vega = choose_images(CATALOG, "gpu-amd", [amd("gfx906")], {})
    assert vega.of("comfyui").image == "c:rocm6"  # dropped by the newer build
    assert not vega.of("ollama").on_gpu and "gfx906" in vega.of("ollama").warning
    rdna2 = choose_images(CATALOG, "gpu-amd", [amd("gfx1031")], {})
    assert (
        not rdna2.of("comfyui").on_gpu and "HSA_OVERRIDE_GFX_VERSION" in rdna2.of("comfyui").warning
    )
    overridden = choose_images(CATALOG, "gpu-amd", [amd("gfx1031")], {}, hsa_override="10.3.0")
    assert overridden.of("comfyui").image == "c:rocm7"


@pytest.mark.parametrize(
    ("driver", "fits"),
    [
        ("550.54.14", True),  # min_driver
        ("535.54.03", True),  # any 535.x
        ("525.60.13", True),  # 525.x from 525.60.13
        ("525.53", False),  # 525.x below the branch's own floor
        ("530.30.02", False),  # between the branches
        ("545.29.06", False),
        ("470.256.02", False),  # a branch not listed
    ],
)
def test_older_driver_branches_an_image_also_accepts(driver, fits):
    assert driver_fits(driver, "550.54.14", ("525.60.13", "535")) is fits
    assert driver_fits(driver, None) is True


def test_a_variant_on_driver_branches_fits_them_and_says_so_when_it_does_not():
    catalog = parse_catalog(
        {
            **{k: CATALOG_DATA[k] for k in ("comfyui", "ollama")},
            "whisper": {
                "nvidia": [
                    {
                        "image": "w:12.4",
                        "min_driver": "550.54.14",
                        "archs": ["6.0"],
                        "driver_branches": ["525.60.13", "535"],
                    },
                ],  # fmt: skip
                "cpu": {"image": "w:cpu"},
            },
        }
    )
    on_535 = choose_images(catalog, "gpu-nvidia", [nvidia("6.1", "535.183.01")], {})
    assert on_535.of("whisper").image == "w:12.4" and on_535.of("whisper").on_gpu
    on_545 = choose_images(catalog, "gpu-nvidia", [nvidia("6.1", "545.29.06")], {})
    warning = on_545.of("whisper").warning
    assert "needs driver ≥ 550.54.14 or 525.x ≥ 525.60.13 or 535.x" in warning
    assert "upgrade the NVIDIA driver to ≥ 550.54.14" in warning


def test_a_tag_upstream_advises_for_a_target_goes_before_the_order():
    catalog = parse_catalog(
        {
            **{k: CATALOG_DATA[k] for k in ("ollama", "whisper")},
            "comfyui": {
                **CATALOG_DATA["comfyui"],
                "amd": [
                    {"image": "c:rocm", "gfx": ["gfx1100", "gfx1030"]},
                    {"image": "c:rocm6", "gfx": ["gfx1100", "gfx1030"], "advised_for": ["gfx1030"]},
                ],
            },
        }
    )
    rdna2 = choose_images(catalog, "gpu-amd", [amd("gfx1030")], {})
    assert (
        rdna2.of("comfyui").image == "c:rocm6"
        and "advises it for gfx1030" in rdna2.of("comfyui").why
    )
    overridden = choose_images(catalog, "gpu-amd", [amd("gfx1031")], {}, hsa_override="10.3.0")
    assert overridden.of("comfyui").image == "c:rocm6"
    rdna3 = choose_images(catalog, "gpu-amd", [amd("gfx1100")], {})
    assert rdna3.of("comfyui").image == "c:rocm"
    mixed = choose_images(catalog, "gpu-amd", [amd("gfx1030"), amd("gfx1100")], {})
    assert mixed.of("comfyui").image == "c:rocm"  # advised for one card only: the order


def test_whisper_on_amd_is_the_cpu_image_without_a_warning():
    chosen = choose_images(CATALOG, "gpu-amd", [amd("gfx1100")], {})
    whisper = chosen.of("whisper")
    assert (whisper.image, whisper.on_gpu, whisper.warning) == ("w:cpu", False, None)


def test_the_cpu_profile_runs_every_cpu_image_and_fills_every_variable():
    chosen = choose_images(CATALOG, "cpu", [], {"WHISPER_IMAGE_CPU": "mine:1"})
    assert [c.image for c in chosen.choices] == ["o:1", "c:cpu", "mine:1"]
    assert chosen.on_cpu == [] and all(c.warning is None for c in chosen.choices)
    assert chosen.env == {
        "OLLAMA_IMAGE": "o:1", "OLLAMA_IMAGE_ROCM": "o:1-rocm", "COMFYUI_IMAGE_CPU": "c:cpu",
        "OLLAMA_IMAGE_VULKAN": "o:1",  # no vulkan list here: the CPU image fills it
        "COMFYUI_IMAGE_INTEL": "c:cpu",  # nor an intel one
        "COMFYUI_IMAGE_NVIDIA": "c:new", "COMFYUI_IMAGE_AMD": "c:rocm7",
        "WHISPER_IMAGE_CPU": "mine:1", "WHISPER_IMAGE_CUDA": "w:cuda",
    }  # fmt: skip


def test_unknown_facts_are_not_held_against_an_image():
    assert misfit(CATALOG.gpu[("comfyui", "nvidia")][0], nvidia(None, None)) is None
    assert misfit(CATALOG.gpu[("comfyui", "amd")][0], amd(None)) is None


def test_vram_flags_next_to_the_cpu_variants_cpu_flag_are_refused_before_start():
    from airig.launcher.images import comfyui_flag_clash

    cpu = choose_images(CATALOG, "cpu", [], {})
    clash = comfyui_flag_clash(cpu, "--preview-method auto --lowvram")
    assert clash is not None and "--lowvram" in clash.message and "--cpu" in clash.message
    assert comfyui_flag_clash(cpu, "--preview-method auto") is None
    gpu = choose_images(CATALOG, "gpu-nvidia", [nvidia("8.6", "580.95.05")], {})
    assert comfyui_flag_clash(gpu, "--lowvram") is None  # a GPU variant takes them


def test_env_rules_apply_per_gpu_and_the_later_rule_wins_on_a_rig_with_both():
    """images.yaml relies on it: int8 on 6.1, float16 on 12.x, float16 when both are in use."""
    rules = [
        {"capabilities": ["6.1"], "env": {"WHISPER_COMPUTE_TYPE": "int8"}, "why": "int8 on 6.1"},
        {"capabilities": ["12.0"], "env": {"WHISPER_COMPUTE_TYPE": "float16"}, "why": "f16 on 12"},
    ]
    whisper = {**CATALOG_DATA["whisper"]}
    whisper["nvidia"] = [{**CATALOG_DATA["whisper"]["nvidia"][0], "env_rules": rules}]
    catalog = parse_catalog({**CATALOG_DATA, "whisper": whisper})

    def compute_type(*gpus: GpuInfo) -> str | None:
        chosen = choose_images(catalog, "gpu-nvidia", list(gpus), {}).of("whisper")
        return chosen.env.get("WHISPER_COMPUTE_TYPE")

    assert compute_type(nvidia("6.1", "570.1")) == "int8"
    assert compute_type(nvidia("6.0", "570.1")) is None  # a P100: no int8 rule
    assert compute_type(nvidia("8.6", "570.1")) is None
    assert compute_type(nvidia("12.0", "570.1")) == "float16"
    assert compute_type(nvidia("6.1", "570.1"), nvidia("12.0", "570.1", index=1)) == "float16"
