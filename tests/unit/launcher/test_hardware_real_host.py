"""``detect()`` against this machine's real /sys, /dev and NVML (CI hosts have no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airig.launcher.hardware import decide_profile, detect


def host_has_gpu() -> bool:
    """Checked without airig's code, so the skip does not depend on what is under test."""
    if any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd")):
        return True
    for vendor_file in Path("/sys/bus/pci/devices").glob("*/vendor"):
        klass = (vendor_file.parent / "class").read_text().strip()
        if klass.startswith("0x03") and vendor_file.read_text().strip() in ("0x10de", "0x1002"):
            return True
    return False


@pytest.mark.skipif(host_has_gpu(), reason="this host has an NVIDIA/AMD GPU: cpu is not expected")
def test_real_gpu_less_host_decides_cpu() -> None:
    # Docker is left out (None): the decision on a GPU-less host never needs a probe.
    report = detect(docker_client=None)
    decision = decide_profile(report, None, None)
    assert decision.profile == "cpu" and decision.source == "detected"
    assert decision.fix is None
    assert report.gpus_of("nvidia") == [] and report.gpus_of("amd") == []
    assert all(probe.status == "not run" for probe in report.probes.values())
