"""Fixture hosts for GPUs that CUDA and ROCm images do not serve: Intel GPUs (a render node
under sysfs ``drm/`` and /dev/dri, as the kernel's drm_sysfs makes it) and the Radeon
780M APU. Built on ``hardware_fakes.FakeHost``; shared by the unit and compose tests."""

from __future__ import annotations

from hardware_fakes import GIB, FakeHost

INTEL, AMD = 0x8086, 0x1002
RENDER_GID = 993  # `render` on a Debian/Ubuntu host


def intel_gpu(host: FakeHost, address: str, device: int, driver: str | None, render: str) -> None:
    """An Intel display function; with a driver, its DRM render node in sysfs and /dev."""
    host.pci(address, INTEL, device, driver=driver)
    if driver:
        (host.sys / "bus" / "pci" / "devices" / address / "drm" / render).mkdir(parents=True)
        host.dev_node(f"dri/{render}", RENDER_GID)


def arc_a770(host: FakeHost, driver: str = "xe") -> None:
    intel_gpu(host, "0000:03:00.0", 0x56A0, driver, "renderD129")


def alder_lake_igpu(host: FakeHost) -> None:
    intel_gpu(host, "0000:00:02.0", 0x4680, "i915", "renderD128")


def radeon_780m(host: FakeHost) -> None:
    """Phoenix APU: the KFD node has CPU cores (an APU), gfx1103, a 512 MiB carve-out."""
    host.pci("0000:c5:00.0", AMD, 0x15BF, driver="amdgpu", vram=512 * 1024**2, vram_used=GIB // 4)
    host.kfd_node(0, cpu_cores_count=16, simd_count=0)
    host.kfd_node(1, cpu_cores_count=16, simd_count=24, gfx_target_version=110003,
                  location_id=0xC5 << 8, domain=0, drm_render_minor=128)  # fmt: skip
    host.amd_nodes()
