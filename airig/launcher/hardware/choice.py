"""From the launcher's settings to a hardware profile and a GPU layout.

Glue between `airig.launcher.hardware` (facts and the decision rules) and the launcher: it
supplies the flag and .env values, the Docker client and the images to probe with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airig.common import amd_sysfs
from airig.common.errors import DockerError, HardwareError
from airig.launcher.compose.docker import Docker
from airig.launcher.compose.gpu_workers import GpuSlot
from airig.launcher.compose.plan import amd_host_env, intel_host_env
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware import HardwareReport, detect, nvml_visible
from airig.launcher.hardware.decide import decide_profile
from airig.launcher.hardware.intel import intel_usable
from airig.launcher.hardware.vulkan import VulkanProbe, run_probe
from airig.launcher.images import ImageSelection, choose_images, load_catalog, pins_from
from airig.launcher.images.vulkan_verdict import with_vulkan_verdict
from airig.launcher.settings import Settings

VENDOR_OF = {"gpu-nvidia": "nvidia", "gpu-amd": "amd", "gpu-intel": "intel"}
SOURCE_LABEL = {"flag": "--profile flag", "env": "AIRIG_PROFILE", "detected": "detection"}


@dataclass
class Choice:
    profile: str
    source: str  # human words: "--profile flag", "AIRIG_PROFILE in .env", "detection"
    reasons: list[str]
    fix: str | None
    gpus: list[GpuSlot]
    report: HardwareReport
    host_env: dict[str, str] = field(default_factory=dict)
    # Not strict (dry-run, detect): the forced profile `up` would refuse, and why.
    refusal: HardwareError | None = None
    # the image each compute service runs, and why (02-compute/images.yaml)
    images: ImageSelection | None = None
    # Ollama on Vulkan: what vulkaninfo saw in its image (None: Ollama is not on Vulkan)
    vulkan: VulkanProbe | None = None


def probe_images(settings: Settings) -> list[str]:
    """Local images a GPU probe may start (nothing is pulled)."""
    return [settings.image, settings.base_image]


def detect_report(settings: Settings, docker: Docker, client: Any = None) -> HardwareReport:
    # nvidia-container-cli initialises every card when the probe starts: several seconds
    # per card when persistence mode is off (AIRIG_GPU_PROBE_TIMEOUT)
    timeout = settings.gpu_probe_timeout
    probe_client = None
    if client is None:
        try:
            client = docker.sdk()  # the short timeout: an absent daemon fails fast
            probe_client = docker.probe_sdk(timeout)
        except DockerError:
            client = None  # detection still reports PCI/NVML/KFD facts without Docker
    return detect(
        docker_client=client, probe_image=probe_images(settings), probe_client=probe_client
    )


def choose_profile(
    settings: Settings, docker: Docker, strict: bool = True, client: Any = None
) -> Choice:
    """flag > environment/.env > detected. ``strict``: a forced, unusable GPU profile
    raises HardwareError; otherwise (dry-run, detect) it is kept with the reason and the
    fix, and ``refusal`` holds the error `up` would raise."""
    report = detect_report(settings, docker, client)
    source = settings.source_of("AIRIG_PROFILE")
    value = settings.profile
    flag = value if source == "flag" else None
    env_value = value if source in (".env", "environment") else None
    refusal: HardwareError | None = None
    try:
        decision = decide_profile(report, flag=flag, env_value=env_value, igpu=igpu_on(settings))
        profile, reasons, fix = decision.profile, list(decision.reasons), decision.fix
        label = SOURCE_LABEL[decision.source]
    except HardwareError as exc:
        if strict or value is None:  # detection never refuses, a forced profile may
            raise
        refusal = exc
        profile, reasons, fix = value, [exc.message], exc.hint
        label = SOURCE_LABEL["flag" if flag else "env"]
    if label == "AIRIG_PROFILE":
        label = f"AIRIG_PROFILE in {source}"
    gpus = gpu_slots(report, profile, igpu_on(settings))
    host_env = detected_env(report, profile)
    images = select_images(settings, report, profile)
    images, vulkan = vulkan_settled(settings, docker, client, report, profile, images)
    return Choice(profile, label, reasons, fix, gpus, report, host_env, refusal, images, vulkan)


def vulkan_settled(
    settings: Settings,
    docker: Docker,
    client: Any,
    report: HardwareReport,
    profile: str,
    images: ImageSelection,
) -> tuple[ImageSelection, VulkanProbe | None]:
    """An Ollama chosen for Vulkan, kept only when Vulkan sees the GPUs in its image, with
    the render nodes and groups its containers get (hardware/vulkan.py); else the CPU
    image, or a refusal when OLLAMA_BACKEND=vulkan forced it (images/vulkan_verdict.py)."""
    ollama = images.of("ollama")
    if ollama.backend != "vulkan" or not ollama.on_gpu or ollama.refusal is not None:
        return images, None
    vendor = VENDOR_OF.get(profile, "")
    gpus = profile_gpus(report, profile, igpu_on(settings))
    nodes = [f"/dev/dri/{g.render_node}" for g in gpus if g.render_node]
    gids = report.intel.gids if vendor == "intel" else report.amd.gids
    if client is None:
        try:  # vulkaninfo starts in a second; the long client is for a busy engine
            client = docker.probe_sdk(settings.gpu_probe_timeout)
        except DockerError as exc:
            probe = VulkanProbe("not run", f"Docker not reachable: {exc.message}", ollama.image)
    if client is not None:
        probe = run_probe(client, ollama.image, vendor, nodes, gids, settings.gpu_probe_timeout)
    settled = with_vulkan_verdict(
        images,
        load_catalog(settings.root),
        pins_from(settings.value_of),
        probe.status,
        probe.detail,
        forced=settings.ollama_backend == "vulkan",
        registry=settings.image_registry,
    )
    return settled, probe


def select_images(settings: Settings, report: HardwareReport, profile: str) -> ImageSelection:
    """Per compute service, the newest image variant that fits every GPU it will use;
    a pin in .env wins (refused when it cannot run on a detected GPU)."""
    return choose_images(
        load_catalog(settings.root),
        profile,
        profile_gpus(report, profile, igpu_on(settings)),
        pins_from(settings.value_of),
        settings.hsa_override_gfx_version.strip(),
        settings.image_registry,
        backends_from(settings),
    )


def backends_from(settings: Settings) -> dict[str, str]:
    """OLLAMA_BACKEND, COMFYUI_BACKEND, WHISPER_BACKEND: per service the .env override."""
    return {
        "ollama": settings.ollama_backend,
        "comfyui": settings.comfyui_backend,
        "whisper": settings.whisper_backend,
    }


def igpu_on(settings: Settings) -> bool:
    """AIRIG_IGPU=on: integrated GPUs (memory shared with the host) may do work."""
    return settings.igpu == "on"


def profile_gpus(report: HardwareReport, profile: str, igpu: bool = False) -> list[GpuInfo]:
    """The GPUs of the profile's vendor that its containers can use: discrete ones, and
    integrated ones when the user allows it (``igpu``)."""
    vendor = VENDOR_OF.get(profile)
    if vendor == "amd":
        # the rule the worker finds its cards by (airig/common/amd_sysfs.py): one rule, so
        # the card `gpu_slots` numbers 1 is the one the worker reads as GPU 1
        return amd_sysfs.host_order(report.gpus_of("amd"), igpu)
    return [
        g
        for g in report.gpus
        if g.vendor == vendor
        and (not g.integrated or igpu)
        and nvml_visible(g)
        and (vendor != "intel" or intel_usable(g, report.intel))
    ]


def detected_env(report: HardwareReport, profile: str) -> dict[str, str]:
    """Detected values for host.env: on gpu-amd the GIDs owning /dev/kfd and the render
    nodes, each once (they are one `render` group on most hosts); on gpu-intel those
    owning the Intel render nodes."""
    if profile == "gpu-intel":
        return intel_host_env(report.intel.gids)
    return amd_host_env(report.amd.gids) if profile == "gpu-amd" else {}


def gpu_slots(report: HardwareReport, profile: str, igpu: bool = False) -> list[GpuSlot]:
    """The discrete GPUs of the profile's vendor, one worker each. An NVIDIA card NVML does
    not see gets none: its worker would be pinned to a CUDA index that does not exist (the
    report's reasons say it was skipped, and why)."""
    chosen = profile_gpus(report, profile, igpu)
    slots = []
    for position, gpu in enumerate(chosen):
        # NVIDIA: NVML's index; AMD and Intel: the position (AMD's: amd_sysfs.host_order)
        index = gpu.index if gpu.index is not None else position
        # KFD names the node ("renderD128"); compose maps a device path.
        node = f"/dev/dri/{gpu.render_node}" if gpu.render_node else ""
        # its container's group_add
        gids = {"amd": report.amd.gids, "intel": report.intel.gids}.get(gpu.vendor, ())
        slots.append(GpuSlot(index, gpu.name, gpu.vram_total_bytes or 0, node, gids))
    return slots
