"""The profile decision as a user sees it: which profile, why, and the one fix offered, or
the error a forced profile that cannot work raises.

Written against the mutants that survived ``benchmarks/mutation/run.sh`` in
``airig/launcher/hardware/decide.py``. The reports are built from their parts (facts
only), so each test states exactly the host it describes.
"""

from __future__ import annotations

import pytest

from airig.common.errors import ConfigError, HardwareError
from airig.launcher.hardware import GpuInfo, HardwareReport, ProbeResult, decide_profile
from airig.launcher.hardware.amd import AmdHost
from airig.launcher.hardware.decide import (
    DOCKER_FIX,
    NVML_FIXES,
    PROBE_TIMEOUT_FIX,
    ROCM_FIX,
    TOOLKIT_FIX,
    validate_profile,
)
from airig.launcher.hardware.docker_gpu import (
    NVIDIA_DRIVER_ERROR,
    PROBE_TIMED_OUT,
    DockerGpuSupport,
)
from airig.launcher.hardware.nvidia import NvmlGpu, NvmlResult

RTX = "NVIDIA GeForce RTX 3060"
GTX = "NVIDIA GeForce GTX 1060 6GB"
RX = "AMD Radeon RX 6700 XT"
IMAGE = "airig-test/base:bookworm"
DOCKER = DockerGpuSupport(reachable=True)
NO_DOCKER = DockerGpuSupport(reachable=False, error="connection refused")
AMD_NODES = AmdHost(kfd_present=True, render_nodes=("renderD128",), gids=(109,))


def nvidia(name: str = RTX, index: int | None = 0, driver: str | None = "nvidia") -> GpuInfo:
    return GpuInfo("nvidia", name, "discrete", kernel_driver=driver, index=index)


def amd(name: str = RX, kind: str = "discrete", gfx: str | None = "gfx1030") -> GpuInfo:
    return GpuInfo("amd", name, kind, kernel_driver="amdgpu", gfx_target=gfx)


def nvml(*names: str, driver: str = "550.54.14") -> NvmlResult:
    gpus = tuple(
        NvmlGpu(i, name, f"0000:0{i + 1}:00.0", None, None, "8.6", None, None, None)
        for i, name in enumerate(names)
    )
    return NvmlResult(available=True, driver_version=driver, gpus=gpus)


def probe(vendor: str, status: str, detail: str = "ok") -> dict[str, ProbeResult]:
    return {vendor: ProbeResult(vendor, status, detail, IMAGE)}


def report(*gpus: GpuInfo, **facts) -> HardwareReport:
    return HardwareReport(gpus=gpus, **facts)


def refused(host: HardwareReport, profile: str, env: bool = False) -> HardwareError:
    with pytest.raises(HardwareError) as caught:
        decide_profile(host, None if env else profile, profile if env else None)
    return caught.value


# ------------------------------------------------------------------ NVIDIA: NVML failed
@pytest.mark.parametrize(
    ("kind", "error", "fix"),
    [
        ("library-not-found", "NVML Shared Library Not Found", NVML_FIXES["library-not-found"]),
        ("driver-not-loaded", "Driver Not Loaded", NVML_FIXES["driver-not-loaded"]),
        ("version-mismatch", "RM has detected an NVML/RM version mismatch.",
         NVML_FIXES["version-mismatch"]),
        ("no-permission", "Insufficient Permissions", NVML_FIXES["no-permission"]),
        ("other", "Unknown Error", "Check that `nvidia-smi` works on the host."),
        (None, "pynvml not importable", "Check that `nvidia-smi` works on the host."),
    ],
)  # fmt: skip
def test_forcing_nvidia_while_nvml_fails_raises_with_the_matching_fix(kind, error, fix) -> None:
    host = report(
        nvidia(RTX, index=None, driver="nouveau"),
        nvidia(RTX, index=None, driver=None),
        nvml=NvmlResult(available=False, error=error, error_kind=kind),
        docker=DOCKER,
    )
    caught = refused(host, "gpu-nvidia")
    assert caught.message == (
        f"gpu-nvidia was requested by --profile, but NVIDIA GPU found (2x {RTX}) "
        f"but NVML failed: {error} (kernel driver bound: none, nouveau)"
    )
    assert caught.hint == fix
    detected = decide_profile(host)
    assert (detected.profile, detected.fix) == ("cpu", fix)
    assert "no NVIDIA, AMD or Intel GPU found" not in detected.reasons


def test_forcing_nvidia_when_nvml_lists_no_gpu_raises() -> None:
    host = report(nvidia(GTX, index=None), nvml=nvml(), docker=DOCKER)
    caught = refused(host, "gpu-nvidia", env=True)
    assert caught.message == (
        f"gpu-nvidia was requested by AIRIG_PROFILE in .env, but NVIDIA GPU found ({GTX}) "
        "but NVML lists no GPU"
    )
    assert caught.hint == NVML_FIXES["library-not-found"]


# ------------------------------------------------------------------ NVIDIA: Docker's side
def test_a_passed_probe_makes_nvidia_usable_and_names_what_works() -> None:
    host = report(
        nvidia(RTX, index=0), nvidia(RTX, index=1), nvidia(GTX, index=None, driver="vfio-pci"),
        nvml=nvml(RTX, RTX), docker=DOCKER, probes=probe("nvidia", "passed"),
        reasons=("GPU 0000:03:00.0 is bound to vfio-pci",),
    )  # fmt: skip
    decision = decide_profile(host)
    assert (decision.profile, decision.source, decision.fix) == ("gpu-nvidia", "detected", None)
    assert decision.reasons == [
        f"NVIDIA driver 550.54.14, 2 GPU(s) (2x {RTX}); Docker probe passed ({IMAGE})",
        "GPU 0000:03:00.0 is bound to vfio-pci",
    ]
    assert decision.to_dict() == {
        "profile": "gpu-nvidia", "source": "detected", "reasons": decision.reasons, "fix": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("detail", "fix"),
    [
        (f"500 Server Error: {NVIDIA_DRIVER_ERROR} with capabilities: [[gpu]]", TOOLKIT_FIX),
        (f"{PROBE_TIMED_OUT} (120 s)", PROBE_TIMEOUT_FIX),
        ("nvidia-container-cli: initialization error", "Run `docker run --rm --gpus all "
         "<image> nvidia-smi` to see the NVIDIA container toolkit's error; reboot after a "
         "driver update, or reinstall nvidia-container-toolkit."),
    ],
)  # fmt: skip
def test_a_failed_nvidia_probe_refuses_the_profile_with_its_fix(detail: str, fix: str) -> None:
    host = report(nvidia(), nvml=nvml(RTX), docker=DOCKER, probes=probe("nvidia", "failed", detail))
    caught = refused(host, "gpu-nvidia")
    assert caught.message == (
        f"gpu-nvidia was requested by --profile, but NVIDIA driver 550.54.14, 1 GPU(s) ({RTX}), "
        f"but Docker cannot start a container with it: {detail}"
    )
    assert caught.hint == fix
    assert decide_profile(host).fix == fix


def test_docker_down_leaves_nvidia_unverified_forced_allowed_detected_not() -> None:
    host = report(nvidia(), nvml=nvml(RTX), docker=NO_DOCKER)
    reason = (
        f"NVIDIA driver 550.54.14, 1 GPU(s) ({RTX}); GPU access from containers not "
        "verified: Docker not reachable"
    )
    detected = decide_profile(host)
    assert (detected.profile, detected.reasons, detected.fix) == ("cpu", [reason], DOCKER_FIX)
    forced = decide_profile(host, "gpu-nvidia")
    assert forced.reasons == ["gpu-nvidia requested by --profile", reason]
    assert (forced.profile, forced.source, forced.fix) == ("gpu-nvidia", "flag", DOCKER_FIX)


@pytest.mark.parametrize(
    "docker",
    [
        DockerGpuSupport(reachable=True, runtimes=("runc", "nvidia")),
        DockerGpuSupport(reachable=True, cdi_devices=("nvidia.com/gpu=all",)),
    ],
)
def test_an_nvidia_runtime_or_cdi_device_counts_when_no_probe_ran(docker) -> None:
    decision = decide_profile(report(nvidia(), nvml=nvml(RTX), docker=docker))
    assert decision.profile == "gpu-nvidia" and decision.fix is None
    assert decision.reasons == [
        f"NVIDIA driver 550.54.14, 1 GPU(s) ({RTX}); Docker lists the nvidia runtime/CDI "
        "devices (not probed: no probe attempted)"
    ]


def test_no_runtime_and_no_probe_leaves_nvidia_unverified_with_the_toolkit_fix() -> None:
    decision = decide_profile(report(nvidia(), nvml=nvml(RTX), docker=DOCKER))
    assert (decision.profile, decision.fix) == ("cpu", TOOLKIT_FIX)
    assert decision.reasons == [
        f"NVIDIA driver 550.54.14, 1 GPU(s) ({RTX}), but no nvidia runtime in docker info "
        "and no probe (no probe attempted)"
    ]


# ------------------------------------------------------------------ AMD
def test_forcing_amd_without_any_amd_gpu_raises() -> None:
    host = report(nvidia(), nvml=nvml(RTX), docker=DOCKER, probes=probe("nvidia", "passed"))
    caught = refused(host, "gpu-amd")
    assert caught.message == "gpu-amd was requested by --profile, but no AMD GPU was found."
    assert caught.hint == "Use --profile cpu, or leave AIRIG_PROFILE empty to detect the hardware."


def test_forcing_amd_with_the_render_nodes_missing_raises_with_the_rocm_fix() -> None:
    host = report(amd(), amd=AmdHost(kfd_present=True), docker=DOCKER)
    caught = refused(host, "gpu-amd", env=True)
    assert caught.message == (
        f"gpu-amd was requested by AIRIG_PROFILE in .env, but AMD GPU found ({RX}) but "
        "/dev/dri/renderD* is missing"
    )
    assert caught.hint == ROCM_FIX
    assert decide_profile(host).fix == ROCM_FIX


def test_amd_without_kfd_names_the_missing_driver_and_the_bound_one() -> None:
    host = report(amd(), amd=AmdHost(kfd_present=False, render_nodes=("renderD128",)))
    caught = refused(host, "gpu-amd")
    assert caught.message.endswith(
        f"AMD GPU found ({RX}) but /dev/kfd is missing: the ROCm kernel driver is not loaded "
        "(kernel driver bound: amdgpu)"
    )
    assert caught.hint == ROCM_FIX


def test_kfd_alone_counts_as_an_amd_gpu() -> None:
    decision = decide_profile(report(amd=AMD_NODES, docker=DOCKER))
    assert decision.profile == "gpu-amd"
    assert decision.reasons == [
        "AMD GPU found (via /dev/kfd), /dev/kfd and 1 render node(s), GIDs [109]; devices "
        "present (not probed: no probe attempted)"
    ]


def test_amd_devices_need_no_runtime_and_notes_come_once_per_target() -> None:
    host = report(
        amd(RX, gfx="gfx1031"), amd(RX, gfx="gfx1031"), amd("AMD Radeon RX 6800", gfx="gfx1030"),
        amd=AmdHost(kfd_present=True, render_nodes=("renderD128", "renderD129"), gids=(44, 109)),
        docker=DOCKER, probes=probe("amd", "passed"),
    )  # fmt: skip
    decision = decide_profile(host)
    assert (decision.profile, decision.fix) == ("gpu-amd", None)
    assert decision.reasons == [
        f"AMD GPU found (2x {RX}, AMD Radeon RX 6800), /dev/kfd and 2 render node(s), GIDs "
        f"[44, 109]; Docker probe passed ({IMAGE})",
        "gfx1031 needs HSA_OVERRIDE_GFX_VERSION=10.3.0 in .env",
    ]


@pytest.mark.parametrize(
    ("detail", "fix"),
    [
        ("error gathering device information while adding custom device",
         "Check that `docker run --rm --device /dev/kfd --device /dev/dri <image> true` "
         "works; " + ROCM_FIX),
        (PROBE_TIMED_OUT, PROBE_TIMEOUT_FIX),
        (NVIDIA_DRIVER_ERROR, "Check that `docker run --rm --device /dev/kfd --device "
         "/dev/dri <image> true` works; " + ROCM_FIX),
    ],
)  # fmt: skip
def test_a_failed_amd_probe_refuses_the_profile_with_its_fix(detail: str, fix: str) -> None:
    host = report(amd(), amd=AMD_NODES, docker=DOCKER, probes=probe("amd", "failed", detail))
    caught = refused(host, "gpu-amd")
    assert caught.message.endswith(f"but Docker cannot start a container with it: {detail}")
    assert caught.hint == fix


def test_docker_down_leaves_amd_unverified_with_the_docker_fix() -> None:
    decision = decide_profile(report(amd(), amd=AMD_NODES, docker=NO_DOCKER))
    assert (decision.profile, decision.fix) == ("cpu", DOCKER_FIX)


def test_an_apu_with_rocm_devices_is_not_picked_and_offers_no_fix() -> None:
    host = report(amd("AMD Radeon 780M", kind="integrated"), amd=AMD_NODES, docker=DOCKER)
    reason = (
        "AMD GPU found (AMD Radeon 780M): integrated only (APU), not picked (ROCm support is "
        "limited)"
    )
    detected = decide_profile(host)
    assert (detected.profile, detected.reasons, detected.fix) == ("cpu", [reason], None)
    forced = decide_profile(host, "gpu-amd")
    assert (forced.profile, forced.fix) == ("gpu-amd", None)
    assert forced.reasons == ["gpu-amd requested by --profile", reason]


def test_an_apu_without_rocm_devices_offers_its_fix_only_when_forced() -> None:
    host = report(amd("AMD Radeon 780M", kind="integrated"), amd=AmdHost(kfd_present=True))
    assert decide_profile(host).fix is None
    assert refused(host, "gpu-amd").hint == ROCM_FIX


def test_an_apu_next_to_a_discrete_card_does_not_hide_the_card() -> None:
    host = report(amd("AMD Radeon 780M", kind="integrated"), amd(RX), amd=AMD_NODES, docker=DOCKER)
    assert decide_profile(host).profile == "gpu-amd"


# ------------------------------------------------------------------ detection across vendors
def test_a_host_without_gpus_says_so_first_and_keeps_the_detection_notes() -> None:
    decision = decide_profile(report(reasons=("Docker: no probe image",)))
    assert (decision.profile, decision.source, decision.fix) == ("cpu", "detected", None)
    assert decision.reasons == ["no NVIDIA, AMD or Intel GPU found", "Docker: no probe image"]


def test_the_first_broken_vendor_gives_the_fix_and_every_reason_is_kept() -> None:
    host = report(
        nvidia(index=None), amd(),
        nvml=NvmlResult(available=False, error="Driver Not Loaded", error_kind="driver-not-loaded"),
        amd=AmdHost(kfd_present=False),
    )  # fmt: skip
    decision = decide_profile(host)
    assert (decision.profile, decision.fix) == ("cpu", NVML_FIXES["driver-not-loaded"])
    assert [r.split(" ")[0] for r in decision.reasons] == ["NVIDIA", "AMD"]


def test_a_broken_nvidia_next_to_a_usable_amd_picks_amd_without_a_fix() -> None:
    host = report(
        nvidia(index=None),
        amd(),
        nvml=NvmlResult(available=False, error="x", error_kind="driver-not-loaded"),
        amd=AMD_NODES,
        docker=DOCKER,
    )
    decision = decide_profile(host)
    assert (decision.profile, decision.fix) == ("gpu-amd", None)
    assert len(decision.reasons) == 2


def test_forcing_cpu_keeps_the_detection_notes() -> None:
    host = report(nvidia(), nvml=nvml(RTX), docker=DOCKER, reasons=("a note",))
    decision = decide_profile(host, "cpu")
    assert (decision.profile, decision.source, decision.fix) == ("cpu", "flag", None)
    assert decision.reasons == ["cpu requested by --profile", "a note"]


def test_a_forced_gpu_keeps_its_reasons_the_notes_and_its_fix() -> None:
    host = report(nvidia(), nvml=nvml(RTX), docker=DOCKER, reasons=("a note",))
    decision = decide_profile(host, None, "gpu-nvidia")
    assert (decision.profile, decision.source, decision.fix) == ("gpu-nvidia", "env", TOOLKIT_FIX)
    assert decision.reasons[0] == "gpu-nvidia requested by AIRIG_PROFILE in .env"
    assert decision.reasons[-1] == "a note" and len(decision.reasons) == 3


# ------------------------------------------------------------------ names
def test_an_unknown_profile_names_itself_where_it_came_from_and_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        decide_profile(report(), "  CUDA ")
    assert caught.value.message == "Unknown profile 'CUDA' from --profile."
    assert caught.value.hint == (
        "Valid profiles: cpu, gpu-nvidia, gpu-amd, gpu-intel "
        "(or leave AIRIG_PROFILE empty to detect)."
    )
    with pytest.raises(ConfigError) as caught:
        validate_profile("x", "a profile file")
    assert caught.value.message == "Unknown profile 'x' from a profile file."
    assert validate_profile(" Gpu-AMD\n", "flag") == "gpu-amd"
