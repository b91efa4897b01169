"""The hardware report: every fact detection found, as plain data with ``to_dict()``
(each GPU a ``GpuInfo``, from ``airig/launcher/gpu_info.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware.amd import AmdHost
from airig.launcher.hardware.docker_gpu import DockerGpuSupport, ProbeResult
from airig.launcher.hardware.intel import IntelHost
from airig.launcher.hardware.nvidia import NvmlResult
from airig.launcher.hardware.pci import PciDisplayDevice


def nvml_visible(gpu: GpuInfo) -> bool:
    """False for an NVIDIA card NVML gave no index: one bound to vfio-pci (handed to a VM)
    or to nouveau is on the PCI bus, but CUDA cannot use it."""
    return gpu.vendor != "nvidia" or gpu.index is not None


def kfd_visible(gpu: GpuInfo) -> bool:
    """False for an AMD card the KFD topology does not list (bound to vfio-pci, or its
    amdgpu failed to bind): it has no render node of its own, and guessing one would
    map another card into its worker."""
    return gpu.vendor != "amd" or gpu.render_node is not None


@dataclass(frozen=True)
class HardwareReport:
    """Facts only; ``decide.decide_profile`` turns them into a profile."""

    gpus: tuple[GpuInfo, ...] = ()
    other_display: tuple[PciDisplayDevice, ...] = ()  # BMC and virtual display chips
    nvml: NvmlResult = field(default_factory=lambda: NvmlResult(available=False))
    amd: AmdHost = field(default_factory=lambda: AmdHost(kfd_present=False))
    docker: DockerGpuSupport = field(default_factory=lambda: DockerGpuSupport(reachable=False))
    probes: dict[str, ProbeResult] = field(default_factory=dict)  # vendor -> probe
    reasons: tuple[str, ...] = ()  # notes gathered while detecting
    intel: IntelHost = field(default_factory=IntelHost)

    def gpus_of(self, vendor: str) -> list[GpuInfo]:
        return [gpu for gpu in self.gpus if gpu.vendor == vendor]

    def probe(self, vendor: str) -> ProbeResult:
        return self.probes.get(vendor) or ProbeResult(vendor, "not run", "no probe attempted")

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": [gpu.to_dict() for gpu in self.gpus],
            "other_display": [device.to_dict() for device in self.other_display],
            "nvml": self.nvml.to_dict(),
            "amd": self.amd.to_dict(),
            "docker": self.docker.to_dict(),
            "probes": {vendor: probe.to_dict() for vendor, probe in self.probes.items()},
            "reasons": list(self.reasons),
            "intel": self.intel.to_dict(),
        }
