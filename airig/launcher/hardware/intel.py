"""Intel GPUs: what a container needs of the host, from sysfs and /dev.

An Intel GPU is a PCI display function of vendor 0x8086 (``pci.py``) bound to ``i915`` or
``xe``, the two kernel drivers that give it a DRM render node
(``/sys/bus/pci/devices/<address>/drm/renderD*``, the same name under ``/dev/dri``).
Containers reach it through that node alone: Ollama's Vulkan runner (Mesa's ANV) and
yanwk's ``xpu`` ComfyUI (its README runs it with ``--device=/dev/dri``) need no other
device and no runtime. Images that do not run as root need the numeric GID owning the
node (`render` on most hosts), as on AMD.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware.amd import owner_gid

# The kernel drivers that expose an Intel GPU's render node (i915: Gen and Alchemist;
# xe: the newer driver, Lunar Lake and Battlemage on, Alchemist optionally)
INTEL_DRIVERS = ("i915", "xe")


@dataclass(frozen=True)
class IntelHost:
    """The host side of an Intel GPU container: the render nodes /dev has for the Intel
    GPUs detection found, and the GIDs owning them."""

    render_nodes: tuple[str, ...] = ()
    gids: tuple[int, ...] = ()  # sorted, each once

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scan_intel(gpus: list[GpuInfo], dev_root: Path) -> IntelHost:
    """The Intel GPUs' render nodes present under ``dev_root/dri``, with their owners."""
    nodes = [
        gpu.render_node
        for gpu in gpus
        if gpu.vendor == "intel"
        and gpu.render_node
        and (Path(dev_root) / "dri" / gpu.render_node).exists()
    ]
    gids = {owner_gid(Path(dev_root) / "dri" / node) for node in nodes}
    return IntelHost(tuple(nodes), tuple(sorted(g for g in gids if g is not None)))


def intel_usable(gpu: GpuInfo, host: IntelHost) -> bool:
    """An Intel GPU a container can use: bound to i915/xe, its render node in /dev."""
    return (
        gpu.vendor == "intel"
        and gpu.kernel_driver in INTEL_DRIVERS
        and gpu.render_node is not None
        and gpu.render_node in host.render_nodes
    )
