"""Pick the compose profile from the hardware report: flag > .env > detected.

Each vendor first gets a verdict from the report's facts:
- usable: the host driver works and Docker can hand the GPU over (probe passed, or for
  NVIDIA ``docker info`` lists an nvidia runtime / CDI devices when no probe ran);
- unverified: nothing is known to be wrong but nothing proves it works either (no probe
  image, Docker unreachable, only an AMD APU). Not picked by detection; allowed when forced;
- unusable: something is known to be wrong; the verdict carries the fix;
- absent: no such GPU.
Detection picks NVIDIA, then AMD, then Intel, then CPU. Integrated GPUs (an AMD APU, an
Intel iGPU) share the host's memory: they count only when the user allows it
(``AIRIG_IGPU=on``), and the reasons say so. A forced GPU profile that is unusable or
absent raises ``HardwareError`` with the fix instead of silently running on the CPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from airig.common.errors import ConfigError, HardwareError
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware.amd import hsa_override_for
from airig.launcher.hardware.docker_gpu import NVIDIA_DRIVER_ERROR, PROBE_TIMED_OUT
from airig.launcher.hardware.intel import INTEL_DRIVERS, intel_usable
from airig.launcher.hardware.report import HardwareReport, nvml_visible

PROFILES = ("cpu", "gpu-nvidia", "gpu-amd", "gpu-intel")
PROFILE_VENDOR = {"gpu-nvidia": "nvidia", "gpu-amd": "amd", "gpu-intel": "intel"}
IGPU_OFF = "its memory is the host's: set AIRIG_IGPU=on in .env to use it"
INTEL_FIX = (
    "Load the Intel GPU driver (`sudo modprobe xe` or `i915`; most desktop kernels have it), "
    "add your user to the render group (`sudo usermod -aG render $USER`), then check "
    "`ls -l /dev/dri`."
)
SOURCE_LABELS = {"flag": "--profile", "env": "AIRIG_PROFILE in .env"}

TOOLKIT_FIX = (
    "Install nvidia-container-toolkit, then run `sudo nvidia-ctk runtime configure "
    "--runtime=docker` and `sudo systemctl restart docker`."
)
NVML_FIXES = {
    "library-not-found": "Install the NVIDIA driver (Ubuntu: `sudo ubuntu-drivers install`), "
    "reboot, then check that `nvidia-smi` lists the GPU.",
    "driver-not-loaded": "The NVIDIA kernel module is not loaded: reboot; with Secure Boot on, "
    "enroll the driver's MOK key. Then check `nvidia-smi`.",
    "version-mismatch": "The NVIDIA kernel module and libraries differ (driver updated "
    "without a reboot): reboot, then check `nvidia-smi`.",
    "no-permission": "This user cannot open /dev/nvidia*: check `ls -l /dev/nvidia*` and "
    "`nvidia-smi`.",
    "pynvml-missing": "Install the Python package nvidia-ml-py (`pip install nvidia-ml-py`).",
}
ROCM_FIX = (
    "Install the ROCm kernel driver (`sudo amdgpu-install --usecase=rocm`, or the amdgpu-dkms "
    "package), add your user to the render and video groups (`sudo usermod -aG render,video "
    "$USER`), reboot, then check `ls -l /dev/kfd /dev/dri`."
)
DOCKER_FIX = "Start Docker (`sudo systemctl start docker`) and run `detect` again."
PROBE_TIMEOUT_FIX = (
    "Give the GPU probe longer: set AIRIG_GPU_PROBE_TIMEOUT (seconds, default 120) in .env; "
    "on NVIDIA, persistence mode (`sudo nvidia-smi -pm 1`) makes GPU containers start faster."
)


@dataclass(frozen=True)
class VendorVerdict:
    vendor: str
    status: str  # usable | unverified | unusable | absent
    reasons: tuple[str, ...] = ()
    fix: str | None = None
    # False when detection would not pick the vendor even once fixed (an APU): the fix is
    # then only offered to a user who forces the profile.
    fix_helps_detection: bool = True


@dataclass(frozen=True)
class ProfileDecision:
    profile: str  # cpu | gpu-nvidia | gpu-amd
    source: str  # flag | env | detected
    reasons: list[str]
    fix: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def validate_profile(value: str, source: str) -> str:
    """The profile name, normalised; ConfigError listing the valid names otherwise."""
    profile = value.strip().lower()
    if profile not in PROFILES:
        raise ConfigError(
            f"Unknown profile {value.strip()!r} from {SOURCE_LABELS.get(source, source)}.",
            hint=f"Valid profiles: {', '.join(PROFILES)} (or leave AIRIG_PROFILE empty to detect).",
        )
    return profile


def decide_profile(
    report: HardwareReport,
    flag: str | None = None,
    env_value: str | None = None,
    igpu: bool = False,
) -> ProfileDecision:
    """flag > .env > detected. Raises ConfigError (bad name) or HardwareError (forced, unusable).
    ``igpu``: AIRIG_IGPU=on, integrated GPUs may work."""
    verdicts = assess(report, igpu)
    for value, source in ((flag, "flag"), (env_value, "env")):
        if value is not None and value.strip():
            return forced(validate_profile(value, source), source, verdicts, report)
    return detected(verdicts, report)


def assess(report: HardwareReport, igpu: bool = False) -> dict[str, VendorVerdict]:
    return {
        "nvidia": assess_nvidia(report),
        "amd": assess_amd(report, igpu),
        "intel": assess_intel(report, igpu),
    }


def forced(
    profile: str, source: str, verdicts: dict[str, VendorVerdict], report: HardwareReport
) -> ProfileDecision:
    label = SOURCE_LABELS[source]
    if profile == "cpu":
        return ProfileDecision("cpu", source, [f"cpu requested by {label}", *report.reasons])
    verdict = verdicts[PROFILE_VENDOR[profile]]
    if verdict.status == "absent":
        raise HardwareError(
            f"{profile} was requested by {label}, but no {verdict.vendor.upper()} GPU was found.",
            hint="Use --profile cpu, or leave AIRIG_PROFILE empty to detect the hardware.",
        )
    if verdict.status == "unusable":
        raise HardwareError(
            f"{profile} was requested by {label}, but {verdict.reasons[0]}",
            hint=verdict.fix or "",  # every unusable verdict of assess_* carries its fix
        )
    reasons = [f"{profile} requested by {label}", *verdict.reasons, *report.reasons]
    return ProfileDecision(profile, source, reasons, verdict.fix)


def detected(verdicts: dict[str, VendorVerdict], report: HardwareReport) -> ProfileDecision:
    """NVIDIA > AMD > Intel > CPU; the reasons of every GPU vendor present are kept."""
    order = [
        ("gpu-nvidia", verdicts["nvidia"]),
        ("gpu-amd", verdicts["amd"]),
        ("gpu-intel", verdicts["intel"]),
    ]
    chosen = next((p for p, v in order if v.status == "usable"), "cpu")
    reasons = [reason for _, verdict in order for reason in verdict.reasons]
    if chosen == "cpu" and all(v.status == "absent" for _, v in order):
        reasons.insert(0, "no NVIDIA, AMD or Intel GPU found")
    fix = None
    if chosen == "cpu":
        fixes = [v.fix for _, v in order if v.fix and v.fix_helps_detection]
        fix = fixes[0] if fixes else None
    return ProfileDecision(chosen, "detected", [*reasons, *report.reasons], fix)


def assess_nvidia(report: HardwareReport) -> VendorVerdict:
    gpus = report.gpus_of("nvidia")
    if not gpus:
        return VendorVerdict("nvidia", "absent")
    found = f"NVIDIA GPU found ({describe(gpus)})"
    nvml = report.nvml
    if not nvml.available:
        bound = kernel_drivers(gpus)
        reason = f"{found} but NVML failed: {nvml.error}{bound}"
        return VendorVerdict("nvidia", "unusable", (reason,), nvml_fix(nvml.error_kind))
    if not nvml.gpus:
        reason = f"{found} but NVML lists no GPU"
        return VendorVerdict("nvidia", "unusable", (reason,), NVML_FIXES["library-not-found"])
    visible = [gpu for gpu in gpus if nvml_visible(gpu)]  # the others are in report.reasons
    host = f"NVIDIA driver {nvml.driver_version}, {len(nvml.gpus)} GPU(s) ({describe(visible)})"
    return docker_verdict("nvidia", host, report)


def nvml_fix(kind: str | None) -> str:
    return NVML_FIXES.get(kind or "", "Check that `nvidia-smi` works on the host.")


def docker_verdict(vendor: str, host: str, report: HardwareReport) -> VendorVerdict:
    """The verdict once the host side is ready: the probe decides, docker info hints."""
    probe = report.probe(vendor)
    if probe.passed:
        return VendorVerdict(vendor, "usable", (f"{host}; Docker probe passed ({probe.image})",))
    if probe.failed:
        reason = f"{host}, but Docker cannot start a container with it: {probe.detail}"
        return VendorVerdict(vendor, "unusable", (reason,), probe_fix(vendor, probe.detail))
    if not report.docker.reachable:
        reason = f"{host}; GPU access from containers not verified: Docker not reachable"
        return VendorVerdict(vendor, "unverified", (reason,), DOCKER_FIX)
    if vendor in ("amd", "intel"):  # plain device mapping, no runtime needed
        return VendorVerdict(
            vendor, "usable", (f"{host}; devices present (not probed: {probe.detail})",)
        )
    if report.docker.nvidia_hint:
        reason = f"{host}; Docker lists the nvidia runtime/CDI devices (not probed: {probe.detail})"
        return VendorVerdict(vendor, "usable", (reason,))
    reason = f"{host}, but no nvidia runtime in docker info and no probe ({probe.detail})"
    return VendorVerdict(vendor, "unverified", (reason,), TOOLKIT_FIX)


def probe_fix(vendor: str, detail: str) -> str:
    if PROBE_TIMED_OUT in detail:
        return PROBE_TIMEOUT_FIX
    if vendor == "nvidia" and NVIDIA_DRIVER_ERROR in detail:
        return TOOLKIT_FIX
    if vendor == "nvidia":
        return (
            "Run `docker run --rm --gpus all <image> nvidia-smi` to see the NVIDIA container "
            "toolkit's error; reboot after a driver update, or reinstall nvidia-container-toolkit."
        )
    return (
        "Check that `docker run --rm --device /dev/kfd --device /dev/dri <image> true` works; "
        + ROCM_FIX
    )


def assess_amd(report: HardwareReport, igpu: bool = False) -> VendorVerdict:
    gpus = report.gpus_of("amd")
    amd = report.amd
    if not gpus and not amd.kfd_present:
        return VendorVerdict("amd", "absent")
    found = f"AMD GPU found ({describe(gpus) or 'via /dev/kfd'})"
    if gpus and all(gpu.kind == "integrated" for gpu in gpus) and igpu:
        found += ": integrated (APU), used: AIRIG_IGPU=on"
    elif gpus and all(gpu.kind == "integrated" for gpu in gpus):
        reason = f"{found}: integrated only (APU), not picked (ROCm support is limited)"
        if amd.kfd_present and amd.render_nodes:
            return VendorVerdict("amd", "unverified", (reason,), None)
        return VendorVerdict("amd", "unusable", (reason,), ROCM_FIX, fix_helps_detection=False)
    if not amd.kfd_present:
        reason = f"{found} but /dev/kfd is missing: the ROCm kernel driver is not loaded"
        return VendorVerdict("amd", "unusable", (reason + kernel_drivers(gpus),), ROCM_FIX)
    if not amd.render_nodes:
        reason = f"{found} but /dev/dri/renderD* is missing"
        return VendorVerdict("amd", "unusable", (reason,), ROCM_FIX)
    verdict = docker_verdict(
        "amd",
        f"{found}, /dev/kfd and {len(amd.render_nodes)} render node(s), GIDs {list(amd.gids)}",
        report,
    )
    return VendorVerdict("amd", verdict.status, verdict.reasons + override_notes(gpus), verdict.fix)


def assess_intel(report: HardwareReport, igpu: bool = False) -> VendorVerdict:
    """Intel GPUs: bound to i915/xe with a render node in /dev/dri; integrated ones only
    with AIRIG_IGPU=on. No probe: a plain device mapping, like AMD's."""
    gpus = report.gpus_of("intel")
    if not gpus:
        return VendorVerdict("intel", "absent")
    found = f"Intel GPU found ({describe(gpus)})"
    ready = [gpu for gpu in gpus if intel_usable(gpu, report.intel)]
    wanted = [gpu for gpu in ready if gpu.kind != "integrated" or igpu]
    notes = tuple(
        f"Intel integrated GPU at {gpu.pci_address} not used: {IGPU_OFF}"
        for gpu in ready
        if gpu not in wanted
    )
    if not ready:
        bound = kernel_drivers(gpus)
        reason = (
            f"{found} but none is bound to {' or '.join(INTEL_DRIVERS)} with a render node "
            f"in /dev/dri{bound}"
        )
        discrete = any(g.kind != "integrated" for g in gpus)
        return VendorVerdict("intel", "unusable", (reason,), INTEL_FIX, discrete)
    if not wanted:  # forced, it is refused with the opt-in as its fix
        return VendorVerdict("intel", "unusable", notes, "Set AIRIG_IGPU=on in .env.",
                             fix_helps_detection=False)  # fmt: skip
    kinds = ", ".join(sorted({f"{g.kernel_driver} {g.render_node}" for g in wanted}))
    host = f"{found}, {kinds}, GIDs {list(report.intel.gids)}"
    if any(gpu.kind == "integrated" for gpu in wanted):
        host += " (integrated used: AIRIG_IGPU=on)"
    verdict = docker_verdict("intel", host, report)
    return VendorVerdict("intel", verdict.status, verdict.reasons + notes, verdict.fix)


def override_notes(gpus: list[GpuInfo]) -> tuple[str, ...]:
    notes = []
    for gpu in gpus:
        override = hsa_override_for(gpu.gfx_target)
        if override:
            notes.append(f"{gpu.gfx_target} needs HSA_OVERRIDE_GFX_VERSION={override} in .env")
    return tuple(dict.fromkeys(notes))


def describe(gpus: list[GpuInfo]) -> str:
    """ "3x NVIDIA GeForce GTX 1060 6GB, 2x NVIDIA GeForce RTX 3060" """
    counts: dict[str, int] = {}
    for gpu in gpus:
        counts[gpu.name] = counts.get(gpu.name, 0) + 1
    return ", ".join(f"{n}x {name}" if n > 1 else name for name, n in counts.items())


def kernel_drivers(gpus: list[GpuInfo]) -> str:
    drivers = sorted({gpu.kernel_driver or "none" for gpu in gpus})
    return f" (kernel driver bound: {', '.join(drivers)})"
