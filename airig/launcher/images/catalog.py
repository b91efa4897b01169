"""02-compute/images.yaml: which image variants exist and what each needs, and the rules
that say whether a variant can run on a GPU (driver floor, SASS/PTX targets, gfx targets).

The facts live in the YAML file, each with its upstream source; this module only reads
them and applies the CUDA/ROCm compatibility rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from airig.common.errors import ConfigError
from airig.launcher.gpu_info import GpuInfo

CATALOG_FILE = Path("02-compute") / "images.yaml"
SERVICES = ("ollama", "comfyui", "whisper")
LABEL = {"ollama": "Ollama", "comfyui": "ComfyUI", "whisper": "Whisper"}
# The .env variable compose reads for each (service, variant). Ollama's CPU and NVIDIA
# services run the same image; speaches has no ROCm build, so gpu-amd runs the CPU image.
VARIABLE = {
    ("ollama", "cpu"): "OLLAMA_IMAGE",
    ("ollama", "nvidia"): "OLLAMA_IMAGE",
    ("ollama", "amd"): "OLLAMA_IMAGE_ROCM",
    ("ollama", "vulkan"): "OLLAMA_IMAGE_VULKAN",
    ("comfyui", "cpu"): "COMFYUI_IMAGE_CPU",
    ("comfyui", "nvidia"): "COMFYUI_IMAGE_NVIDIA",
    ("comfyui", "amd"): "COMFYUI_IMAGE_AMD",
    ("comfyui", "intel"): "COMFYUI_IMAGE_INTEL",
    ("whisper", "cpu"): "WHISPER_IMAGE_CPU",
    ("whisper", "nvidia"): "WHISPER_IMAGE_CUDA",
}
VENDOR_OF_PROFILE = {"gpu-nvidia": "nvidia", "gpu-amd": "amd", "gpu-intel": "intel"}
# The GPU lists of each service: per vendor, and Vulkan (any vendor Mesa drives)
GPU_LISTS = ("nvidia", "amd", "intel", "vulkan")
# What each list's images run on (the .env override names the first four: OLLAMA_BACKEND=…)
BACKEND_OF = {"nvidia": "cuda", "amd": "rocm", "vulkan": "vulkan", "intel": "xpu"}
BACKENDS = ("auto", "cuda", "rocm", "vulkan", "cpu")


@dataclass(frozen=True)
class EnvRule:
    """Settings a variant needs on some GPUs (``capabilities`` as ``archs``: "12.0" is any
    12.x): speaches' CTranslate2 4.5.0 refuses int8 on compute capability 12.x, so Whisper
    runs float16 there. ``env`` goes to host.env; ``why`` is said by `detect`."""

    capabilities: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    why: str
    source: str = ""

    def applies(self, gpu: GpuInfo) -> bool:
        capability = gpu.compute_capability
        return bool(capability) and capability_fits(capability or "", self.capabilities, None)


@dataclass(frozen=True)
class Variant:
    image: str
    min_driver: str | None = None
    # older driver branches the image also accepts ("535": any 535.x; "525.60.13": 525.x
    # from 525.60.13): the nvidia/cuda base's NVIDIA_REQUIRE_CUDA brand exceptions
    driver_branches: tuple[str, ...] = ()
    archs: tuple[str, ...] = ()  # compute capabilities with SASS kernels ("6.0", "12.0")
    ptx: str | None = None  # a PTX target the driver can JIT to any newer capability
    gfx: tuple[str, ...] = ()  # AMD targets the ROCm build carries
    args: str = ""  # flags the variant needs (the CPU ComfyUI needs --cpu)
    # AMD targets upstream advises this tag for: chosen for them before the list's order
    advised_for: tuple[str, ...] = ()
    # the lowest compute capability the variant serves (Ollama 0.30: CC 5.0-6.2 need a
    # newer driver than 7.0+, so one tag is two entries with two floors)
    min_capability: str | None = None
    archived: bool = False  # upstream stopped rebuilding the tag: taken after maintained ones
    env_rules: tuple[EnvRule, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # settings the variant always needs (OLLAMA_VULKAN=1)
    kinds: tuple[str, ...] = ()  # GPU kinds upstream lists it for (xpu: discrete); () = any
    base: str = ""  # a kit-built image: the upstream image it is built on
    build: str = ""  # ... and its build context, relative to 02-compute/
    source: str = ""

    def env_for(self, gpus: list[GpuInfo]) -> tuple[dict[str, str], list[str]]:
        """The settings this variant needs on ``gpus``, and why (one phrase per rule)."""
        env: dict[str, str] = {}
        why: list[str] = []
        for rule in self.env_rules:
            if any(rule.applies(gpu) for gpu in gpus):
                env.update(rule.env)
                why.append(rule.why)
        return env, why

    def needs(self) -> str:
        """What this variant needs, in words, for a refusal or a warning."""
        parts = []
        if self.min_driver:
            branches = "".join(f" or {branch_words(b)}" for b in self.driver_branches)
            parts.append(f"driver ≥ {self.min_driver}{branches}")
        if self.min_capability:
            parts.append(f"compute capability ≥ {self.min_capability}")
        if self.archs:
            ptx = f" (PTX {self.ptx}+)" if self.ptx else ""
            parts.append(f"compute capability {', '.join(self.archs)}{ptx}")
        if self.gfx:
            parts.append(f"gfx {', '.join(self.gfx)}")
        return " and ".join(parts) or "nothing"


@dataclass(frozen=True)
class Catalog:
    """``02-compute/images.yaml``: per service, GPU variants per vendor (newest first) and
    one CPU variant."""

    gpu: dict[tuple[str, str], tuple[Variant, ...]]
    cpu: dict[str, Variant]

    def known(self, service: str, image: str) -> Variant | None:
        """The catalogue's entry for a pinned image (a digest pin matches its tag)."""
        bare = image.split("@", 1)[0]
        for (name, _vendor), variants in self.gpu.items():
            for variant in variants if name == service else ():
                if variant.image == bare:
                    return variant
        cpu = self.cpu.get(service)
        return cpu if cpu is not None and cpu.image == bare else None

    def entries(self, service: str, image: str) -> list[Variant]:
        """Every GPU entry of ``image`` (a digest pin matches its tag): one tag may be two
        entries with two driver floors (Ollama: CC 7.0+ and CC 5.0-6.2)."""
        bare = image.split("@", 1)[0]
        return [
            variant
            for (name, _vendor), variants in self.gpu.items()
            if name == service
            for variant in variants
            if variant.image == bare
        ]

    def without(self, images: frozenset[str]) -> Catalog:
        """The catalogue less the GPU variants of ``images`` (they failed their proof on
        this host's GPUs); the CPU variants always stay, the last resort."""
        gpu = {
            list_key: tuple(v for v in variants if v.image not in images)
            for list_key, variants in self.gpu.items()
        }
        return Catalog(gpu, self.cpu)


def load_catalog(root: Path) -> Catalog:
    path = Path(root) / CATALOG_FILE
    try:
        data = yaml.safe_load(path.read_text()) or {}
        return parse_catalog(data)
    except (OSError, yaml.YAMLError, TypeError, KeyError, ValueError) as exc:
        raise ConfigError(
            f"{CATALOG_FILE} cannot be read: {type(exc).__name__}: {exc}",
            "restore it with `git checkout -- 02-compute/images.yaml`",
        ) from None


def parse_catalog(data: dict[str, Any]) -> Catalog:
    gpu: dict[tuple[str, str], tuple[Variant, ...]] = {}
    cpu: dict[str, Variant] = {}
    for service in SERVICES:
        entry = data[service]
        for vendor in GPU_LISTS:
            gpu[(service, vendor)] = tuple(_variant(v) for v in entry.get(vendor) or ())
        cpu[service] = _variant(entry["cpu"])
    return Catalog(gpu, cpu)


def _variant(raw: dict[str, Any]) -> Variant:
    image = raw["image"]
    if not isinstance(image, str) or not image:
        raise ValueError(f"an entry has no image: {raw!r}")
    return Variant(
        image=image,
        min_driver=str(raw["min_driver"]) if raw.get("min_driver") else None,
        driver_branches=tuple(str(b) for b in raw.get("driver_branches") or ()),
        archs=tuple(str(a) for a in raw.get("archs") or ()),
        ptx=str(raw["ptx"]) if raw.get("ptx") else None,
        gfx=tuple(str(g) for g in raw.get("gfx") or ()),
        args=str(raw.get("args") or ""),
        advised_for=tuple(str(g) for g in raw.get("advised_for") or ()),
        min_capability=str(raw["min_capability"]) if raw.get("min_capability") else None,
        archived=bool(raw.get("archived", False)),
        env_rules=tuple(_env_rule(r) for r in raw.get("env_rules") or ()),
        env=tuple((str(k), str(v)) for k, v in (raw.get("env") or {}).items()),
        base=str(raw.get("base") or ""),
        build=str(raw.get("build") or ""),
        kinds=tuple(str(k) for k in raw.get("kinds") or ()),
        source=str(raw.get("source") or ""),
    )


def _env_rule(raw: dict[str, Any]) -> EnvRule:
    env = raw["env"]
    if not isinstance(env, dict) or not env or not raw.get("why"):
        raise ValueError(f"an env rule needs env and why: {raw!r}")
    return EnvRule(
        capabilities=tuple(str(c) for c in raw["capabilities"]),
        env=tuple((str(k), str(v)) for k, v in env.items()),
        why=str(raw["why"]),
        source=str(raw.get("source") or ""),
    )


# ------------------------------------------------------------------ fit rules
def version_tuple(text: str) -> tuple[int, ...]:
    """ "535.183.01" → (535, 183, 1); non-digits end a part ("580.65.06-beta")."""
    parts = []
    for piece in text.strip().split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def driver_fits(driver: str, min_driver: str | None, branches: tuple[str, ...] = ()) -> bool:
    """``driver`` ≥ ``min_driver``, or on one of the older ``branches`` the image also
    accepts: "535" is any 535.x, "525.60.13" a 525.x from 525.60.13 on."""
    have = version_tuple(driver)
    if not min_driver or have >= version_tuple(min_driver):
        return True
    return any(
        have[:1] == version_tuple(branch)[:1] and have >= version_tuple(branch)
        for branch in branches
    )


def branch_words(branch: str) -> str:
    """ "535" → "535.x"; "525.60.13" → "525.x ≥ 525.60.13"."""
    major = branch.split(".", 1)[0]
    return f"{major}.x" if branch == major else f"{major}.x ≥ {branch}"


def capability_fits(capability: str, archs: tuple[str, ...], ptx: str | None) -> bool:
    """A cubin built for X.Y runs on X.Z with Z ≥ Y (same major); PTX for X.Y is compiled
    by the driver for any capability ≥ X.Y (CUDA C Programming Guide, "Binary
    Compatibility" and "PTX Compatibility")."""
    have = version_tuple(capability)
    for arch in archs:
        built = version_tuple(arch)
        if built and have and built[0] == have[0] and built[1:] <= have[1:]:
            return True
    return bool(ptx) and have >= version_tuple(ptx or "")


def gfx_of_override(override: str) -> str | None:
    """HSA_OVERRIDE_GFX_VERSION "10.3.0" → "gfx1030": the target ROCm then runs as."""
    parts = version_tuple(override)
    if len(parts) != 3:
        return None
    major, minor, stepping = parts
    return f"gfx{major}{minor:x}{stepping:x}"


def target_of(gpu: GpuInfo, hsa_override: str = "") -> str | None:
    """The gfx target ROCm runs ``gpu`` as: the override's when one is set."""
    return gfx_of_override(hsa_override) if hsa_override else gpu.gfx_target


def misfit(variant: Variant, gpu: GpuInfo, hsa_override: str = "") -> str | None:
    """Why ``variant`` cannot run on ``gpu``, or None when it can (or airig cannot tell:
    a fact detection did not get is not held against the image)."""
    if gpu.vendor == "nvidia":
        reasons = []
        driver, capability = gpu.driver_version, gpu.compute_capability
        if driver and not driver_fits(driver, variant.min_driver, variant.driver_branches):
            branches = "".join(f" or {branch_words(b)}" for b in variant.driver_branches)
            reasons.append(f"needs driver ≥ {variant.min_driver}{branches}")
        if (
            capability
            and variant.min_capability
            and version_tuple(capability) < version_tuple(variant.min_capability)
        ):
            reasons.append(f"serves compute capability ≥ {variant.min_capability} only")
        if (
            capability
            and (variant.archs or variant.ptx)
            and not capability_fits(capability, variant.archs, variant.ptx)
        ):
            reasons.append(f"has no kernels for compute capability {capability}")
        return "; ".join(reasons) or None
    if gpu.vendor == "amd" and variant.gfx:
        target = target_of(gpu, hsa_override)
        if target and target not in variant.gfx:
            return f"has no kernels for {target}"
    if variant.kinds and gpu.kind not in variant.kinds:
        return f"is listed upstream for {' or '.join(variant.kinds)} GPUs, not {gpu.kind} ones"
    return None


def describe(gpu: GpuInfo) -> str:
    where = f"GPU {gpu.index}" if gpu.index is not None else f"GPU {gpu.pci_address or '?'}"
    if gpu.vendor == "amd":
        return f"{where} {gpu.name} ({gpu.gfx_target or 'gfx target unknown'})"
    if gpu.vendor == "intel":
        return f"{where} {gpu.name} ({gpu.kind}, {gpu.kernel_driver or 'no driver'})"
    facts = [
        f"compute capability {gpu.compute_capability or '?'}",
        f"driver {gpu.driver_version or '?'}",
    ]
    return f"{where} {gpu.name} ({', '.join(facts)})"


# ------------------------------------------------------------------ the decision
