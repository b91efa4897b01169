"""The detection parts on their own: PCI, KFD, NVML, Docker info, rendering, JSON."""

from __future__ import annotations

import io
import json
import os
import sys
import types
from pathlib import Path

import pynvml
import pytest
from docker.errors import ContainerError
from docker.types import DeviceRequest
from hardware_fakes import (
    NVIDIA_ENGINE_ERROR,
    NVML_API,
    FakeCard,
    FakeDocker,
    FakeHost,
    FakeNvml,
    gtx1060,
)
from rich.console import Console

from airig.launcher.hardware import decide_profile, detect, render_table
from airig.launcher.hardware.amd import (
    AmdHost,
    gfx_target,
    kfd_node,
    load_amdsmi,
    read_smi_names,
    scan_amd,
)
from airig.launcher.hardware.decide import TOOLKIT_FIX
from airig.launcher.hardware.docker_gpu import nvidia_run_options, probe, read_docker_info
from airig.launcher.hardware.nvidia import query_nvml
from airig.launcher.hardware.pci import classify, normalize_address, scan_pci


def test_fake_nvml_only_uses_names_pynvml_has() -> None:
    assert NVML_API and [name for name in NVML_API if not hasattr(pynvml, name)] == []
    assert pynvml.NVML_ERROR_LIBRARY_NOT_FOUND == FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert pynvml.NVML_ERROR_DRIVER_NOT_LOADED == FakeNvml.NVML_ERROR_DRIVER_NOT_LOADED


def test_probe_request_matches_the_sdk_device_request() -> None:
    expected = DeviceRequest(driver="nvidia", count=-1, capabilities=[["gpu"]])
    assert nvidia_run_options()["device_requests"] == [expected]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("00000000:0A:00.0", "0000:0a:00.0"),
        ("0000:01:00.0", "0000:01:00.0"),
        ("01:00.0", "0000:01:00.0"),
    ],
)
def test_normalize_address(raw: str, expected: str) -> None:
    assert normalize_address(raw) == expected


@pytest.mark.parametrize(
    ("vendor", "address", "vram", "kind"),
    [
        ("intel", "0000:00:02.0", None, "integrated"),
        ("intel", "0000:03:00.0", None, "discrete"),
        ("amd", "0000:06:00.0", 2 * 1024**3, "integrated"),
        ("amd", "0000:03:00.0", 8 * 1024**3, "discrete"),
        ("amd", "0000:03:00.0", None, "unknown"),
        ("other", "0000:03:00.0", None, "not-a-gpu"),
        ("nvidia", "0000:01:00.0", None, "discrete"),
    ],
)
def test_classify_integrated_vs_discrete(
    vendor: str, address: str, vram: int | None, kind: str
) -> None:
    assert classify(vendor, address, vram)[0] == kind


def test_scan_pci_keeps_display_class_only(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.pci("0000:01:00.0", 0x10DE, 0x2504, driver="nvidia")
    host.pci("0000:01:00.1", 0x10DE, 0x228E, pci_class=0x040300)
    host.pci("0000:02:00.0", 0x10DE, 0x2236, pci_class=0x030200)  # 3D controller (datacenter)
    devices = scan_pci(host.sys)
    assert [(d.address, d.kernel_driver) for d in devices] == [
        ("0000:01:00.0", "nvidia"),
        ("0000:02:00.0", None),
    ]
    assert scan_pci(tmp_path / "no-such-sysfs") == []


@pytest.mark.parametrize(
    ("version", "target"),
    [(100300, "gfx1030"), (90010, "gfx90a"), (110001, "gfx1101"), (90400, "gfx940"), (0, None)],
)
def test_gfx_target_from_kfd_version(version: int, target: str | None) -> None:
    assert gfx_target(version) == target


def test_kfd_node_decodes_location_and_render_minor() -> None:
    node = kfd_node(
        {
            "location_id": (0xC1 << 8) | (0 << 3) | 0,
            "domain": 0,
            "drm_render_minor": 129,
            "gfx_target_version": 110003,
            "cpu_cores_count": 16,
            "simd_count": 32,
        }
    )
    assert (node.pci_address, node.render_node, node.gfx_target, node.is_apu) == (
        "0000:c1:00.0",
        "renderD129",
        "gfx1103",
        True,
    )


@pytest.mark.parametrize(
    ("kfd_gid", "render_gid", "gids"),
    [
        (109, 109, (109,)),  # Ubuntu with ROCm: kfd and render nodes both in `render`
        (44, 109, (44, 109)),  # kfd in `video`
        (993, 44, (44, 993)),
    ],
)
def test_amd_device_gids_are_each_listed_once(
    tmp_path: Path, kfd_gid: int, render_gid: int, gids: tuple[int, ...]
) -> None:
    if os.geteuid() != 0 and kfd_gid != render_gid:
        pytest.skip("two owning groups need chown (root)")
    host = FakeHost(tmp_path).amd_nodes(("renderD128", "renderD129"), kfd_gid, render_gid)
    amd = scan_amd(host.sys, host.dev)
    if os.geteuid() == 0:
        assert (amd.kfd_gid, amd.render_gid, amd.gids) == (kfd_gid, render_gid, gids)
    assert len(amd.gids) == len(set(amd.gids)) == (1 if kfd_gid == render_gid else 2)
    assert "video_gid" not in amd.to_dict()
    assert AmdHost(kfd_present=False).gids == ()


def test_amd_device_gids_come_from_the_nodes(tmp_path: Path) -> None:
    host = FakeHost(tmp_path).amd_nodes(render=("renderD128", "renderD129"))
    report = detect(host.sys, host.dev, nvml=None, amdsmi=None, docker_client=None)
    expected = sorted({(host.dev / name).stat().st_gid for name in ("kfd", "dri/renderD128")})
    assert list(report.amd.gids) == expected
    assert report.amd.render_nodes == ("renderD128", "renderD129")


def test_amdsmi_import_failure_of_any_kind_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = types.ModuleType("amdsmi")

    def explode(name: str) -> object:
        print("libamd_smi.so: cannot open shared object file")  # what the real one prints
        raise SystemExit(1)

    monkeypatch.setitem(sys.modules, "amdsmi", broken)
    monkeypatch.setattr("airig.launcher.hardware.amd.importlib.import_module", explode)
    module, note = load_amdsmi()
    assert module is None and note == "amdsmi unavailable (SystemExit: 1)"


def test_amdsmi_names_by_bdf() -> None:
    fake = types.SimpleNamespace(
        amdsmi_init=lambda: None,
        amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: ["h0"],
        amdsmi_get_gpu_device_bdf=lambda h: "0000:03:00.0",
        amdsmi_get_gpu_asic_info=lambda h: {"market_name": "AMD Radeon RX 6800 XT"},
    )
    assert read_smi_names(fake) == ({"0000:03:00.0": "AMD Radeon RX 6800 XT"}, None)


def test_nvml_unsupported_readings_are_none_and_nvml_is_shut_down() -> None:
    card = FakeCard("Tesla P4", "00000000:01:00.0", 8, 4, (6, 1), None, None, None)
    nvml = FakeNvml([card])
    result = query_nvml(nvml)
    (gpu,) = result.gpus
    assert (gpu.temperature_c, gpu.power_w, gpu.utilization_pct) == (None, None, None)
    assert nvml.shutdowns == 1


@pytest.mark.parametrize(
    ("code", "kind"), [(12, "library-not-found"), (9, "driver-not-loaded"), (999, "other")]
)
def test_nvml_init_errors_are_classified(code: int, kind: str) -> None:
    result = query_nvml(FakeNvml(init_error=code))
    assert (result.available, result.error_kind) == (False, kind)


def test_docker_info_hints() -> None:
    support = read_docker_info(
        {
            "Runtimes": {"runc": {}, "nvidia": {}},
            "DefaultRuntime": "runc",
            "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"],
            "DiscoveredDevices": [{"Source": "cdi", "ID": "nvidia.com/gpu=0"}],
        }
    )
    assert support.nvidia_runtime and support.nvidia_cdi
    old_engine = read_docker_info({"Runtimes": {"runc": {}}, "CDISpecDirs": None})
    assert not old_engine.nvidia_hint and old_engine.cdi_spec_dirs == ()


def test_report_and_decision_render_as_json_and_table(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.pci("0000:01:00.0", 0x10DE, 0x1C03, driver="nvidia")
    host.pci("0000:03:00.0", 0x1A03, 0x2000, driver="ast")
    report = detect(
        host.sys,
        host.dev,
        nvml=FakeNvml([gtx1060(1)]),
        amdsmi=None,
        docker_client=FakeDocker(run_error=NVIDIA_ENGINE_ERROR),
        probe_image="airig-test/base:bookworm",
    )
    decision = decide_profile(report, None, None)
    data = json.loads(json.dumps({"report": report.to_dict(), "decision": decision.to_dict()}))
    assert data["report"]["gpus"][0]["name"] == "NVIDIA GeForce GTX 1060 6GB"
    assert data["report"]["probes"]["nvidia"]["status"] == "failed"
    assert data["decision"]["profile"] == "cpu"
    out = io.StringIO()
    render_table(report, Console(file=out, width=300, color_system=None), decision)
    text = out.getvalue()
    assert "NVIDIA GeForce GTX 1060 6GB" in text and "ASPEED (server BMC)" in text
    # The engine's text keeps its brackets: rich markup must not eat "[[gpu]]".
    assert f"Probe nvidia: failed - {NVIDIA_ENGINE_ERROR}" in text
    assert "Profile: cpu (from detected)" in text and f"Fix: {TOOLKIT_FIX}" in text


def test_unreachable_engine_is_a_finding_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    report = detect(tmp_path, tmp_path, nvml=None, amdsmi=None)  # docker_client=AUTO
    assert report.docker.reachable is False and report.docker.error


def test_probe_image_without_true_is_inconclusive() -> None:
    docker = FakeDocker(run_error='exec: "true": executable file not found in $PATH')
    result = probe(docker, "nvidia", ["airig-test/base:bookworm"], nvidia_run_options())
    assert (result.status, result.detail) == (
        "not run",
        "image airig-test/base:bookworm has no `true` to run; pass another probe image",
    )


def test_probe_container_that_ran_accepted_the_devices() -> None:
    docker = FakeDocker()

    def exits_one(image: str, **kwargs: object) -> bytes:
        raise ContainerError("c", 1, "true", image, b"")

    docker.containers.run = exits_one  # type: ignore[method-assign]
    result = probe(docker, "amd", ["airig-test/base:bookworm"], {})
    assert (result.status, result.detail) == ("passed", "devices accepted (probe command exited 1)")
