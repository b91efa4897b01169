"""Rich rendering of a hardware report and the profile decision (`start_services.py detect`)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware.decide import ProfileDecision
from airig.launcher.hardware.report import HardwareReport


def render_table(
    report: HardwareReport, console: Console, decision: ProfileDecision | None = None
) -> None:
    """GPUs as a table, then Docker's GPU support, the probes and the decision."""
    console.print(gpu_table(report))
    docker = report.docker
    if docker.reachable:
        runtimes = ", ".join(docker.runtimes) or "none"
        cdi = ", ".join(docker.cdi_devices) or "none"
        console.print(f"Docker runtimes: {runtimes}; CDI devices: {cdi}", markup=False)
    else:
        console.print(
            f"Docker: [yellow]not reachable[/] ({escape(str(docker.error))})", markup=True
        )
    for vendor, probe in report.probes.items():
        style = {"passed": "green", "failed": "red"}.get(probe.status, "yellow")
        console.print(
            f"Probe {vendor}: [{style}]{probe.status}[/] - {escape(probe.detail)}", markup=True
        )
    if decision is not None:
        render_decision(decision, console)


def gpu_table(report: HardwareReport) -> Table:
    table = Table(title="GPUs")
    for column in ("Vendor", "Name", "Kind", "PCI", "VRAM", "Driver", "Details"):
        table.add_column(column)
    rows = [
        (
            gpu.vendor,
            gpu.name,
            gpu.kind,
            gpu.pci_address or "-",
            vram(gpu),
            gpu.driver_version or gpu.kernel_driver or "-",
            details(gpu),
        )
        for gpu in report.gpus
    ]
    rows += [
        ("other", device.vendor_name, "not a GPU", device.address, "-",
         device.kernel_driver or "-", "ignored")
        for device in report.other_display
    ]  # fmt: skip
    for row in rows:
        # Names come from drivers and firmware: Text cells, never read as markup.
        table.add_row(*(Text(cell) for cell in row))
    if not table.rows:
        table.add_row("-", "no display devices found", "", "", "", "", "")
    return table


def render_decision(decision: ProfileDecision, console: Console) -> None:
    console.print(f"Profile: [bold]{escape(decision.profile)}[/] (from {decision.source})")
    for reason in decision.reasons:
        console.print(f"  - {reason}", markup=False, highlight=False)
    if decision.fix:
        console.print(f"  Fix: {decision.fix}", markup=False, highlight=False)


def vram(gpu: GpuInfo) -> str:
    if gpu.vram_total_bytes is None:
        return "-"
    total = gpu.vram_total_bytes / 1024**3
    if gpu.vram_free_bytes is None:
        return f"{total:.1f} GiB"
    return f"{gpu.vram_free_bytes / 1024**3:.1f}/{total:.1f} GiB free"


def details(gpu: GpuInfo) -> str:
    parts = []
    if gpu.compute_capability:
        parts.append(f"sm {gpu.compute_capability}")
    if gpu.gfx_target:
        parts.append(gpu.gfx_target)
    if gpu.temperature_c is not None:
        parts.append(f"{gpu.temperature_c}°C")
    if gpu.power_w is not None:
        parts.append(f"{gpu.power_w} W")
    if gpu.utilization_pct is not None:
        parts.append(f"{gpu.utilization_pct}% busy")
    return ", ".join(parts) or "-"
