"""Profile precedence (flag > .env > detected) and forced profiles that cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest
from hardware_fakes import (
    GIB,
    NVIDIA_ENGINE_ERROR,
    FakeDocker,
    FakeHost,
    FakeNvml,
    gtx1060,
)

from airig.common.errors import ConfigError, HardwareError
from airig.launcher.hardware import HardwareReport, decide_profile, detect
from airig.launcher.hardware.decide import ROCM_FIX, TOOLKIT_FIX


def report_for(
    tmp_path: Path,
    *,
    nvidia: str | None = None,
    amd: str | None = None,
    images: tuple[str, ...] | None = None,
) -> HardwareReport:
    """nvidia: ok | no-toolkit; amd: ok | no-kfd | apu."""
    host = FakeHost(tmp_path)
    cards = []
    if nvidia:
        host.pci("0000:01:00.0", 0x10DE, 0x1C03, driver="nvidia")
        cards = [gtx1060(1)]
    if amd:
        vram = 512 * 1024**2 if amd == "apu" else 16 * GIB
        host.pci("0000:03:00.0", 0x1002, 0x73BF, driver="amdgpu", vram=vram)
        if amd != "no-kfd":
            host.amd_nodes()
    docker = FakeDocker(run_error=NVIDIA_ENGINE_ERROR if nvidia == "no-toolkit" else None)
    if images is not None:
        docker = FakeDocker(images=images)
    return detect(
        host.sys,
        host.dev,
        nvml=FakeNvml(cards),
        amdsmi=None,
        docker_client=docker,
        probe_image="airig-test/base:bookworm",
        pci_ids=None,  # cards named by PCI id, whatever database this machine has
    )


def test_detected_when_neither_flag_nor_env(tmp_path: Path) -> None:
    decision = decide_profile(report_for(tmp_path, nvidia="ok"), None, None)
    assert (decision.profile, decision.source) == ("gpu-nvidia", "detected")


@pytest.mark.parametrize("env_value", ["", "   "])
def test_empty_env_value_means_detect(tmp_path: Path, env_value: str) -> None:
    decision = decide_profile(report_for(tmp_path, nvidia="ok"), None, env_value)
    assert (decision.profile, decision.source) == ("gpu-nvidia", "detected")


def test_env_beats_detection(tmp_path: Path) -> None:
    decision = decide_profile(report_for(tmp_path, nvidia="ok"), None, "cpu")
    assert (decision.profile, decision.source) == ("cpu", "env")
    assert decision.reasons == ["cpu requested by AIRIG_PROFILE in .env"]


def test_flag_beats_env(tmp_path: Path) -> None:
    decision = decide_profile(report_for(tmp_path, nvidia="ok"), "cpu", "gpu-nvidia")
    assert (decision.profile, decision.source) == ("cpu", "flag")
    assert decision.reasons == ["cpu requested by --profile"]


def test_profile_names_are_normalised(tmp_path: Path) -> None:
    decision = decide_profile(report_for(tmp_path, nvidia="ok"), None, " GPU-NVIDIA ")
    assert (decision.profile, decision.source) == ("gpu-nvidia", "env")


@pytest.mark.parametrize(
    ("flag", "env", "where"), [("cuda", None, "--profile"), (None, "rocm", "AIRIG_PROFILE")]
)
def test_invalid_profile_names_list_the_valid_ones(
    tmp_path: Path, flag: str | None, env: str | None, where: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        decide_profile(report_for(tmp_path), flag, env)
    assert where in caught.value.message
    assert "cpu, gpu-nvidia, gpu-amd" in caught.value.hint


def test_forced_nvidia_without_toolkit_raises_with_the_fix(tmp_path: Path) -> None:
    report = report_for(tmp_path, nvidia="no-toolkit")
    with pytest.raises(HardwareError) as caught:
        decide_profile(report, "gpu-nvidia", None)
    assert caught.value.message.startswith("gpu-nvidia was requested by --profile, but NVIDIA")
    assert NVIDIA_ENGINE_ERROR in caught.value.message
    assert caught.value.hint == TOOLKIT_FIX


def test_forced_nvidia_by_env_on_a_cpu_host_raises(tmp_path: Path) -> None:
    with pytest.raises(HardwareError) as caught:
        decide_profile(report_for(tmp_path), None, "gpu-nvidia")
    assert caught.value.message == (
        "gpu-nvidia was requested by AIRIG_PROFILE in .env, but no NVIDIA GPU was found."
    )
    assert "--profile cpu" in caught.value.hint


def test_forced_amd_without_kfd_raises_with_the_rocm_fix(tmp_path: Path) -> None:
    with pytest.raises(HardwareError) as caught:
        decide_profile(report_for(tmp_path, amd="no-kfd"), "gpu-amd", None)
    assert "/dev/kfd is missing" in caught.value.message
    assert caught.value.hint == ROCM_FIX


def test_forced_nvidia_that_is_only_unverified_is_allowed(tmp_path: Path) -> None:
    decision = decide_profile(report_for(tmp_path, nvidia="ok", images=()), "gpu-nvidia", None)
    assert (decision.profile, decision.source, decision.fix) == ("gpu-nvidia", "flag", TOOLKIT_FIX)
    assert decision.reasons[0] == "gpu-nvidia requested by --profile"


def test_forced_amd_on_an_apu_with_kfd_is_allowed(tmp_path: Path) -> None:
    report = report_for(tmp_path, amd="apu")
    assert decide_profile(report, None, None).profile == "cpu"
    assert decide_profile(report, "gpu-amd", None).profile == "gpu-amd"


def test_nvidia_wins_over_a_usable_amd_dgpu(tmp_path: Path) -> None:
    decision = decide_profile(report_for(tmp_path, nvidia="ok", amd="ok"), None, None)
    assert decision.profile == "gpu-nvidia"
    assert decision.reasons[1].startswith("AMD GPU found (AMD GPU 0x73bf), /dev/kfd")


def test_amd_is_picked_when_nvidia_is_broken(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.pci("0000:01:00.0", 0x10DE, 0x1C03, driver="nouveau")
    host.pci("0000:03:00.0", 0x1002, 0x73BF, driver="amdgpu", vram=16 * GIB).amd_nodes()
    report = detect(
        host.sys,
        host.dev,
        nvml=FakeNvml(init_error=12),
        amdsmi=None,
        docker_client=FakeDocker(),
        probe_image="airig-test/base:bookworm",
    )
    decision = decide_profile(report, None, None)
    assert (decision.profile, decision.fix) == ("gpu-amd", None)
    assert "NVML failed: NVML Shared Library Not Found" in decision.reasons[0]


def test_forced_amd_on_an_apu_without_kfd_raises_with_the_rocm_fix(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.pci("0000:c1:00.0", 0x1002, 0x15BF, driver="amdgpu", vram=512 * 1024**2)
    report = detect(host.sys, host.dev, nvml=None, amdsmi=None, docker_client=None)
    with pytest.raises(HardwareError) as caught:
        decide_profile(report, "gpu-amd", None)
    assert caught.value.hint == ROCM_FIX
