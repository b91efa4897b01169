"""Hardware detection: which GPUs this host has and whether Docker can use them.

``detect()`` gathers facts into a ``HardwareReport``; ``decide_profile()`` turns the report
plus the --profile flag and AIRIG_PROFILE into a ``ProfileDecision``; ``render_table()``
prints both. Every OS touch point is a parameter so tests run on fixture hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware.amd import AmdHost, load_amdsmi, scan_amd
from airig.launcher.hardware.decide import (
    PROFILES,
    ProfileDecision,
    decide_profile,
    validate_profile,
)
from airig.launcher.hardware.docker_gpu import (
    DockerGpuSupport,
    ProbeResult,
    amd_run_options,
    nvidia_run_options,
    probe,
    query_docker,
)
from airig.launcher.hardware.intel import scan_intel
from airig.launcher.hardware.merge import merge_gpus
from airig.launcher.hardware.nvidia import NvmlResult, load_nvml, query_nvml
from airig.launcher.hardware.pci import PciDisplayDevice, scan_pci
from airig.launcher.hardware.pciids import PciIds, find_pci_ids
from airig.launcher.hardware.report import HardwareReport, kfd_visible, nvml_visible
from airig.launcher.hardware.table import render_table

__all__ = [
    "AUTO",
    "PROFILES",
    "GpuInfo",
    "HardwareReport",
    "ProfileDecision",
    "ProbeResult",
    "decide_profile",
    "detect",
    "kfd_visible",
    "nvml_visible",
    "render_table",
    "validate_profile",
]


class _Auto:
    """Default marker: load the real module / connect to the real engine."""

    def __repr__(self) -> str:
        return "AUTO"


AUTO: Any = _Auto()


def detect(
    sysfs_root: Path = Path("/sys"),
    dev_root: Path = Path("/dev"),
    nvml: Any = AUTO,
    amdsmi: Any = AUTO,
    docker_client: Any = AUTO,
    probe_image: str | Sequence[str] | None = None,
    probe_client: Any = None,
    pci_ids: Any = AUTO,
) -> HardwareReport:
    """Scan PCI, NVML, KFD and Docker. ``None`` skips NVML / amdsmi / Docker; ``AUTO`` uses
    the real ones. ``probe_image``: image(s) to probe with, the first present locally wins.
    ``probe_client``: the client that runs the probe container (a GPU container can take
    far longer to start than a query takes); ``docker_client`` when not given.
    ``pci_ids``: the PCI ID database that names cards NVML / amdsmi do not (``AUTO``: the
    host's, where lspci looks; ``None``: none, cards are named by their PCI ids)."""
    pci = scan_pci(Path(sysfs_root))
    nvml_result = nvml_facts(nvml)
    amd_host = scan_amd(Path(sysfs_root), Path(dev_root), amd_module(amdsmi, pci))
    client, docker_support = docker_facts(docker_client)
    gpus = merge_gpus(pci, nvml_result, amd_host, pci_names(pci_ids))
    images = [probe_image] if isinstance(probe_image, str) else list(probe_image or [])
    if client is not None and probe_client is not None:
        client = probe_client
    probes = run_probes(client, docker_support, nvml_result, amd_host, images)
    return HardwareReport(
        gpus=tuple(gpus),
        other_display=tuple(device for device in pci if device.vendor == "other"),
        nvml=nvml_result,
        amd=amd_host,
        docker=docker_support,
        probes=probes,
        reasons=tuple(host_notes(pci, amd_host, gpus, nvml_result)),
        intel=scan_intel(gpus, Path(dev_root)),
    )


def nvml_facts(nvml: Any) -> NvmlResult:
    if nvml is None:
        return NvmlResult(available=False, error="NVML not queried", error_kind="skipped")
    if nvml is AUTO:
        nvml, why = load_nvml()
        if nvml is None:
            return NvmlResult(available=False, error=why, error_kind="pynvml-missing")
    return query_nvml(nvml)


def pci_names(pci_ids: Any) -> PciIds | None:
    """The database to name cards from; it is only read if a card needs a name."""
    if pci_ids is None:
        return None
    return PciIds(find_pci_ids() if pci_ids is AUTO else Path(pci_ids))


def amd_module(amdsmi: Any, pci: list[PciDisplayDevice]) -> Any:
    """amdsmi only when an AMD GPU is on the bus: its import is slow and noisy elsewhere."""
    if amdsmi is not AUTO:
        return amdsmi
    if not any(device.vendor == "amd" for device in pci):
        return None
    module, _ = load_amdsmi()
    return module


def docker_facts(docker_client: Any) -> tuple[Any, DockerGpuSupport]:
    if docker_client is None:
        return None, DockerGpuSupport(reachable=False, error="Docker not checked")
    if docker_client is AUTO:
        import docker  # deferred: importing the SDK is slow and only needed here

        try:
            docker_client = docker.from_env(version="auto")
        except docker.errors.DockerException as exc:
            return None, DockerGpuSupport(reachable=False, error=str(exc))
    support = query_docker(docker_client)
    return (docker_client if support.reachable else None), support


def run_probes(
    client: Any,
    support: DockerGpuSupport,
    nvml_result: NvmlResult,
    amd_host: AmdHost,
    images: list[str],
) -> dict[str, ProbeResult]:
    """Probe each vendor whose host side is ready; say why the others were not probed."""
    ready = {
        "nvidia": nvml_result.available and bool(nvml_result.gpus),
        "amd": amd_host.kfd_present and bool(amd_host.render_nodes),
    }
    options: dict[str, Callable[[], dict[str, Any]]] = {
        "nvidia": nvidia_run_options,
        "amd": lambda: amd_run_options(amd_host.gids),
    }
    probes = {}
    for vendor, is_ready in ready.items():
        if not is_ready:
            probes[vendor] = ProbeResult(vendor, "not run", "host driver not ready")
        elif client is None:
            why = support.error or "Docker not reachable"
            probes[vendor] = ProbeResult(vendor, "not run", f"Docker not reachable: {why}")
        else:
            probes[vendor] = probe(client, vendor, images, options[vendor]())
    return probes


def host_notes(
    pci: list[PciDisplayDevice],
    amd_host: AmdHost,
    gpus: list[GpuInfo],
    nvml_result: NvmlResult | None = None,
) -> list[str]:
    """Things worth saying that no vendor verdict covers."""
    notes = [
        f"NVIDIA GPU at {gpu.pci_address} skipped: NVML does not see it "
        f"(kernel driver: {gpu.kernel_driver or 'none'}), so no worker can use it"
        for gpu in gpus
        if nvml_result is not None and nvml_result.available and not nvml_visible(gpu)
    ]
    notes += [
        f"AMD GPU at {gpu.pci_address} skipped: the KFD topology does not list it "
        f"(kernel driver: {gpu.kernel_driver or 'none'}), so no worker can use it"
        for gpu in gpus
        if amd_host.kfd_present and gpu.kind != "integrated" and not kfd_visible(gpu)
    ]
    notes += [
        f"ignored {device.vendor_name} display at {device.address}: not a compute GPU"
        for device in pci
        if device.vendor == "other"
    ]
    if amd_host.smi_note and any(gpu.vendor == "amd" for gpu in gpus):
        notes.append(amd_host.smi_note)
    return notes
