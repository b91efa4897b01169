"""Decide what Compose runs: one pure function from settings + hardware to a plan.

Nothing here talks to Docker, so every profile and GPU layout is unit-tested and printed
by ``--dry-run`` exactly as it will run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from airig.launcher.compose import postgres
from airig.launcher.compose.gpu_workers import (
    CUDA_IMAGE,
    VULKAN_BUILD,
    GpuSlot,
    VulkanBuild,
    amd_group_add,
    brain_group,
    cuda_image,
    gpu_workers_overlay,
    ocr_cuda,
    per_gpu_whisper,
    shared_ollama_env,
    shared_whisper_env,
)
from airig.launcher.images import ImageSelection, choose_images, load_catalog, pins_from
from airig.launcher.images.registry import mirrored
from airig.launcher.settings import PROFILES, STACKS, Settings

# Project name per stack: "<AIRIG_PROJECT_PREFIX>-<suffix>" (airig-infra, … by default).
PROJECT_SUFFIX = {"01-infra": "infra", "02-compute": "compute", "03-agents": "agents"}
# A joined rig's overlay (checked in, not generated): the brain's machine runs the brain.
JOIN_OVERLAY = "compose.join.yaml"
GPU_OVERLAY = "agents.gpu.yaml"
AMD_ENV = "gpu-amd.env"
# gpu-amd: the detected device GIDs for 02-compute's AMD services (group_add, each once)
AMD_COMPUTE_OVERLAY = "compute.gpu-amd.yaml"
AMD_GIDS = "AIRIG_AMD_GIDS"  # in host.env: "44,109", what detection found
# the 02-compute services that map /dev/kfd and /dev/dri (x-amd-devices)
AMD_COMPUTE_SERVICES = ("ollama-gpu-amd", "comfyui-gpu-amd")
# gpu-intel: the GIDs owning the Intel render nodes, for the services mapping /dev/dri
INTEL_COMPUTE_OVERLAY = "compute.gpu-intel.yaml"
INTEL_GIDS = "AIRIG_INTEL_GIDS"  # in host.env, as AIRIG_AMD_GIDS
INTEL_COMPUTE_SERVICES = ("ollama-gpu-intel", "comfyui-gpu-intel")
HOST_ENV = "host.env"
# 02-compute services whose GPU variant runs its CPU image (no image fits the GPUs)
CPU_FALLBACK_OVERLAY = "compute.cpu-fallback.yaml"
# gpu-amd: Ollama on its Vulkan runner (no ROCm image fits the cards, or OLLAMA_BACKEND)
VULKAN_OVERLAY = "compute.vulkan.yaml"
# Every file a plan may generate under .airig/, whatever its profile: `down` removes them all.
GENERATED_FILES = (
    HOST_ENV,
    GPU_OVERLAY,
    AMD_ENV,
    AMD_COMPUTE_OVERLAY,
    CPU_FALLBACK_OVERLAY,
    VULKAN_OVERLAY,
    INTEL_COMPUTE_OVERLAY,
)
# Placeholders for the compose files' required variables, read only on a stopped kit
# (plan_for_running).
STOPPED_ENV = Path(__file__).with_name("stopped.env")
# The profile of a plan that addresses what runs rather than what to start (see
# plan_for_running): any would do, compose only needs one that exists.
ANY_PROFILE = "cpu"
UP_PROFILE = "AIRIG_UP_PROFILE"
# 03-agents' gateway to the external tier (AIRIG_ESCALATION=on)
ESCALATION_PROFILE = "escalation"
BRAINS_PROFILE = "brains"  # 03-agents/compose.yaml's brain-2 (AIRIG_BRAINS=2)
ALL_CLASSES = "cpu,script,llm,resource"


@dataclass(frozen=True)
class StackPlan:
    name: str
    project: str
    files: tuple[Path, ...]
    profiles: tuple[str, ...]
    # .env, then launcher-generated values (detected GIDs) that override it
    env_files: tuple[Path, ...]
    wait_timeout: int


@dataclass
class ComposePlan:
    profile: str
    network: str
    stacks: tuple[StackPlan, ...]
    # Generated files (path -> content) the launcher writes before running Compose.
    generated: dict[Path, str] = field(default_factory=dict)
    # The brain a joined rig's workers use; "" when this rig runs its own brain.
    join_brain_url: str = ""

    def stack(self, name: str) -> StackPlan:
        return next(s for s in self.stacks if s.name == name)


def build_plan(
    settings: Settings,
    profile: str,
    gpus: list[GpuSlot],
    host_env: dict[str, str] | None = None,
    images: ImageSelection | None = None,
) -> ComposePlan:
    """``host_env``: detected values (e.g. AMD device GIDs) that override .env for Compose.
    ``images``: the image chosen per compute service; written to the generated env file,
    with an overlay that moves a service no image fits onto its CPU image."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile}")
    state = settings.state_dir
    generated: dict[Path, str] = {}
    if images is None:  # down, status, logs: compose still interpolates every image
        images_env = choose_images(
            load_catalog(settings.root),
            profile,
            [],
            pins_from(settings.value_of),
            registry=settings.image_registry,
        ).env
    else:
        images_env = images.env
    # The compute services `up` put on a GPU, each with its backend (ollama=vulkan): the
    # brain's probes alert, naming it, when one answers that it runs on the CPU
    # (airig/brain/ops/probes.py).
    on_gpu = (
        []
        if images is None or profile == "cpu"
        else [f"{c.service}={c.backend}" for c in images.choices if c.on_gpu]
    )
    host_env = {
        **(host_env or {}),
        **images_env,
        # what a chosen variant needs on these GPUs (Whisper's compute type on CC 12.x)
        **(images.service_env if images is not None else {}),
        "AIRIG_GPU_SERVICES": ",".join(sorted(on_gpu)),
        # the profile `up` chose: plan_for_running addresses its services, not another's
        UP_PROFILE: profile,
        "AIRIG_CPU_WORKER_CLASSES": cpu_worker_classes(profile, gpus),
        **rig_env(settings),
        **escalation_env(settings),
        # the brain's BRAIN_DATABASE_URL: empty (SQLite), or the postgres service's; this
        # file holds the password then, so `write_generated` makes it private (mode 600)
        **postgres.store_env(settings),
    }
    cuda = ocr_cuda(settings, profile)
    if cuda:  # the GPU overlay's workers name it (down, status, tune read it there too)
        host_env[CUDA_IMAGE] = cuda_image(settings.image)
    generated[state / HOST_ENV] = "".join(f"{k}={v}\n" for k, v in sorted(host_env.items()))
    env_files = [settings.env_file, state / HOST_ENV]
    projects = project_names(settings)
    vulkan = vulkan_build(settings, profile, images)
    stacks = []
    for name in STACKS:
        files = [settings.root / name / "compose.yaml"]
        if name == "03-agents" and settings.joined:
            files.append(settings.root / name / JOIN_OVERLAY)
        if name == "03-agents" and profile != "cpu" and gpus:
            overlay = state / GPU_OVERLAY
            group = brain_group(settings, gpus)
            ollama_gpu = images is None or images.of("ollama").on_gpu
            whisper_env = (
                shared_whisper_env(settings.root) if per_gpu_whisper(profile, images) else None
            )
            generated[overlay] = gpu_workers_overlay(
                profile, gpus, group, settings.project_prefix, ollama_gpu,
                shared_ollama_env(settings.root), vulkan, whisper_env, cuda,
            )  # fmt: skip
            files.append(overlay)
        if name == "02-compute" and vulkan is not None:
            generated[state / VULKAN_OVERLAY] = vulkan_compute_overlay(vulkan, profile)
            files.append(state / VULKAN_OVERLAY)
        if name == "02-compute" and images is not None and images.on_cpu:
            # last, so it also undoes device lines an earlier overlay added
            fallback = state / CPU_FALLBACK_OVERLAY
            generated[fallback] = cpu_fallback_overlay(profile, images)
            files.append(fallback)
        stacks.append(
            StackPlan(
                name=name,
                project=projects[name],
                files=tuple(files),
                profiles=(profile, *stack_extra_profiles(settings, name)),
                env_files=tuple(env_files),
                wait_timeout=settings.wait_timeout,
            )
        )
    if profile == "gpu-amd":
        generated[state / AMD_ENV] = amd_env(settings)
        add_amd_compute_overlay(stacks, generated, state / AMD_COMPUTE_OVERLAY, host_env)
    if profile == "gpu-intel":
        add_amd_compute_overlay(stacks, generated, state / INTEL_COMPUTE_OVERLAY, host_env,
                                INTEL_GIDS, INTEL_COMPUTE_SERVICES)  # fmt: skip
    return ComposePlan(
        profile, settings.network, tuple(stacks), generated, settings.join_brain_url.rstrip("/")
    )


def plan_for_running(settings: Settings) -> ComposePlan:
    """What this rig runs, whichever profile and GPUs `up` chose: its projects, files, env
    files and network, for the commands that look at or stop the stacks (`down`, `status`,
    `logs`, `doctor`, `models`, `join`'s check). Compose needs some profile; containers of
    the others and of the GPU overlays are still the project's (`ps --all` lists them,
    `down --remove-orphans` removes them; `down` removes every GENERATED_FILES too).

    Before the first `up` and after a `down` there is no host.env, so the compose files'
    `${NAME:?…}` image variables have no value and Compose refuses to parse them
    (`WHISPER_IMAGE_CUDA is missing a value`): then STOPPED_ENV's placeholders come after
    .env (which leaves them empty), so `down --volumes` and `status` work on a stopped kit."""
    host_env = settings.state_dir / HOST_ENV
    if not host_env.exists():
        plan = build_plan(settings, ANY_PROFILE, [])
        stacks = tuple(replace(s, env_files=(*s.env_files, STOPPED_ENV)) for s in plan.stacks)
        return replace(plan, stacks=stacks)
    # The profile `up` chose and the overlays it generated (the per-GPU workers and their
    # Ollamas, the AMD groups, the CPU fallback): `tune` and `restart` recreate those
    # services, which Compose knows only through these files and that profile.
    profile = _recorded_profile(host_env)
    plan = build_plan(settings, profile, [])
    written = {
        "02-compute": [
            settings.state_dir / n
            for n in (
                AMD_COMPUTE_OVERLAY,
                INTEL_COMPUTE_OVERLAY,
                VULKAN_OVERLAY,
                CPU_FALLBACK_OVERLAY,
            )
        ],
        "03-agents": [settings.state_dir / GPU_OVERLAY],
    }
    stacks = tuple(
        replace(s, files=(*s.files, *(
            f for f in written.get(s.name, []) if f.is_file() and f not in s.files
        )))
        for s in plan.stacks
    )  # fmt: skip
    return replace(plan, stacks=stacks)


def _recorded_profile(host_env: Path) -> str:
    """UP_PROFILE from host.env; a kit started before it was recorded: ANY_PROFILE."""
    for line in host_env.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == UP_PROFILE and value in PROFILES:
            return value
    return ANY_PROFILE


def generated_paths(settings: Settings) -> list[Path]:
    """Every file any plan may generate for this rig (GENERATED_FILES under .airig/)."""
    return [settings.state_dir / name for name in GENERATED_FILES]


def project_names(settings: Settings) -> dict[str, str]:
    """Each stack's compose project on this rig: two rigs on one engine never share one."""
    return {name: f"{settings.project_prefix}-{suffix}" for name, suffix in PROJECT_SUFFIX.items()}


def rig_env(settings: Settings) -> dict[str, str]:
    """What the workers send the brain about their rig: its name (``host``), and on a
    joined rig a name prefix, so its `gpu0` and the brain machine's `gpu0` are two names."""
    rig = settings.rig_name
    return {"AIRIG_RIG_NAME": rig, "AIRIG_WORKER_NAME_PREFIX": f"{rig}-" if settings.joined else ""}


def stack_extra_profiles(settings: Settings, stack: str) -> tuple[str, ...]:
    """Profiles besides the hardware one: `escalation` starts 03-agents' gateway, only
    when .env opts in (AIRIG_ESCALATION=on; a joined rig runs no brain to serve);
    `postgres` starts 01-infra's database with AIRIG_BRAIN_STORE=postgres, so `compose up
    --wait` of 01-infra waits for its health before 03-agents' brain starts; `brains`
    starts 03-agents' brain-2 with AIRIG_BRAINS=2 (settings refuse it on SQLite)."""
    if stack == postgres.INFRA_STACK:
        return (postgres.PROFILE,) if postgres.enabled(settings) else ()
    if stack != "03-agents" or settings.joined:
        return ()
    profiles: tuple[str, ...] = (ESCALATION_PROFILE,) if settings.escalation == "on" else ()
    # getattr: a settings stand-in that predates the knob runs one brain, as its .env would
    if getattr(settings, "brains", 1) > 1:
        profiles += (BRAINS_PROFILE,)
    return profiles


def gateway_key_path(settings: Settings) -> Path:
    """AIRIG_GATEWAY_KEY_FILE as an absolute path (a relative one is from the checkout:
    Compose would read it from 03-agents/)."""
    return settings.root / Path(settings.gateway_key_file).expanduser()


def escalation_env(settings: Settings) -> dict[str, str]:
    """For the gateway's compose service: the key file's absolute path, and its owner to
    run as (a file secret is a bind mount with the host file's owner and mode, so a
    chmod 600 key is readable only by that uid). Empty while escalation is off; a
    missing file is `up`'s preflight refusal (preflight.escalation_check)."""
    if settings.escalation != "on" or not settings.gateway_key_file:
        return {}
    path = gateway_key_path(settings)
    env = {"AIRIG_GATEWAY_KEY_FILE": str(path)}
    if path.is_file():
        owner = path.stat()
        env["AIRIG_GATEWAY_USER"] = f"{owner.st_uid}:{owner.st_gid}"
    return env


def cuda_workers(plan: ComposePlan) -> list[str]:
    """The generated worker services that run the CUDA image (``up`` builds it for them)."""
    overlay = next((t for path, t in plan.generated.items() if path.name == GPU_OVERLAY), None)
    services = yaml.safe_load(overlay)["services"] if overlay else {}
    return sorted(
        name
        for name, service in services.items()
        if name.startswith("worker-") and CUDA_IMAGE in str(service.get("image", ""))
    )


def cpu_worker_classes(profile: str, gpus: list[GpuSlot]) -> str:
    """Without GPU workers the CPU workers must take every class, or LLM and script tasks
    would wait forever; with them, CPU workers keep to CPU tasks."""
    return "cpu" if profile != "cpu" and gpus else ALL_CLASSES


class _Reset:
    """Compose's ``!reset`` tag: an overlay removes the attribute from the merged service."""


class _Override(list[str]):
    """Compose's ``!override`` tag (≥ 2.24.4): the overlay's list replaces the merged one
    instead of being appended to it."""


def _dump_reset(dumper: yaml.SafeDumper, _value: _Reset) -> yaml.Node:
    return dumper.represent_scalar("!reset", "")


def _dump_override(dumper: yaml.SafeDumper, value: _Override) -> yaml.Node:
    return dumper.represent_sequence("!override", list(value))


class _OverlayDumper(yaml.SafeDumper):
    pass


_OverlayDumper.add_representer(_Reset, _dump_reset)
_OverlayDumper.add_representer(_Override, _dump_override)


def vulkan_build(
    settings: Settings, profile: str, images: ImageSelection | None
) -> VulkanBuild | None:
    """The Vulkan Ollama of a gpu-amd or gpu-intel plan whose Ollama choice is Vulkan;
    None otherwise."""
    vulkan_profiles = ("gpu-amd", "gpu-intel")
    if images is None or profile not in vulkan_profiles or images.of("ollama").backend != "vulkan":
        return None
    ollama = images.of("ollama")
    variant = load_catalog(settings.root).known("ollama", ollama.image)
    base = variant.base if variant is not None and variant.base else ""
    if variant is None:  # a pin the catalogue lacks: built on the first Vulkan entry's base
        listed = load_catalog(settings.root).gpu.get(("ollama", "vulkan"), ())
        base = listed[0].base if listed else ""
    env = variant.env if variant is not None else (("OLLAMA_VULKAN", "1"),)
    return VulkanBuild(ollama.image, mirrored(base, settings.image_registry), env)


def vulkan_compute_overlay(vulkan: VulkanBuild, profile: str = "gpu-amd") -> str:
    """02-compute overlay: the profile's Ollama runs the Vulkan image with /dev/dri only
    (no /dev/kfd: Vulkan does not use ROCm) and OLLAMA_VULKAN=1; Compose builds the image
    when the engine lacks it. The groups overlay still adds the render group."""
    service: dict[str, Any] = {
        "image": "${OLLAMA_IMAGE_VULKAN:?set OLLAMA_IMAGE_VULKAN in .env}",
        # paths of an extra -f file resolve against the first file's folder, 02-compute/
        "build": {"context": VULKAN_BUILD, "args": {"OLLAMA_BASE": vulkan.base}},
        "devices": _Override(["/dev/dri"]),
        "environment": dict(vulkan.env),
    }
    header = "# Generated by airig: Ollama on its Vulkan runner (no ROCm image fits the GPUs).\n"
    body = yaml.dump({"services": {f"ollama-{profile}": service}}, Dumper=_OverlayDumper,
                     sort_keys=True)  # fmt: skip
    return header + body


def cpu_fallback_overlay(profile: str, images: ImageSelection) -> str:
    """02-compute overlay: each service no image fits runs its CPU image in its GPU
    variant, without the device request (``!reset`` needs Compose ≥ 2.24)."""
    services: dict[str, Any] = {}
    for choice in images.on_cpu:
        service: dict[str, Any] = {"image": choice.image}
        if profile == "gpu-nvidia":
            service["deploy"] = _Reset()
        else:
            service.update(devices=_Reset(), group_add=_Reset())
        if choice.service == "comfyui":
            service["environment"] = {"CLI_ARGS": f"{choice.args} ${{COMFYUI_CLI_ARGS:-}}"}
        elif choice.service == "whisper":
            service["environment"] = {"WHISPER__INFERENCE_DEVICE": "cpu"}
        services[f"{choice.service}-{profile}"] = service
    header = "# Generated by airig: these services run on CPU (no image fits the GPUs).\n"
    return header + yaml.dump({"services": services}, Dumper=_OverlayDumper, sort_keys=True)


def amd_env(settings: Settings) -> str:
    override = settings.hsa_override_gfx_version
    lines = ["# Generated by airig for gpu-amd containers."]
    if override:
        lines.append(f"HSA_OVERRIDE_GFX_VERSION={override}")
    return "\n".join(lines) + "\n"


def amd_host_env(gids: Iterable[int]) -> dict[str, str]:
    """What detection found, for host.env (``AIRIG_AMD_GIDS=44,109``)."""
    found = amd_group_add(gids)
    return {AMD_GIDS: ",".join(found)} if found else {}


def intel_host_env(gids: Iterable[int]) -> dict[str, str]:
    """The GIDs owning the Intel render nodes, for host.env (``AIRIG_INTEL_GIDS=993``)."""
    found = amd_group_add(gids)
    return {INTEL_GIDS: ",".join(found)} if found else {}


def amd_compute_overlay(
    gids: Iterable[int | str], names: Sequence[str] = AMD_COMPUTE_SERVICES
) -> str:
    """02-compute overlay for gpu-amd (gpu-intel: ``names``): each GPU service joins the
    groups owning the device nodes it maps. Generated because their number (one or two)
    depends on the host."""
    group_add = amd_group_add(gids)
    services = {name: {"group_add": group_add} for name in names}
    header = "# Generated by airig from the GIDs owning /dev/kfd and /dev/dri/renderD*.\n"
    return header + yaml.safe_dump({"services": services}, sort_keys=True)


def add_amd_compute_overlay(
    stacks: list[StackPlan],
    generated: dict[Path, str],
    path: Path,
    host_env: dict[str, str],
    key: str = AMD_GIDS,
    names: Sequence[str] = AMD_COMPUTE_SERVICES,
) -> None:
    """Generate ``path`` from host_env's AIRIG_AMD_GIDS (``key``) for ``names`` and give it
    to 02-compute, right after its compose.yaml: overlays after it (the CPU fallback) may
    still undo it."""
    gids = [gid for gid in host_env.get(key, "").split(",") if gid.strip()]
    generated[path] = amd_compute_overlay(gids, names)
    for position, stack in enumerate(stacks):
        if stack.name == "02-compute":
            files = (*stack.files[:1], path, *stack.files[1:])
            stacks[position] = replace(stack, files=files)


def worker_layout(plan: ComposePlan, cpu_workers: str) -> list[dict[str, str]]:
    """Who runs where, for `--dry-run` and the docs: one row per worker service."""

    host_env = next((text for path, text in plan.generated.items() if path.name == HOST_ENV), "")
    cpu_classes = dict(line.split("=", 1) for line in host_env.splitlines() if "=" in line)
    rows = [{
        "worker": f"worker-cpu (x{cpu_workers})", "gpus": "-", "ollama": "ollama (shared)",
        "whisper": "whisper (shared)",
        "classes": cpu_classes.get("AIRIG_CPU_WORKER_CLASSES", ALL_CLASSES),
    }]  # fmt: skip
    overlay = next((t for path, t in plan.generated.items() if path.name == GPU_OVERLAY), None)
    services = yaml.safe_load(overlay)["services"] if overlay else {}
    for name, service in sorted(services.items()):
        if not name.startswith("worker-"):
            continue
        env = service["environment"]
        ollama = env["OLLAMA_URL"].removeprefix("http://").split(":")[0]
        whisper = env.get("WHISPER_URL", "").removeprefix("http://").split(":")[0]
        rows.append({"worker": name, "gpus": env["WORKER_GPU"], "ollama": f"{ollama} (own)",
                     "whisper": f"{whisper} (own)" if whisper else "whisper (shared)",
                     "classes": env["WORKER_CLASSES"]})  # fmt: skip
    return rows
