"""One GPU as the launcher knows it: the fact both detection (``hardware/``) and the image
choice (``images/``) read. Plain data, below both, so neither imports the other for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class GpuInfo:
    """One GPU, merged from PCI sysfs, NVML (NVIDIA) and KFD/amdsmi (AMD)."""

    vendor: str  # nvidia | amd | intel
    name: str
    kind: str  # discrete | integrated | unknown
    kind_basis: str = ""
    pci_address: str | None = None
    kernel_driver: str | None = None
    index: int | None = None  # NVML index (CUDA_VISIBLE_DEVICES order may differ)
    vram_total_bytes: int | None = None
    vram_free_bytes: int | None = None
    driver_version: str | None = None
    compute_capability: str | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    utilization_pct: int | None = None
    gfx_target: str | None = None
    render_node: str | None = None

    @property
    def integrated(self) -> bool:
        """Memory shared with the host (an APU, an Intel GPU on the root bus): such a GPU
        does work only with AIRIG_IGPU=on (``amd_sysfs.host_order``, ``profile_gpus``)."""
        return self.kind == "integrated"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
