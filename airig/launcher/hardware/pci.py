"""Display devices on the PCI bus, read from sysfs.

Only PCI class 0x03 (display controller: 0x0300 VGA, 0x0302 3D, 0x0380 other) is
considered, so a GPU's HDMI audio function (class 0x0403) never counts as a second GPU.
Vendors other than NVIDIA, AMD and Intel (ASPEED and Matrox BMC chips, virtual display
adapters) are kept as ``vendor == "other"``: they drive a console, not compute.

Integrated vs discrete is a heuristic, and ``kind_basis`` says which rule decided:
- NVIDIA: always discrete (PCI NVIDIA display devices are add-in cards).
- Intel: integrated when on root bus 00 (the iGPU sits at 0000:00:02.0); Arc cards sit
  behind a PCIe bridge on another bus, so they count as discrete.
- AMD: amdgpu's ``mem_info_vram_total`` holds the dedicated VRAM; an APU only has a
  BIOS carve-out, usually 512 MiB to 2 GiB, so <= 2 GiB counts as integrated. When
  amdgpu is not bound the file is absent and the kind is "unknown". The AMD module
  refines this with the KFD topology (an APU node has CPU cores and SIMDs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# the sysfs readers both sides share: the worker reads the same files for its VRAM
from airig.common.amd_sysfs import APU_VRAM_LIMIT, read_hex, read_int
from airig.common.amd_sysfs import normalize_address as normalize_address

DISPLAY_CLASS = 0x03
GPU_VENDORS = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel"}
# Names for the non-GPU display chips users meet most, so the report can say what it saw.
OTHER_VENDOR_NAMES = {
    0x1A03: "ASPEED (server BMC)",
    0x102B: "Matrox (server BMC)",
    0x19E5: "Huawei iBMC",
    0x1234: "QEMU/Bochs virtual display",
    0x1AF4: "virtio GPU",
    0x15AD: "VMware SVGA",
    0x1013: "Cirrus Logic (virtual)",
    0x80EE: "VirtualBox",
    0x1414: "Microsoft Hyper-V",
}


@dataclass(frozen=True)
class PciDisplayDevice:
    """One PCI display-class function."""

    address: str  # "0000:01:00.0"
    vendor_id: int
    device_id: int
    class_code: int
    vendor: str  # nvidia | amd | intel | other
    kind: str  # discrete | integrated | unknown (for vendor "other": not-a-gpu)
    kind_basis: str
    kernel_driver: str | None  # nvidia, nouveau, amdgpu, i915, xe, vfio-pci, ...
    boot_vga: bool | None
    vram_total_bytes: int | None
    vram_used_bytes: int | None
    # the board maker's ids (a Sapphire RX 7900 XTX: 0x1da2 / 0x471e), for pci.ids names
    subsystem_vendor_id: int | None = None
    subsystem_device_id: int | None = None
    # its DRM render node ("renderD129", sysfs drm/), when its kernel driver made one
    render_node: str | None = None

    @property
    def vendor_name(self) -> str:
        if self.vendor != "other":
            return {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}[self.vendor]
        return OTHER_VENDOR_NAMES.get(self.vendor_id, f"vendor 0x{self.vendor_id:04x}")

    def to_dict(self) -> dict[str, object]:
        return {
            "address": self.address,
            "vendor": self.vendor,
            "vendor_name": self.vendor_name,
            "vendor_id": f"0x{self.vendor_id:04x}",
            "device_id": f"0x{self.device_id:04x}",
            "class": f"0x{self.class_code:06x}",
            "kind": self.kind,
            "kind_basis": self.kind_basis,
            "kernel_driver": self.kernel_driver,
            "boot_vga": self.boot_vga,
            "vram_total_bytes": self.vram_total_bytes,
            "vram_used_bytes": self.vram_used_bytes,
            "subsystem_vendor_id": hex4(self.subsystem_vendor_id),
            "subsystem_device_id": hex4(self.subsystem_device_id),
            "render_node": self.render_node,
        }


def scan_pci(sysfs_root: Path = Path("/sys")) -> list[PciDisplayDevice]:
    """Every display-class PCI function under ``sysfs_root/bus/pci/devices``, by address."""
    devices_dir = Path(sysfs_root) / "bus" / "pci" / "devices"
    if not devices_dir.is_dir():
        return []
    found = []
    for device_dir in sorted(devices_dir.iterdir()):
        device = read_display_device(device_dir)
        if device is not None:
            found.append(device)
    return found


def read_display_device(device_dir: Path) -> PciDisplayDevice | None:
    """The display device in one sysfs PCI directory, or None for any other class."""
    class_code = read_hex(device_dir / "class")
    if class_code is None or class_code >> 16 != DISPLAY_CLASS:
        return None
    vendor_id = read_hex(device_dir / "vendor") or 0
    vendor = GPU_VENDORS.get(vendor_id, "other")
    address = normalize_address(device_dir.name)
    vram_total = read_int(device_dir / "mem_info_vram_total")
    kind, basis = classify(vendor, address, vram_total)
    boot_vga = read_int(device_dir / "boot_vga")
    return PciDisplayDevice(
        address=address,
        vendor_id=vendor_id,
        device_id=read_hex(device_dir / "device") or 0,
        class_code=class_code,
        vendor=vendor,
        kind=kind,
        kind_basis=basis,
        kernel_driver=driver_name(device_dir),
        boot_vga=None if boot_vga is None else bool(boot_vga),
        vram_total_bytes=vram_total,
        vram_used_bytes=read_int(device_dir / "mem_info_vram_used"),
        subsystem_vendor_id=read_hex(device_dir / "subsystem_vendor"),
        subsystem_device_id=read_hex(device_dir / "subsystem_device"),
        render_node=render_node_of(device_dir),
    )


def render_node_of(device_dir: Path) -> str | None:
    """The device's DRM render node: the ``renderD*`` entry of its sysfs ``drm/`` folder
    (the kernel's drm_sysfs: one per device its driver registered; none without a driver)."""
    nodes = sorted(p.name for p in (device_dir / "drm").glob("renderD*"))
    return nodes[0] if nodes else None


def classify(vendor: str, address: str, vram_total: int | None) -> tuple[str, str]:
    """(kind, the rule that decided it); see the module docstring."""
    if vendor == "other":
        return "not-a-gpu", "display chip without compute support"
    if vendor == "nvidia":
        return "discrete", "NVIDIA PCI display devices are add-in cards"
    if vendor == "intel":
        if pci_bus(address) == 0:
            return "integrated", "Intel GPU on root bus 00"
        return "discrete", "Intel GPU behind a PCIe bridge (Arc)"
    if vram_total is None:
        return "unknown", "amdgpu not bound: VRAM size unreadable"
    if vram_total <= APU_VRAM_LIMIT:
        return "integrated", f"VRAM {vram_total // 1024**2} MiB <= 2 GiB (APU carve-out)"
    return "discrete", f"VRAM {vram_total // 1024**3} GiB dedicated"


def pci_bus(address: str) -> int | None:
    """The bus number of "dddd:bb:dd.f", or None when the name is not a PCI address."""
    parts = address.split(":")
    try:
        return int(parts[-2], 16)
    except (IndexError, ValueError):
        return None


def driver_name(device_dir: Path) -> str | None:
    link = device_dir / "driver"
    try:
        return os.path.basename(os.readlink(link))
    except OSError:
        return None


def hex4(value: int | None) -> str | None:
    return None if value is None else f"0x{value:04x}"
