"""One ``GpuInfo`` per GPU, merged from PCI sysfs, NVML and the KFD topology by PCI address.

Names: NVML's (NVIDIA) and amdsmi's (AMD) when they know the card, else the host's PCI ID
database (``pci.ids``, what ``lspci`` prints), else the vendor and the PCI device id.
"""

from __future__ import annotations

from dataclasses import replace

from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware.amd import AmdHost, KfdNode
from airig.launcher.hardware.nvidia import NvmlGpu, NvmlResult
from airig.launcher.hardware.pci import PciDisplayDevice
from airig.launcher.hardware.pciids import PciIds


def merge_gpus(
    pci: list[PciDisplayDevice],
    nvml_result: NvmlResult,
    amd_host: AmdHost,
    pci_ids: PciIds | None = None,
) -> list[GpuInfo]:
    """PCI GPUs enriched by NVML / KFD, plus GPUs those saw that sysfs did not (WSL2 shows
    NVML GPUs without a PCI sysfs entry). ``pci_ids`` names the cards those do not."""
    nvml_by_address = {gpu.pci_address: gpu for gpu in nvml_result.gpus}
    nodes_by_address = {node.pci_address: node for node in amd_host.nodes}
    gpus = []
    for device in pci:
        if device.vendor == "nvidia":
            nvml_gpu = nvml_by_address.get(device.address)
            gpus.append(nvidia_gpu(device, nvml_gpu, nvml_result.driver_version, pci_ids))
        elif device.vendor == "amd":
            name = amd_host.smi_names.get(device.address) or pci_name(device, pci_ids)
            gpus.append(amd_gpu(device, nodes_by_address.get(device.address), name))
        elif device.vendor == "intel":  # its render node from sysfs (no KFD for Intel)
            gpu = pci_gpu(device, pci_name(device, pci_ids))
            gpus.append(replace(gpu, render_node=device.render_node))
    on_pci = {device.address for device in pci}
    for nvml_gpu in nvml_result.gpus:
        if nvml_gpu.pci_address not in on_pci:
            gpus.append(nvidia_gpu(None, nvml_gpu, nvml_result.driver_version))
    for node in amd_host.nodes:
        if node.pci_address not in on_pci:
            gpus.append(kfd_only_gpu(node))
    return gpus


def pci_name(device: PciDisplayDevice, pci_ids: PciIds | None) -> str:
    """What lspci calls the card, after the vendor's short name ("AMD Navi 31 [Radeon RX
    7900 XT/7900 XTX/7900 GRE/7900M]"); "AMD GPU 0x744c" when no database lists it."""
    found = None
    if pci_ids is not None:
        found = pci_ids.name(
            device.vendor_id,
            device.device_id,
            device.subsystem_vendor_id,
            device.subsystem_device_id,
        )
    vendor = device.vendor_name
    if not found:
        return f"{vendor} GPU 0x{device.device_id:04x}"
    return found if found.startswith(f"{vendor} ") else f"{vendor} {found}"


def pci_gpu(device: PciDisplayDevice, name: str) -> GpuInfo:
    return GpuInfo(
        vendor=device.vendor,
        name=name,
        kind=device.kind,
        kind_basis=device.kind_basis,
        pci_address=device.address,
        kernel_driver=device.kernel_driver,
        vram_total_bytes=device.vram_total_bytes,
    )


def nvidia_gpu(
    device: PciDisplayDevice | None,
    nvml_gpu: NvmlGpu | None,
    driver_version: str | None,
    pci_ids: PciIds | None = None,
) -> GpuInfo:
    """At least one of ``device`` and ``nvml_gpu`` is given."""
    if nvml_gpu is None:
        assert device is not None  # caller contract: one of the two is given
        return pci_gpu(device, pci_name(device, pci_ids))
    return GpuInfo(
        vendor="nvidia",
        name=nvml_gpu.name,
        kind="discrete",
        kind_basis=device.kind_basis if device else "reported by NVML only (no PCI sysfs entry)",
        pci_address=nvml_gpu.pci_address,
        kernel_driver=device.kernel_driver if device else None,
        index=nvml_gpu.index,
        vram_total_bytes=nvml_gpu.vram_total_bytes,
        vram_free_bytes=nvml_gpu.vram_free_bytes,
        driver_version=driver_version,
        compute_capability=nvml_gpu.compute_capability,
        temperature_c=nvml_gpu.temperature_c,
        power_w=nvml_gpu.power_w,
        utilization_pct=nvml_gpu.utilization_pct,
    )


def amd_gpu(device: PciDisplayDevice, node: KfdNode | None, name: str | None) -> GpuInfo:
    gpu = pci_gpu(device, name or pci_name(device, None))
    if device.vram_total_bytes is not None and device.vram_used_bytes is not None:
        gpu = replace(gpu, vram_free_bytes=device.vram_total_bytes - device.vram_used_bytes)
    return with_kfd(gpu, node) if node is not None else gpu


def kfd_only_gpu(node: KfdNode) -> GpuInfo:
    gpu = GpuInfo(
        "amd",
        f"AMD GPU {node.gfx_target or ''}".strip(),
        "unknown",
        "KFD topology only",
        pci_address=node.pci_address,
    )
    return with_kfd(gpu, node)


def with_kfd(gpu: GpuInfo, node: KfdNode) -> GpuInfo:
    gpu = replace(gpu, gfx_target=node.gfx_target, render_node=node.render_node)
    if node.is_apu:  # KFD folds an APU's CPU cores and SIMDs into one node
        gpu = replace(gpu, kind="integrated", kind_basis="KFD node has CPU cores (APU)")
    return gpu
