"""Which image each compute service runs: the newest variant that fits every GPU it uses.

Rules, in order:
- A tag the user pinned in ``.env`` wins. A pin the catalogue knows and that cannot run on
  a detected GPU is refused (``✘``, ``up`` stops before starting anything); a pin the
  catalogue does not know is kept, with a note that its fit was not checked.
- Otherwise a variant upstream advises for every GPU's gfx target (``advised_for``: yanwk
  advises ``rocm6`` for RDNA2), when it fits; else the first (newest) variant of the
  service's vendor list that fits every GPU, a tag upstream archived (no more rebuilds)
  only after every maintained one.
- The chosen variant's ``env_rules`` that apply to a GPU add settings (Whisper's compute
  type on compute capability 12.x), said in ``why``.
- An AMD card no ROCm variant fits runs Ollama's Vulkan variant (``vulkan`` list: the plain
  image's Vulkan runner, ollama#17010) before the CPU.
- ``<SERVICE>_BACKEND`` in .env (auto, cuda, rocm, vulkan, cpu) forces a backend: cpu is
  always served; another the host cannot serve (no such GPU, no image of that backend
  fits) is a refusal (``✘``), never a silent CPU.
- When none fits, the service runs its CPU variant, with one warning line naming the GPU,
  its compute capability or gfx target, its driver, and the fix. The other services still
  use the GPUs.
A pure function of the catalogue, the profile, the GPUs and the pins: tested over a
matrix of fixture hosts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from airig.common.errors import ConfigError, HardwareError
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.images.catalog import (
    BACKEND_OF,
    CATALOG_FILE,
    LABEL,
    SERVICES,
    VARIABLE,
    VENDOR_OF_PROFILE,
    Catalog,
    Variant,
    capability_fits,
    describe,
    misfit,
    target_of,
    version_tuple,
)
from airig.launcher.images.registry import mirrored


@dataclass(frozen=True)
class ImageChoice:
    service: str
    variable: str  # the .env / compose variable that carries the image
    image: str
    on_gpu: bool  # False: runs its CPU variant (no GPU fits, or the profile is cpu)
    why: str
    args: str = ""  # variant flags (ComfyUI's --cpu); the user's own flags are added
    warning: str | None = None  # the one line said when a GPU service falls back to CPU
    refusal: HardwareError | None = None  # a pin that cannot run here
    # settings the variant needs on these GPUs (host.env): WHISPER_COMPUTE_TYPE=float16
    env: dict[str, str] = field(default_factory=dict)
    backend: str = "cpu"  # cuda | rocm | vulkan | cpu (a pin the catalogue lacks: its list's)

    def to_dict(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "variable": self.variable,
            "image": self.image,
            "device": "gpu" if self.on_gpu else "cpu",
            "why": self.why,
            "warning": self.warning,
            "refused": self.refusal.message if self.refusal else None,
            "env": dict(self.env),
            "backend": self.backend,
        }


@dataclass(frozen=True)
class ImageSelection:
    profile: str
    choices: tuple[ImageChoice, ...] = ()
    # every image variable compose interpolates, also for variants this profile does not
    # start (compose checks ${X:?} in every service of the file)
    env: dict[str, str] = field(default_factory=dict)

    def of(self, service: str) -> ImageChoice:
        return next(c for c in self.choices if c.service == service)

    @property
    def refusals(self) -> list[HardwareError]:
        return [c.refusal for c in self.choices if c.refusal is not None]

    @property
    def service_env(self) -> dict[str, str]:
        """Settings the chosen variants need (host.env), besides the image variables."""
        return {key: value for c in self.choices for key, value in c.env.items()}

    @property
    def on_cpu(self) -> list[ImageChoice]:
        """Services of a GPU profile that run their CPU variant."""
        return [c for c in self.choices if not c.on_gpu and self.profile != "cpu"]


def choose_images(
    catalog: Catalog,
    profile: str,
    gpus: list[GpuInfo],
    pins: dict[str, str],
    hsa_override: str = "",
    registry: str = "",
    backends: dict[str, str] | None = None,
    excluded: frozenset[str] = frozenset(),
) -> ImageSelection:
    """``gpus``: the GPUs the profile's services use (every usable card of its vendor).
    ``pins``: non-empty image variables from flag / environment / .env. ``registry``:
    AIRIG_IMAGE_REGISTRY, applied last, so fit and pins are judged on upstream names.
    ``backends``: per service the .env override (auto, cuda, rocm, vulkan, cpu).
    ``excluded``: upstream images that failed their proof on these GPUs (proofs/): the
    next variant that fits takes their place."""
    vendor = VENDOR_OF_PROFILE.get(profile)
    if excluded:
        catalog = catalog.without(excluded)
    choices = tuple(
        _forced(catalog, service, vendor, gpus, pins, hsa_override, (backends or {}).get(service))
        for service in SERVICES
    )
    env = _defaults(catalog, pins)
    for choice in choices:
        env[choice.variable] = choice.image
    return through_registry(ImageSelection(profile, choices, env), registry)


def through_registry(selection: ImageSelection, registry: str) -> ImageSelection:
    """Every image of ``selection`` (the chosen ones and each variable compose
    interpolates) pulled from ``registry`` (AIRIG_IMAGE_REGISTRY, images/registry.py)."""
    if not registry.strip():
        return selection
    choices = tuple(replace(c, image=mirrored(c.image, registry)) for c in selection.choices)
    env = {name: mirrored(image, registry) for name, image in selection.env.items()}
    return replace(selection, choices=choices, env=env)


def _defaults(catalog: Catalog, pins: dict[str, str]) -> dict[str, str]:
    """A value for every image variable: the pin, else the catalogue's first entry."""
    env = {}
    for (service, variant), variable in VARIABLE.items():
        if variable in env:
            continue
        listed = catalog.gpu.get((service, variant)) if variant != "cpu" else None
        default = listed[0].image if listed else catalog.cpu[service].image
        env[variable] = pins.get(variable) or default
    return env


def backend_variable(service: str) -> str:
    """The .env override of ``service``'s backend: OLLAMA_BACKEND …"""
    return f"{service.upper()}_BACKEND"


def _forced(
    catalog: Catalog,
    service: str,
    vendor: str | None,
    gpus: list[GpuInfo],
    pins: dict[str, str],
    hsa_override: str,
    wanted: str | None,
) -> ImageChoice:
    """The choice with ``<SERVICE>_BACKEND`` applied: auto chooses; cpu is the CPU image;
    cuda/rocm/vulkan take that list only, and refuse when the host cannot serve it."""
    wanted = (wanted or "auto").strip().lower()
    knob = backend_variable(service)
    if wanted == "auto":
        return _choose(catalog, service, vendor, gpus, pins, hsa_override)
    if wanted == "cpu":
        return _cpu_choice(catalog, service, pins, f"{knob}=cpu in .env")
    lists = [v for v, backend in BACKEND_OF.items() if backend == wanted]
    listed = lists[0] if lists else ""
    variants = catalog.gpu.get((service, listed), ())
    # Vulkan here: AMD (RADV) and Intel (ANV) through /dev/dri; NVIDIA's Vulkan ICD needs
    # the toolkit's graphics capability, which the kit does not request
    served = {"cuda": ("nvidia",), "rocm": ("amd",), "vulkan": ("amd", "intel")}[wanted]
    blocker = None
    if not variants:
        blocker = f"no {wanted} image of {LABEL[service]} exists ({CATALOG_FILE})"
    elif not gpus or vendor not in served:
        blocker = f"no GPU it can drive is in use (profile {_profile_words(vendor)})"
    if blocker is None:
        choice = _choose(catalog, service, listed, gpus, pins, hsa_override, fallback=False)
        if choice.on_gpu or choice.refusal is not None:
            return replace(choice, why=f"{knob}={wanted} in .env; {choice.why}")
        blocker = choice.why
    cpu = _cpu_choice(catalog, service, pins, f"{knob}={wanted} refused")
    refusal = HardwareError(
        f"{knob}={wanted} in .env, but this host cannot serve it: {blocker}",
        f"set {knob}=auto (or cpu) in .env, or run on a host with a GPU {wanted} drives",
    )
    return replace(cpu, refusal=refusal)


def _profile_words(vendor: str | None) -> str:
    return {"nvidia": "gpu-nvidia", "amd": "gpu-amd", "intel": "gpu-intel"}.get(vendor or "", "cpu")


def _choose(
    catalog: Catalog,
    service: str,
    vendor: str | None,
    gpus: list[GpuInfo],
    pins: dict[str, str],
    hsa_override: str,
    fallback: bool = True,
) -> ImageChoice:
    """``vendor``: the profile's list (nvidia, amd) or a forced one (vulkan); ``fallback``
    False: no fit is said in ``why`` of an off-GPU choice, for `_forced` to refuse."""
    variants = catalog.gpu.get((service, vendor), ()) if vendor else ()
    vulkan = catalog.gpu.get((service, "vulkan"), ())
    if vendor == "intel" and not variants and vulkan and gpus:  # Ollama: ANV, upstream's path
        why = f"Vulkan runner on {_gpu_words(gpus)} (no Intel build of {LABEL[service]} exists)"
        return _vulkan(catalog, service, vulkan, gpus, pins, why)
    if vendor is None or not variants:
        return _cpu_choice(catalog, service, pins, _cpu_reason(service, vendor))
    variable = VARIABLE[(service, vendor)]
    pinned = pins.get(variable)
    if pinned:
        return _pinned(catalog, service, variable, pinned, gpus, hsa_override)
    advised = _advised(variants, gpus, hsa_override)
    if advised is not None:
        targets = ", ".join(sorted({target_of(gpu, hsa_override) or "" for gpu in gpus}))
        why = f"upstream advises it for {targets} ({CATALOG_FILE}); fits {_gpu_words(gpus)}"
        return _on_gpu(service, variable, advised, gpus, why, backend=BACKEND_OF[vendor])
    # a tag upstream archived is frozen at its last build: every maintained one first
    for variant in sorted(variants, key=lambda v: v.archived):
        if all(misfit(variant, gpu, hsa_override) is None for gpu in gpus):
            why = f"newest in {CATALOG_FILE} that fits {_gpu_words(gpus)}"
            if variant.archived:
                why += "; archived upstream (no more rebuilds): no maintained tag fits"
            return _on_gpu(service, variable, variant, gpus, why, backend=BACKEND_OF[vendor])
    if not fallback:
        return _cpu_choice(catalog, service, pins, f"no {vendor} image fits {_gpu_words(gpus)}")
    if vendor == "amd" and vulkan:  # the GPUs ROCm dropped: upstream's Vulkan runner
        blocker = next(g for g in gpus if any(misfit(v, g, hsa_override) for v in variants))
        why = (
            f"no ROCm image in {CATALOG_FILE} fits {describe(blocker)} ({variants[0].image} "
            f"{misfit(variants[0], blocker, hsa_override)}): Vulkan runner on "
            f"{_gpu_words(gpus)} (ollama#17010: upstream relies on Vulkan there)"
        )
        return _vulkan(catalog, service, vulkan, gpus, pins, why)
    return _fallback(catalog, service, vendor, variants, gpus, pins, hsa_override)


def _on_gpu(
    service: str,
    variable: str,
    variant: Variant,
    gpus: list[GpuInfo],
    why: str,
    image: str = "",
    backend: str = "",
) -> ImageChoice:
    """``variant`` on ``gpus`` (``image``: the pin that names it, a digest pin kept), with
    the settings its env rules add there."""
    env, reasons = variant.env_for(gpus)
    why = "; ".join([why, *reasons])
    return ImageChoice(
        service, variable, image or variant.image, True, why, variant.args, env=env,
        backend=backend or _backend_of(variable),
    )  # fmt: skip


def _backend_of(variable: str) -> str:
    """The backend of the list a variable belongs to (a pin's)."""
    lists = [vendor for (_, vendor), name in VARIABLE.items() if name == variable]
    return next((BACKEND_OF[v] for v in lists if v in BACKEND_OF), "cpu")


def _vulkan(
    catalog: Catalog,
    service: str,
    variants: tuple[Variant, ...],
    gpus: list[GpuInfo],
    pins: dict[str, str],
    why: str,
) -> ImageChoice:
    """The Vulkan variant (a pin of OLLAMA_IMAGE_VULKAN wins, refused when it cannot run)."""
    variable = VARIABLE[(service, "vulkan")]
    if pins.get(variable):
        return _pinned(catalog, service, variable, pins[variable], gpus, "")
    return _on_gpu(service, variable, variants[0], gpus, why, backend="vulkan")


def _advised(
    variants: tuple[Variant, ...], gpus: list[GpuInfo], hsa_override: str
) -> Variant | None:
    """The first variant upstream advises for every GPU's target, if it fits them all."""
    for variant in variants:
        advised = (
            gpus
            and variant.advised_for
            and all(target_of(gpu, hsa_override) in variant.advised_for for gpu in gpus)
        )
        if advised and all(misfit(variant, gpu, hsa_override) is None for gpu in gpus):
            return variant
    return None


def _cpu_reason(service: str, vendor: str | None) -> str:
    if vendor is None:
        return "cpu profile"
    return f"no {vendor} build of {LABEL[service]} exists (see {CATALOG_FILE})"


def _cpu_choice(catalog: Catalog, service: str, pins: dict[str, str], why: str) -> ImageChoice:
    variable = VARIABLE[(service, "cpu")]
    cpu = catalog.cpu[service]
    image = pins.get(variable) or cpu.image
    source = f"{variable} in .env" if pins.get(variable) else CATALOG_FILE.as_posix()
    return ImageChoice(service, variable, image, False, f"{why}; image from {source}", cpu.args)


def _pinned(
    catalog: Catalog,
    service: str,
    variable: str,
    image: str,
    gpus: list[GpuInfo],
    hsa_override: str,
) -> ImageChoice:
    variant = catalog.known(service, image)
    if variant is None:
        why = f"pinned by {variable}; not in {CATALOG_FILE}, so its fit was not checked"
        return ImageChoice(service, variable, image, True, why, backend=_backend_of(variable))
    # one tag may be listed twice (two driver floors by compute capability): any entry
    # that fits every GPU makes the pin fit
    for entry in catalog.entries(service, image):
        if all(misfit(entry, gpu, hsa_override) is None for gpu in gpus):
            return _on_gpu(service, variable, entry, gpus, f"pinned by {variable}; fits", image)
    for gpu in gpus:
        reason = misfit(variant, gpu, hsa_override)
        if reason:
            refusal = HardwareError(
                f"{variable}={image} cannot run on {describe(gpu)}: it {reason}",
                f"empty {variable} in .env to let airig pick a variant that fits, or "
                f"{_upgrade_hint(variant, gpu)}",
            )
            return ImageChoice(service, variable, image, True, f"pinned by {variable}",
                               variant.args, refusal=refusal,
                               backend=_backend_of(variable))  # fmt: skip
    return _on_gpu(service, variable, variant, gpus, f"pinned by {variable}; fits", image)


def _fallback(
    catalog: Catalog,
    service: str,
    vendor: str,
    variants: tuple[Variant, ...],
    gpus: list[GpuInfo],
    pins: dict[str, str],
    hsa_override: str,
) -> ImageChoice:
    """No variant fits every GPU: the CPU variant, and one line saying which GPU blocks
    and the fix (a driver upgrade, or a tag that fits that card)."""
    blocker = next(g for g in gpus if any(misfit(v, g, hsa_override) for v in variants))
    fits_blocker = [v for v in variants if misfit(v, blocker, hsa_override) is None]
    newest, label = variants[0], LABEL[service]
    if fits_blocker:
        # a mixed rig: a tag fits this card, but no one tag fits every card together
        other = next(g for g in gpus if misfit(fits_blocker[0], g, hsa_override))
        warning = (
            f"{label} runs on CPU: no one image in {CATALOG_FILE} fits both "
            f"{describe(blocker)} and {describe(other)} → {_fix(variants, other)}"
        )
    else:
        warning = (
            f"{label} runs on CPU: no image in {CATALOG_FILE} fits {describe(blocker)} "
            f"({newest.image} {misfit(newest, blocker, hsa_override)}) → "
            f"{_fix(variants, blocker)}"
        )
    cpu = _cpu_choice(catalog, service, pins, f"no {vendor} image fits {_gpu_words(gpus)}")
    return ImageChoice(cpu.service, cpu.variable, cpu.image, False, cpu.why, cpu.args, warning)


def _upgrade_hint(variant: Variant, gpu: GpuInfo) -> str:
    return _fix((variant,), gpu)


def _fix(variants: tuple[Variant, ...], gpu: GpuInfo) -> str:
    """The change that makes one of ``variants`` run on ``gpu``."""
    if gpu.vendor == "amd":
        return (
            "set HSA_OVERRIDE_GFX_VERSION in .env if the card runs as a listed target, "
            "or use a build for it"
        )
    have = gpu.compute_capability or ""
    runnable = [
        v
        for v in variants
        if v.min_driver
        and (not have or not (v.archs or v.ptx) or capability_fits(have, v.archs, v.ptx))
    ]
    if runnable:  # the smallest upgrade that makes one variant run
        easiest = min(runnable, key=lambda v: version_tuple(v.min_driver or ""))
        return f"upgrade the NVIDIA driver to ≥ {easiest.min_driver} ({easiest.image} then fits)"
    return (
        f"no listed build has kernels for compute capability {have}: add one to "
        f"{CATALOG_FILE} and pin its tag"
    )


def _gpu_words(gpus: list[GpuInfo]) -> str:
    if not gpus:
        return "the GPUs (none detected)"
    if len(gpus) == 1:
        return describe(gpus[0])
    return f"all {len(gpus)} GPUs"


# ComfyUI's comfy/cli_args.py puts these and --cpu in one mutually exclusive argparse
# group (vram_group): with --cpu, argparse exits 2 before ComfyUI starts.
COMFYUI_VRAM_FLAGS = ("--gpu-only", "--highvram", "--normalvram", "--lowvram", "--novram")


def comfyui_flag_clash(selection: ImageSelection, user_args: str) -> ConfigError | None:
    """COMFYUI_CLI_ARGS that ComfyUI would refuse next to its variant's --cpu."""
    comfy = selection.of("comfyui")
    if "--cpu" not in comfy.args.split():
        return None
    clash = [flag for flag in user_args.split() if flag.split("=")[0] in COMFYUI_VRAM_FLAGS]
    if not clash:
        return None
    return ConfigError(
        f"COMFYUI_CLI_ARGS has {' '.join(clash)}, which ComfyUI refuses with --cpu "
        f"(its {comfy.image} runs on CPU here)",
        "remove the VRAM flags from COMFYUI_CLI_ARGS in .env",
    )


def pins_from(value_of: Callable[[str], str]) -> dict[str, str]:
    """Image variables the user set (flag, environment or .env); ``value_of`` is
    Settings.value_of."""
    variables = sorted(set(VARIABLE.values()))
    return {name: value_of(name).strip() for name in variables if value_of(name).strip()}
