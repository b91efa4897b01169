"""The Vulkan probe (issue 28 §1): `vulkaninfo --summary` in Ollama's Vulkan image decides
whether Ollama runs there.

Fixtures (vulkaninfo/):
- ``llvmpipe.stdout``, ``no_driver.stderr``: recorded here from Debian bookworm's
  vulkan-tools 1.3.239 and mesa-vulkan-drivers 22.3.6 on a machine with no GPU (no driver:
  VK_ICD_FILENAMES pointing at nothing).
- ``radv_rx6700xt.stdout``: the device block of an RX 6700 XT on RADV as posted in
  GPUOpen-Tools/radeon_developer_panel#57, with the llvmpipe device Mesa lists beside it.
- ``anv_and_nvidia.stdout``: an Intel iGPU on ANV beside an NVIDIA card, as in
  hybridgroup/yzma BENCHMARKS.md (spaces, not tabs: both occur in pasted outputs).
- ``no_gpu.stderr``: a loader that finds a driver but no device (lutris/lutris#5544).
The format is Vulkan-Tools' vulkaninfo.cpp DumpSummaryGPU: "GPU<n>:", then key = value lines.
"""

from __future__ import annotations

import io
import json
from functools import partial
from pathlib import Path

import pytest
from gpu_hosts import arc_a770
from hardware_fakes import FakeDocker, FakeHost
from rich.console import Console
from support import error_lines, run_cli

from airig.common.errors import HardwareError
from airig.launcher.compose.docker import Docker
from airig.launcher.hardware import detect
from airig.launcher.hardware.vulkan import judge, parse_summary, run_probe
from airig.launcher.images import choose_images, load_catalog
from airig.launcher.images.vulkan_verdict import with_vulkan_verdict
from airig.launcher.lifecycle.up import Launcher
from airig.launcher.settings import load_settings

HERE = Path(__file__).parent / "vulkaninfo"
ROOT = Path(__file__).resolve().parents[3]
CATALOG = load_catalog(ROOT)
VULKAN_OLLAMA = "airig/ollama-vulkan:0.20.6"
VULKAN_BASE = "ollama/ollama:0.20.6"
NODE = "/dev/dri/renderD129"  # the Arc A770 fixture's render node


def fixture(name: str) -> str:
    return (HERE / name).read_text()


# ------------------------------------------------------------------ parsing
def test_llvmpipe_alone_is_a_cpu_device():
    (device,) = parse_summary(fixture("llvmpipe.stdout"))
    assert device.name.startswith("llvmpipe (LLVM 15.0.6")
    assert (device.device_type, device.vendor_id, device.driver) == (
        "PHYSICAL_DEVICE_TYPE_CPU", 0x10005, "llvmpipe"
    )  # fmt: skip
    assert not device.is_gpu


def test_radv_and_anv_devices_are_gpus_with_their_vendor():
    radv, llvmpipe = parse_summary(fixture("radv_rx6700xt.stdout"))
    assert (radv.name, radv.vendor_id, radv.driver) == (
        "AMD Radeon RX 6700 XT (RADV NAVI22)", 0x1002, "radv"
    )  # fmt: skip
    assert radv.is_gpu and not llvmpipe.is_gpu
    anv, nvidia = parse_summary(fixture("anv_and_nvidia.stdout"))
    assert anv.device_type == "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU" and anv.vendor_id == 0x8086
    assert anv.driver == "Intel open-source Mesa driver"
    assert nvidia.vendor_id == 0x10DE


def test_instance_sections_before_devices_are_not_devices():
    assert (
        parse_summary("Instance Extensions: count = 1\nVK_KHR_surface : extension revision 25\n")
        == []
    )


# ------------------------------------------------------------------ verdicts
def test_the_gpu_of_the_vendor_passes_and_is_named():
    probe = judge("amd", [NODE], 0, fixture("radv_rx6700xt.stdout"), "", VULKAN_OLLAMA)
    assert probe.passed
    assert probe.detail == "Vulkan in the container sees AMD Radeon RX 6700 XT (RADV NAVI22) (radv)"


def test_llvmpipe_only_fails_and_says_it_is_a_cpu_renderer():
    probe = judge("amd", [NODE], 0, fixture("llvmpipe.stdout"), "", VULKAN_OLLAMA)
    assert probe.failed
    assert "sees 0 AMD GPU(s) for 1 render node(s) (/dev/dri/renderD129)" in probe.detail
    assert "llvmpipe (LLVM 15.0.6, 256 bits) (a CPU renderer)" in probe.detail


def test_no_driver_fails_with_vulkaninfos_words():
    probe = judge("intel", [NODE], 1, "", fixture("no_driver.stderr"), VULKAN_OLLAMA)
    assert probe.failed
    assert probe.detail == f"vulkaninfo exited 1 in {VULKAN_OLLAMA}: Cannot create Vulkan instance"


def test_a_driver_without_a_device_fails_with_the_loaders_last_line():
    probe = judge("amd", [NODE], 1, "", fixture("no_gpu.stderr"), VULKAN_OLLAMA)
    assert probe.failed and "vkEnumeratePhysicalDevices failed" in probe.detail


def test_another_vendors_gpu_does_not_count():
    """An Intel container that Vulkan shows an NVIDIA card (its ICD from the host) is not
    an Intel GPU Ollama can use."""
    text = fixture("anv_and_nvidia.stdout")
    assert judge("intel", [NODE], 0, text, "", VULKAN_OLLAMA).passed
    assert judge("amd", [NODE], 0, text, "", VULKAN_OLLAMA).failed


def test_fewer_gpus_than_render_nodes_fails():
    nodes = ["/dev/dri/renderD128", "/dev/dri/renderD129"]
    probe = judge("amd", nodes, 0, fixture("radv_rx6700xt.stdout"), "", VULKAN_OLLAMA)
    assert probe.failed and "sees 1 AMD GPU(s) for 2 render node(s)" in probe.detail


# ------------------------------------------------------------------ the container
def test_the_probe_runs_vulkaninfo_with_the_nodes_and_groups_and_removes_its_container():
    engine = FakeDocker(images=(VULKAN_OLLAMA,), detached=(0, fixture("radv_rx6700xt.stdout"), ""))
    probe = run_probe(engine, VULKAN_OLLAMA, "amd", [NODE], (993,))
    assert probe.passed
    (run,) = engine.runs
    assert run["entrypoint"] == ["vulkaninfo", "--summary"]
    assert run["devices"] == [f"{NODE}:{NODE}:rwm"] and run["group_add"] == ["993"]
    assert run["network_mode"] == "none" and run["detach"] is True
    assert engine.removed == [run["name"]]


def test_no_image_yet_is_not_run_and_nothing_is_pulled():
    engine = FakeDocker(images=())
    probe = run_probe(engine, VULKAN_OLLAMA, "amd", [NODE])
    assert (probe.status, probe.detail) == (
        "not run",
        f"the image {VULKAN_OLLAMA} is not built yet",
    )
    assert engine.runs == []


def test_an_image_without_vulkaninfo_is_not_run_with_the_fix():
    engine = FakeDocker(
        images=(VULKAN_OLLAMA,), run_error='exec: "vulkaninfo": executable file not found in $PATH'
    )
    probe = run_probe(engine, VULKAN_OLLAMA, "amd", [NODE])
    assert probe.status == "not run" and "install vulkan-tools" in probe.detail
    assert engine.removed  # the created container is gone


def test_an_engine_refusing_the_node_fails_with_its_words():
    words = (
        "error gathering device information while adding custom device "
        '"/dev/dri/renderD129": no such file or directory'
    )
    engine = FakeDocker(images=(VULKAN_OLLAMA,), run_error=words)
    probe = run_probe(engine, VULKAN_OLLAMA, "intel", [NODE])
    assert probe.failed and probe.detail == words


# ------------------------------------------------------------------ the choice
def vulkan_selection(profile: str = "gpu-amd"):
    """A selection whose Ollama is on Vulkan (the first Vulkan entry of the catalogue)."""
    from airig.launcher.gpu_info import GpuInfo

    rx580 = GpuInfo(vendor="amd", name="Radeon RX 580", kind="discrete", gfx_target="gfx803",
                    render_node="renderD128")  # fmt: skip
    selection = choose_images(CATALOG, profile, [rx580], {})
    assert selection.of("ollama").backend == "vulkan"
    return selection


def test_a_passed_probe_keeps_vulkan_and_says_what_it_saw():
    settled = with_vulkan_verdict(
        vulkan_selection(), CATALOG, {}, "passed", "Vulkan … sees X", False
    )
    ollama = settled.of("ollama")
    assert (
        ollama.on_gpu
        and ollama.backend == "vulkan"
        and ollama.why.endswith("probe: Vulkan … sees X")
    )


def test_a_failed_probe_moves_ollama_to_cpu_with_one_warning_and_the_fix():
    settled = with_vulkan_verdict(
        vulkan_selection(), CATALOG, {}, "failed", "it lists llvmpipe", False
    )
    ollama = settled.of("ollama")
    assert (ollama.on_gpu, ollama.backend, ollama.variable) == (False, "cpu", "OLLAMA_IMAGE")
    assert ollama.image == CATALOG.cpu["ollama"].image == settled.env["OLLAMA_IMAGE"]
    assert ollama.warning.startswith("Ollama runs on CPU: it lists llvmpipe → ")
    assert "ls -l /dev/dri" in ollama.warning and "OLLAMA_BACKEND=cpu" in ollama.warning
    assert ollama in settled.on_cpu  # the plan's CPU overlay takes it off the GPU
    assert settled.of("comfyui") == vulkan_selection().of("comfyui")  # the others keep theirs


def test_a_failed_probe_under_a_forced_vulkan_is_a_refusal():
    settled = with_vulkan_verdict(
        vulkan_selection(), CATALOG, {}, "failed", "it lists llvmpipe", True
    )
    (refusal,) = settled.refusals
    assert refusal.message == (
        "OLLAMA_BACKEND=vulkan in .env, but Vulkan in Ollama's container sees no GPU: "
        "it lists llvmpipe"
    )
    assert "OLLAMA_BACKEND=auto" in refusal.hint


def test_not_probed_keeps_vulkan_and_says_so():
    settled = with_vulkan_verdict(vulkan_selection(), CATALOG, {}, "not run", "no Docker", False)
    assert (
        settled.of("ollama").on_gpu and "Vulkan not probed: no Docker" in settled.of("ollama").why
    )


def test_a_selection_not_on_vulkan_is_left_alone():
    cpu = choose_images(CATALOG, "cpu", [], {})
    assert with_vulkan_verdict(cpu, CATALOG, {}, "failed", "x", True) is cpu


# ------------------------------------------------------------------ detect and up
class VulkanAdapter(Docker):
    """The real adapter over a fake engine; builds and pulls only record themselves."""

    def __init__(self, engine: FakeDocker) -> None:
        super().__init__()
        self.engine, self.calls = engine, []

    def binary(self) -> str:
        return "/usr/bin/docker"

    def compose_version(self) -> tuple[int, ...]:
        return (2, 29, 1)

    def sdk(self):
        return self.engine

    def probe_sdk(self, timeout: float):
        return self.engine

    def pull_image(self, image: str) -> None:
        self.calls.append(("pull", image))
        self.engine.images_present.add(image)

    def build_image(self, context, tag, args, hint) -> None:
        self.calls.append(("build_image", Path(context).name, tag, dict(args)))
        self.engine.images_present.add(tag)

    def build(self, stack, services, args) -> None:
        self.calls.append(("build", tuple(services)))


@pytest.fixture
def arc_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launcher_kit: Path) -> Path:
    """An Intel Arc A770 host (xe, renderD129) as detection inside the launcher sees it."""
    host = FakeHost(tmp_path / "host")
    arc_a770(host)
    fixture_detect = partial(detect, sysfs_root=host.sys, dev_root=host.dev, nvml=None, amdsmi=None,
                             pci_ids=None)  # fmt: skip
    monkeypatch.setattr("airig.launcher.hardware.choice.detect", fixture_detect)
    env = (launcher_kit / ".env.example").read_text().replace("change-me", "s3cret")
    (launcher_kit / ".env").write_text(env)
    return launcher_kit


def test_detect_shows_the_probe_and_moves_ollama_to_cpu_when_vulkan_sees_only_llvmpipe(
    arc_host, monkeypatch, capsys
):
    engine = FakeDocker(images=(VULKAN_OLLAMA,), detached=(0, fixture("llvmpipe.stdout"), ""))
    code, out, _ = run_cli(monkeypatch, capsys, VulkanAdapter(engine), "detect", "--json")
    assert code == 0
    data = json.loads(out)
    images = {i["service"]: i for i in data["images"]}
    assert images["ollama"]["device"] == "cpu" and images["ollama"]["backend"] == "cpu"
    assert "the Vulkan probe failed" in images["ollama"]["why"]
    assert f"sees 0 Intel GPU(s) for 1 render node(s) ({NODE})" in images["ollama"]["why"]
    assert images["comfyui"]["backend"] == "xpu"  # the xpu image is not judged by Vulkan
    assert data["vulkan_probe"]["status"] == "failed"
    assert data["vulkan_probe"]["devices"][0]["driver"] == "llvmpipe"
    assert engine.runs[-1]["devices"] == [f"{NODE}:{NODE}:rwm"]


def test_detect_keeps_vulkan_when_the_probe_sees_the_arc(arc_host, monkeypatch, capsys):
    engine = FakeDocker(images=(VULKAN_OLLAMA,), detached=(0, fixture("anv_and_nvidia.stdout"), ""))
    code, out, _ = run_cli(monkeypatch, capsys, VulkanAdapter(engine), "detect")
    assert code == 0
    assert "Vulkan in the container sees Intel(R) Graphics (RPL-S)" in out


def test_up_builds_the_vulkan_image_then_probes_before_anything_starts(arc_host):
    """A forced Vulkan that the probe refuses: `up` pulled the base and built the image it
    probes with, then stops in one line; no stack is built or started."""
    env = (arc_host / ".env").read_text()
    (arc_host / ".env").write_text(env.replace("OLLAMA_BACKEND=auto", "OLLAMA_BACKEND=vulkan"))
    engine = FakeDocker(images=("python:3.12-slim",), detached=(0, fixture("llvmpipe.stdout"), ""))
    adapter = VulkanAdapter(engine)
    launcher = Launcher(load_settings(arc_host), adapter, Console(file=io.StringIO()))
    with pytest.raises(HardwareError, match="OLLAMA_BACKEND=vulkan in .env, but Vulkan"):
        launcher.up()
    assert adapter.calls == [
        ("pull", VULKAN_BASE),
        ("build_image", "ollama-vulkan", VULKAN_OLLAMA, {"OLLAMA_BASE": VULKAN_BASE}),
    ]
    assert [r["entrypoint"] for r in engine.runs if r.get("detach")] == [
        ["vulkaninfo", "--summary"]
    ]


def test_up_with_a_forced_vulkan_refusal_is_one_line(arc_host, monkeypatch, capsys):
    env = (arc_host / ".env").read_text()
    (arc_host / ".env").write_text(env.replace("OLLAMA_BACKEND=auto", "OLLAMA_BACKEND=vulkan"))
    engine = FakeDocker(
        images=("python:3.12-slim", VULKAN_OLLAMA), detached=(1, "", fixture("no_driver.stderr"))
    )
    code, _, err = run_cli(monkeypatch, capsys, VulkanAdapter(engine), "up")
    assert code == 1 and "Traceback" not in err
    (line,) = error_lines(err)
    assert "Cannot create Vulkan instance" in line
