"""One ``GpuInfo`` per GPU, merged from PCI sysfs, NVML and the KFD topology by PCI address."""

from __future__ import annotations

from dataclasses import replace

from airig.hardware.amd import AmdHost, KfdNode
from airig.hardware.nvidia import NvmlGpu, NvmlResult
from airig.hardware.pci import PciDisplayDevice
from airig.hardware.report import GpuInfo


def merge_gpus(
    pci: list[PciDisplayDevice], nvml_result: NvmlResult, amd_host: AmdHost
) -> list[GpuInfo]:
    """PCI GPUs enriched by NVML / KFD, plus GPUs those saw that sysfs did not (WSL2 shows
    NVML GPUs without a PCI sysfs entry)."""
    nvml_by_address = {gpu.pci_address: gpu for gpu in nvml_result.gpus}
    nodes_by_address = {node.pci_address: node for node in amd_host.nodes}
    gpus = []
    for device in pci:
        if device.vendor == "nvidia":
            nvml_gpu = nvml_by_address.get(device.address)
            gpus.append(nvidia_gpu(device, nvml_gpu, nvml_result.driver_version))
        elif device.vendor == "amd":
            name = amd_host.smi_names.get(device.address)
            gpus.append(amd_gpu(device, nodes_by_address.get(device.address), name))
        elif device.vendor == "intel":
            gpus.append(pci_gpu(device, f"Intel GPU 0x{device.device_id:04x}"))
    on_pci = {device.address for device in pci}
    for nvml_gpu in nvml_result.gpus:
        if nvml_gpu.pci_address not in on_pci:
            gpus.append(nvidia_gpu(None, nvml_gpu, nvml_result.driver_version))
    for node in amd_host.nodes:
        if node.pci_address not in on_pci:
            gpus.append(kfd_only_gpu(node))
    return gpus


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
    device: PciDisplayDevice | None, nvml_gpu: NvmlGpu | None, driver_version: str | None
) -> GpuInfo:
    """At least one of ``device`` and ``nvml_gpu`` is given."""
    if nvml_gpu is None:
        assert device is not None  # caller contract: one of the two is given
        return pci_gpu(device, f"NVIDIA GPU 0x{device.device_id:04x}")
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
    gpu = pci_gpu(device, name or f"AMD GPU 0x{device.device_id:04x}")
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
