"""Detection end to end on fixture hosts: each asserts the profile, the reasons and the fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hardware_fakes import (
    GIB,
    NVIDIA_ENGINE_ERROR,
    PROBE_IMAGE,
    FakeDocker,
    FakeHost,
    FakeNvml,
    gtx1060,
    rtx3060,
)

from airig.launcher.compose.gpu_workers import amd_group_add
from airig.launcher.hardware import HardwareReport, decide_profile, detect
from airig.launcher.hardware.choice import detected_env, gpu_slots
from airig.launcher.hardware.decide import DOCKER_FIX, ROCM_FIX, TOOLKIT_FIX, ProfileDecision

NVIDIA, AMD, INTEL, ASPEED = 0x10DE, 0x1002, 0x8086, 0x1A03


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    # Every host has the usual non-display PCI functions: they must never count.
    return (
        FakeHost(tmp_path)
        .pci("0000:00:00.0", INTEL, 0x0D57, pci_class=0x060000)
        .pci("0000:00:03.0", 0x1AF4, 0x1041, pci_class=0x020000)
    )


def run(
    host: FakeHost, nvml: FakeNvml | None = None, docker: FakeDocker | None = None
) -> tuple[HardwareReport, ProfileDecision]:
    report = detect(
        sysfs_root=host.sys,
        dev_root=host.dev,
        nvml=nvml or FakeNvml(init_error=12),
        amdsmi=None,
        docker_client=docker or FakeDocker(),
        probe_image=["missing/image:1", PROBE_IMAGE],
        pci_ids=None,  # cards named by PCI id, whatever database this machine has
    )
    return report, decide_profile(report, flag=None, env_value=None)


def add_nvidia(host: FakeHost, bus: int, device: int = 0x1C03, driver: str = "nvidia") -> None:
    host.pci(f"0000:{bus:02x}:00.0", NVIDIA, device, driver=driver)
    host.pci(f"0000:{bus:02x}:00.1", NVIDIA, 0x10F1, pci_class=0x040300)  # HDMI audio


def add_amd_dgpu(host: FakeHost, bus: int = 3, gfx_version: int = 100300) -> None:
    host.pci(f"0000:{bus:02x}:00.0", AMD, 0x73BF, driver="amdgpu", vram=16 * GIB, vram_used=1 * GIB)
    host.kfd_node(0, cpu_cores_count=16, simd_count=0)
    host.kfd_node(
        1,
        cpu_cores_count=0,
        simd_count=160,
        gfx_target_version=gfx_version,
        location_id=bus << 8,
        domain=0,
        drm_render_minor=128,
    )


def test_cpu_only_host_picks_cpu_and_runs_no_probe(host: FakeHost) -> None:
    docker = FakeDocker()
    report, decision = run(host, docker=docker)
    assert report.gpus == () and report.other_display == ()
    none = ["no NVIDIA, AMD or Intel GPU found"]
    assert decision == ProfileDecision("cpu", "detected", none, None)
    assert docker.runs == []


def test_one_nvidia_gpu_is_probed_with_the_profile_device_request(host: FakeHost) -> None:
    add_nvidia(host, 1)
    docker = FakeDocker()
    report, decision = run(host, FakeNvml([gtx1060(1)]), docker)
    assert decision.profile == "gpu-nvidia" and decision.fix is None
    assert decision.reasons == [
        "NVIDIA driver 550.54.14, 1 GPU(s) (NVIDIA GeForce GTX 1060 6GB); "
        f"Docker probe passed ({PROBE_IMAGE})"
    ]
    (call,) = docker.runs
    (request,) = call["device_requests"]
    assert (request["Driver"], request["Count"], request["Capabilities"]) == (
        "nvidia",
        -1,
        [["gpu"]],
    )
    assert call["image"] == PROBE_IMAGE and call["entrypoint"] == ["true"]
    (gpu,) = report.gpus  # the audio function (class 0x0403) is not a second GPU
    assert (gpu.pci_address, gpu.index, gpu.compute_capability) == ("0000:01:00.0", 0, "6.1")
    assert (gpu.vram_total_bytes, gpu.vram_free_bytes, gpu.power_w) == (6 * GIB, 5 * GIB, 120.5)


def test_five_nvidia_gpus_of_two_kinds(host: FakeHost) -> None:
    for bus in (1, 2, 3, 4, 5):
        add_nvidia(host, bus)
    cards = [gtx1060(1), gtx1060(2), gtx1060(3), rtx3060(4), rtx3060(5)]
    report, decision = run(host, FakeNvml(cards))
    assert decision.profile == "gpu-nvidia" and decision.fix is None
    summary = "5 GPU(s) (3x NVIDIA GeForce GTX 1060 6GB, 2x NVIDIA GeForce RTX 3060)"
    assert summary in decision.reasons[0]
    assert [gpu.vram_total_bytes // GIB for gpu in report.gpus] == [6, 6, 6, 12, 12]
    assert [gpu.compute_capability for gpu in report.gpus] == ["6.1"] * 3 + ["8.6"] * 2
    assert [gpu.index for gpu in report.gpus] == [0, 1, 2, 3, 4]


def test_amd_dgpu_is_probed_with_devices_and_numeric_groups(host: FakeHost) -> None:
    add_amd_dgpu(host)
    host.amd_nodes()
    docker = FakeDocker()
    report, decision = run(host, docker=docker)
    gids = sorted({(host.dev / "kfd").stat().st_gid, (host.dev / "dri/renderD128").stat().st_gid})
    assert decision.profile == "gpu-amd" and decision.fix is None
    assert decision.reasons == [
        f"AMD GPU found (AMD GPU 0x73bf), /dev/kfd and 1 render node(s), GIDs {gids}; "
        f"Docker probe passed ({PROBE_IMAGE})"
    ]
    (call,) = docker.runs
    assert call["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert call["group_add"] == [str(gid) for gid in gids]
    (gpu,) = report.gpus
    assert (gpu.kind, gpu.gfx_target, gpu.render_node) == ("discrete", "gfx1030", "renderD128")
    assert (gpu.vram_total_bytes, gpu.vram_free_bytes) == (16 * GIB, 15 * GIB)


@pytest.mark.parametrize(
    ("kfd_gid", "render_gid", "group_add"),
    [(109, 109, ["109"]), (44, 109, ["44", "109"])],  # one `render` group; kfd in `video`
)
def test_amd_containers_get_each_device_group_once(
    host: FakeHost, kfd_gid: int, render_gid: int, group_add: list[str]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the fake device nodes' groups need chown (root)")
    add_amd_dgpu(host)
    host.amd_nodes(kfd_gid=kfd_gid, render_gid=render_gid)
    docker = FakeDocker()
    report, decision = run(host, docker=docker)
    assert decision.profile == "gpu-amd"
    assert docker.runs[0]["group_add"] == group_add  # the probe container
    (slot,) = gpu_slots(report, "gpu-amd")  # the per-GPU overlay's services
    assert amd_group_add(slot.gids) == group_add
    # host.env; compose_plan makes 02-compute's AMD overlay from it
    assert detected_env(report, "gpu-amd") == {"AIRIG_AMD_GIDS": ",".join(group_add)}
    assert detected_env(report, "cpu") == {}


def test_rdna2_consumer_card_gets_the_hsa_override_note(host: FakeHost) -> None:
    add_amd_dgpu(host, gfx_version=100302)
    host.amd_nodes()
    _, decision = run(host)
    assert decision.profile == "gpu-amd"
    assert "gfx1032 needs HSA_OVERRIDE_GFX_VERSION=10.3.0 in .env" in decision.reasons


def test_nvidia_dgpu_with_amd_igpu_picks_nvidia(host: FakeHost) -> None:
    add_nvidia(host, 1)
    host.pci("0000:06:00.0", AMD, 0x1638, driver="amdgpu", vram=512 * 1024**2)
    report, decision = run(host, FakeNvml([rtx3060(1)]))
    assert decision.profile == "gpu-nvidia" and decision.fix is None
    amd = report.gpus_of("amd")[0]
    assert (amd.kind, amd.kind_basis) == ("integrated", "VRAM 512 MiB <= 2 GiB (APU carve-out)")
    assert decision.reasons[1] == (
        "AMD GPU found (AMD GPU 0x1638): integrated only (APU), not picked "
        "(ROCm support is limited)"
    )


def test_intel_igpu_with_nvidia_picks_nvidia(host: FakeHost) -> None:
    host.pci("0000:00:02.0", INTEL, 0x4680, driver="i915")
    (host.sys / "bus/pci/devices/0000:00:02.0/drm/renderD128").mkdir(parents=True)
    host.dev_node("dri/renderD128", 993)
    add_nvidia(host, 1)
    report, decision = run(host, FakeNvml([rtx3060(1)]))
    assert decision.profile == "gpu-nvidia" and decision.fix is None
    intel_note = (
        "Intel integrated GPU at 0000:00:02.0 not used: its memory is the host's: set "
        "AIRIG_IGPU=on in .env to use it"
    )
    assert decision.reasons[-1] == intel_note
    assert [gpu.vendor for gpu in report.gpus] == ["intel", "nvidia"]


@pytest.mark.parametrize(
    ("code", "message", "fix_words"),
    [
        (12, "NVML Shared Library Not Found", "sudo ubuntu-drivers install"),
        (9, "Driver Not Loaded", "reboot; with Secure Boot on"),
    ],
)
def test_nvidia_on_pci_without_a_working_driver_falls_back_to_cpu(
    host: FakeHost, code: int, message: str, fix_words: str
) -> None:
    add_nvidia(host, 1, driver="nouveau")
    docker = FakeDocker()
    _, decision = run(host, FakeNvml(init_error=code), docker)
    assert decision.profile == "cpu"
    assert decision.reasons == [
        f"NVIDIA GPU found (NVIDIA GPU 0x1c03) but NVML failed: {message} "
        "(kernel driver bound: nouveau)"
    ]
    assert fix_words in (decision.fix or "")
    assert docker.runs == []  # no probe without a host driver


def test_driver_without_container_toolkit_reports_the_engine_error(host: FakeHost) -> None:
    add_nvidia(host, 1)
    docker = FakeDocker(run_error=NVIDIA_ENGINE_ERROR)
    report, decision = run(host, FakeNvml([gtx1060(1)]), docker)
    assert decision.profile == "cpu"
    assert decision.reasons == [
        "NVIDIA driver 550.54.14, 1 GPU(s) (NVIDIA GeForce GTX 1060 6GB), but Docker cannot "
        f"start a container with it: {NVIDIA_ENGINE_ERROR}"
    ]
    assert decision.fix == TOOLKIT_FIX
    assert "nvidia-ctk runtime configure --runtime=docker" in TOOLKIT_FIX
    # The refused container is left "Created" by the engine: the probe removes it.
    assert docker.removed == [docker.runs[0]["name"]]
    assert report.probes["nvidia"].status == "failed"


def test_amd_gpu_without_kfd_falls_back_to_cpu_with_the_rocm_fix(host: FakeHost) -> None:
    host.pci("0000:03:00.0", AMD, 0x73BF, driver="amdgpu", vram=16 * GIB)
    host.dev_node("dri/renderD128", 109)
    _, decision = run(host)
    assert decision.profile == "cpu"
    assert decision.reasons == [
        "AMD GPU found (AMD GPU 0x73bf) but /dev/kfd is missing: the ROCm kernel driver is "
        "not loaded (kernel driver bound: amdgpu)"
    ]
    assert decision.fix == ROCM_FIX
    assert "amdgpu-install" in ROCM_FIX and "usermod -aG render,video" in ROCM_FIX


def test_bmc_vga_only_is_not_a_gpu(host: FakeHost) -> None:
    host.pci("0000:03:00.0", ASPEED, 0x2000, driver="ast")
    report, decision = run(host)
    assert report.gpus == ()
    assert [device.vendor_name for device in report.other_display] == ["ASPEED (server BMC)"]
    assert decision == ProfileDecision(
        "cpu",
        "detected",
        [
            "no NVIDIA, AMD or Intel GPU found",
            "ignored ASPEED (server BMC) display at 0000:03:00.0: not a compute GPU",
        ],
        None,
    )


def test_no_probe_image_and_no_runtime_leaves_nvidia_unverified(host: FakeHost) -> None:
    add_nvidia(host, 1)
    docker = FakeDocker(images=())
    report, decision = run(host, FakeNvml([gtx1060(1)]), docker)
    assert decision.profile == "cpu" and decision.fix == TOOLKIT_FIX
    why = "no probe image present locally (missing/image:1, airig-test/base:bookworm)"
    assert why in decision.reasons[0]
    assert report.probes["nvidia"].status == "not run" and docker.runs == []


def test_registered_nvidia_runtime_counts_when_no_probe_ran(host: FakeHost) -> None:
    add_nvidia(host, 1)
    info = {"Runtimes": {"nvidia": {"path": "nvidia-container-runtime"}, "runc": {}}}
    _, decision = run(host, FakeNvml([gtx1060(1)]), FakeDocker(info=info, images=()))
    assert decision.profile == "gpu-nvidia" and decision.fix is None
    assert "Docker lists the nvidia runtime/CDI devices (not probed:" in decision.reasons[0]


def test_docker_down_leaves_gpu_unverified(host: FakeHost) -> None:
    add_nvidia(host, 1)
    report, decision = run(host, FakeNvml([gtx1060(1)]), FakeDocker(down=True))
    assert decision.profile == "cpu" and decision.fix == DOCKER_FIX
    assert report.docker.reachable is False
    assert "connection refused" in report.probes["nvidia"].detail


def test_nvml_gpu_without_pci_sysfs_entry_counts(host: FakeHost) -> None:
    # WSL2: the GPU is reachable through NVML but absent from /sys/bus/pci.
    report, decision = run(host, FakeNvml([rtx3060(1)]))
    assert decision.profile == "gpu-nvidia"
    assert report.gpus[0].kind_basis == "reported by NVML only (no PCI sysfs entry)"


def test_amd_apu_only_without_kfd_offers_no_fix_to_detection(host: FakeHost) -> None:
    # Installing ROCm would not make detection pick an APU, so the fix is not offered.
    host.pci("0000:c1:00.0", AMD, 0x15BF, driver="amdgpu", vram=512 * 1024**2)
    _, decision = run(host)
    assert decision.profile == "cpu" and decision.fix is None
    assert decision.reasons == [
        "AMD GPU found (AMD GPU 0x15bf): integrated only (APU), not picked "
        "(ROCm support is limited)"
    ]


def test_an_amd_card_kfd_does_not_list_gets_no_worker_and_is_reported(host: FakeHost) -> None:
    # Two cards; the second is bound to vfio-pci (a VM), so KFD has no node for it and
    # a guessed render node (renderD129) would have mapped some other card.
    add_amd_dgpu(host)
    host.pci("0000:04:00.0", AMD, 0x73BF, driver="vfio-pci", vram=16 * GIB)
    host.amd_nodes()
    report, decision = run(host)
    assert decision.profile == "gpu-amd"
    slots = gpu_slots(report, "gpu-amd")
    # a device path compose can map (KFD gives only the node's name)
    assert [(slot.index, slot.render_node) for slot in slots] == [(0, "/dev/dri/renderD128")]
    assert (
        "AMD GPU at 0000:04:00.0 skipped: the KFD topology does not list it "
        "(kernel driver: vfio-pci), so no worker can use it"
    ) in decision.reasons
