"""The per-GPU worker overlay (``.airig/agents.gpu.yaml``): per GPU a worker and its own
Ollama (and on gpu-nvidia its own Whisper), each pinned to that card, and one pair for the
brain's GPU group; on gpu-nvidia the workers run the CUDA image (AIRIG_IMAGE-cuda).

Pure, as the plan is (``plan.py`` calls ``gpu_workers_overlay`` and writes its text): the
inputs are the GPU slots detection gave (``GpuSlot``), and what the plan chose for Ollama
(its Vulkan build, ``VulkanBuild``) and Whisper.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from airig.launcher.images import ImageSelection
from airig.launcher.settings import Settings

# The checkout this module is in: its compose files, when no settings name another root.
_CHECKOUT = Path(__file__).resolve().parents[3]
# What a one-GPU worker takes (the brain's group takes llm,resource; CPU workers: plan.py)
GPU_WORKER_CLASSES = "llm,script,resource"
# The kit's Vulkan Ollama image is built from this folder (02-compute/ollama-vulkan/); here,
# beside VulkanBuild, because a per-GPU Ollama builds it too (plan.py's 02-compute overlay)
VULKAN_BUILD = "ollama-vulkan"
# The NVIDIA GPU workers' image (AIRIG_OCR_CUDA=on): the kit's build with this argument,
# which swaps the CPU onnxruntime for onnxruntime-gpu (03-agents/ocr-cuda.sh), under the
# name host.env gives this variable (``cuda_image``: AIRIG_IMAGE's tag + "-cuda").
CUDA_IMAGE = "AIRIG_IMAGE_CUDA"
CUDA_BUILD_ARG = "OCR_CUDA"


@dataclass(frozen=True)
class GpuSlot:
    """One GPU the layout assigns a worker to (host index, as the driver numbers it)."""

    index: int
    name: str = ""
    vram_bytes: int = 0
    render_node: str = ""  # AMD: /dev/dri/renderD128 …
    gids: tuple[int, ...] = ()  # AMD: the GIDs owning /dev/kfd and the render nodes


@dataclass(frozen=True)
class VulkanBuild:
    """Ollama on its Vulkan runner: the kit-built image (``image``, from ``base`` with
    02-compute/ollama-vulkan/Dockerfile) and the settings the variant needs."""

    image: str
    base: str
    env: tuple[tuple[str, str], ...]


def ocr_cuda(settings: Settings, profile: str) -> bool:
    """Whether this plan's GPU workers run the CUDA image: NVIDIA cards only (AMD and Intel
    workers have no onnxruntime build to swap in: docs/gpus-and-images.md), and only with
    AIRIG_OCR_CUDA=on."""
    # getattr: a settings stand-in that predates the knob keeps its default, as .env would
    return profile == "gpu-nvidia" and getattr(settings, "ocr_cuda", "on") == "on"


def cuda_image(image: str) -> str:
    """AIRIG_IMAGE's NVIDIA variant, in the same repository: its tag + "-cuda"
    ("airig/airig:0.1.0" → "airig/airig:0.1.0-cuda"; no tag: ":latest-cuda", Docker's
    default tag). A digest names no build: the kit tags what it builds, so it is dropped."""
    name = image.split("@", 1)[0]
    path, _, last = name.rpartition("/")
    repository, colon, tag = last.partition(":")
    tag = tag if colon and tag else "latest"
    return f"{path}/{repository}:{tag}-cuda" if path else f"{repository}:{tag}-cuda"


def brain_group(settings: Settings, gpus: list[GpuSlot]) -> list[GpuSlot]:
    """GPUs that AIRIG_BRAIN_GPUS (e.g. "0,3") gives to the brain's larger model, as the
    seed rig ran a 14B model on GPUs 0+3. Unknown indexes are a ConfigError (one that is
    not a number was refused when the settings were loaded)."""
    from airig.common.errors import ConfigError

    wanted = list(settings.brain_gpus)
    if not wanted:
        return []
    by_index = {g.index: g for g in gpus}
    missing = [i for i in wanted if i not in by_index]
    if missing:
        raise ConfigError(f"AIRIG_BRAIN_GPUS names GPUs this host lacks: {missing}",
                          f"detected GPUs: {sorted(by_index)} (see `detect`)")  # fmt: skip
    return [by_index[i] for i in wanted]


def gpu_workers_overlay(
    profile: str,
    gpus: list[GpuSlot],
    group: Sequence[GpuSlot] = (),
    prefix: str = "airig",
    ollama_gpu: bool = True,
    ollama_env: Mapping[str, str] | None = None,
    vulkan: VulkanBuild | None = None,
    whisper_env: Mapping[str, str] | None = None,
    cuda: bool | None = None,
) -> str:
    """Compose overlay: per GPU a worker and its own Ollama, both pinned to that GPU, and
    one pair for the brain's GPU group (all its GPUs in one container, so one model spans
    them). YAML text.

    Each GPU worker talks to its own Ollama: with one shared Ollama over every GPU, the
    server, not the brain, would decide where a model loads, and residency would be a
    guess. The shared `ollama` of 02-compute stays for provisioning and CPU workers.

    ``whisper_env`` (``per_gpu_whisper``: gpu-nvidia with Whisper on its GPU image): each
    worker GPU also runs its own Whisper, ``whisper-gpuN`` with the shared Whisper's
    environment (``shared_whisper_env``), and its worker transcribes there. The brain's
    GPU group keeps none: its worker takes no transcription (``llm,resource``), and its
    cards hold the brain's model. The shared `whisper` stays for provisioning and the
    other workers.

    ``cuda`` (default: on gpu-nvidia, ``ocr_cuda``): every worker here runs the CUDA image
    (``CUDA_IMAGE``, built with ``OCR_CUDA=1``), so its OCR reads on its card; the brain,
    the CPU workers and the other profiles' workers keep the kit's image."""
    cuda = profile == "gpu-nvidia" if cuda is None else cuda and profile == "gpu-nvidia"
    grouped = {g.index for g in group}
    pairs = [(f"gpu{g.index}", [g]) for g in gpus if g.index not in grouped]
    if group:
        pairs.append(("brain", list(group)))
    services: dict[str, Any] = {}
    for suffix, slots in pairs:
        ollama = f"ollama-{suffix}"
        services[ollama] = _gpu_ollama(profile, slots, ollama_gpu, ollama_env, vulkan)
        whisper = None
        if whisper_env is not None and suffix != "brain":
            whisper = f"whisper-{suffix}"
            services[whisper] = _gpu_whisper(profile, slots, whisper_env)
        services[f"worker-{suffix}"] = _gpu_worker(profile, slots, ollama, whisper, cuda)
    header = "# Generated by airig from the detected GPUs; edits are overwritten.\n"
    # the model stores that 01-infra creates and 02-compute's init containers fill
    volumes = {"ollama-models": {"name": f"{prefix}-ollama-models", "external": True}}
    if any(name.startswith("whisper-") for name in services):
        volumes["whisper-models"] = {"name": f"{prefix}-whisper-models", "external": True}
    document = {"services": services, "volumes": volumes}
    return header + yaml.safe_dump(document, sort_keys=True)


def per_gpu_whisper(profile: str, images: ImageSelection | None) -> bool:
    """Whether each worker GPU gets its own Whisper: only on gpu-nvidia, and only when
    Whisper runs its CUDA image there. speaches has no ROCm or Intel build (gpu-amd and
    gpu-intel run its CPU image, 02-compute/AGENTS.md), and N CPU Whispers would only
    split the same cores N ways while holding N copies of the model in RAM; nor when no
    CUDA image fits the cards (the CPU fallback). ``images`` None (down, status): as
    ``up`` would on a fitting host."""
    return profile == "gpu-nvidia" and (images is None or images.of("whisper").on_gpu)


def _pin(profile: str, service: dict[str, Any], env: dict[str, str], gpus: list[GpuSlot]) -> None:
    """Give ``service`` exactly these GPUs, with the matching *_VISIBLE_DEVICES."""
    ids = [str(g.index) for g in gpus]
    if profile == "gpu-nvidia":
        # device_ids makes the NVIDIA runtime set NVIDIA_VISIBLE_DEVICES to these cards.
        service.setdefault("deploy", {})["resources"] = {
            "reservations": {
                "devices": [{"driver": "nvidia", "device_ids": ids, "capabilities": ["gpu"]}]
            }
        }
    elif profile == "gpu-intel":  # an Intel GPU is its render node alone
        service["devices"] = [g.render_node or f"/dev/dri/renderD{128 + g.index}" for g in gpus]
        gids = amd_group_add(gid for g in gpus for gid in g.gids)
        if gids:
            service["group_add"] = gids
    else:
        nodes = [g.render_node or f"/dev/dri/renderD{128 + g.index}" for g in gpus]
        service["devices"] = ["/dev/kfd", *nodes]
        gids = amd_group_add(gid for g in gpus for gid in g.gids)
        if gids:  # none without detection: root in the container needs none
            service["group_add"] = gids
        # Only these cards' render nodes are mapped, so inside they are devices 0..n-1.
        env["ROCR_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(gpus)))


def shared_ollama_env(root: Path) -> dict[str, str]:
    """The shared Ollama's environment (``x-ollama-env`` in 02-compute/compose.yaml).

    Every long-running Ollama reads the same knobs: the per-GPU ones are the Ollamas that
    do the GPU work, and a copy of the list here once lacked OLLAMA_NUM_PARALLEL and
    OLLAMA_GPU_OVERHEAD, so `tune` changed nothing on a GPU rig. One list, read here."""
    model = yaml.safe_load((root / "02-compute" / "compose.yaml").read_text())
    return {str(k): str(v) for k, v in model["x-ollama-env"].items()}


def shared_whisper_env(root: Path) -> dict[str, str]:
    """The shared GPU Whisper's environment (``whisper-gpu-nvidia`` in
    02-compute/compose.yaml: ``x-whisper-env`` merged with its device and compute type).

    The per-GPU Whispers copy it, as the per-GPU Ollamas copy ``x-ollama-env``: one list,
    so ``tune WHISPER_TTL=…`` reaches every Whisper (``tune.services_using`` finds the
    ``${WHISPER_TTL…}`` in each)."""
    model = yaml.safe_load((root / "02-compute" / "compose.yaml").read_text())
    env = model["services"]["whisper-gpu-nvidia"]["environment"]
    return {str(k): str(v) for k, v in env.items()}


def _gpu_whisper(profile: str, gpus: list[GpuSlot], env: Mapping[str, str]) -> dict[str, Any]:
    """One worker GPU's own Whisper: 02-compute's ``x-whisper`` on that card only, with
    no published port and no ``whisper`` alias (that name stays the shared instance)."""
    service: dict[str, Any] = {
        "image": "${WHISPER_IMAGE_CUDA:?set WHISPER_IMAGE_CUDA in .env}",
        "environment": dict(env),
        # the models whisper-init provisioned and verified; speaches only reads them
        "volumes": ["whisper-models:/home/ubuntu/.cache/huggingface/hub"],
        "healthcheck": {
            "test": ["CMD", "curl", "-fsS", "http://127.0.0.1:8000/health"],
            "interval": "10s",
            "timeout": "5s",
            "retries": 12,
            "start_period": "60s",
        },  # fmt: skip
        "restart": "unless-stopped",
        "logging": {"driver": "json-file", "options": {"max-size": "10m", "max-file": "3"}},
        "networks": ["ai"],
    }
    _pin(profile, service, service["environment"], gpus)
    return service


def _gpu_ollama(
    profile: str, gpus: list[GpuSlot], on_gpu: bool = True,
    shared_env: Mapping[str, str] | None = None, vulkan: VulkanBuild | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``on_gpu`` False: no Ollama image fits these cards; the worker's Ollama runs the
    CPU image unpinned (the launcher said so in one warning line). ``shared_env``: the
    shared Ollama's environment (default: this checkout's, ``shared_ollama_env``)."""
    env = dict(shared_env if shared_env is not None else shared_ollama_env(_CHECKOUT))
    image = "${OLLAMA_IMAGE:?set OLLAMA_IMAGE in .env}"
    service: dict[str, Any] = {
        "image": image,
        "environment": env,
        # read-write: Ollama writes nothing but may create its key pair under ~/.ollama
        "volumes": ["ollama-models:/root/.ollama"],
        "healthcheck": {
            "test": ["CMD", "ollama", "list"],
            "interval": "10s",
            "timeout": "10s",
            "retries": 12,
            "start_period": "30s",
        },  # fmt: skip
        "restart": "unless-stopped",
        "logging": {"driver": "json-file", "options": {"max-size": "10m", "max-file": "3"}},
        "networks": ["ai"],  # no alias: `ollama` stays the shared instance
    }
    if not on_gpu:
        return service
    if vulkan is not None:
        # Vulkan sees the GPUs by their render nodes: only this slot's, and the groups
        # owning them; no /dev/kfd, no ROCm variables
        service["image"] = "${OLLAMA_IMAGE_VULKAN:?set OLLAMA_IMAGE_VULKAN in .env}"
        service["build"] = {
            "context": f"../02-compute/{VULKAN_BUILD}",  # resolved from 03-agents/
            "args": {"OLLAMA_BASE": vulkan.base},
        }
        service["devices"] = [g.render_node or f"/dev/dri/renderD{128 + g.index}" for g in gpus]
        gids = amd_group_add(gid for g in gpus for gid in g.gids)
        if gids:
            service["group_add"] = gids
        env.update(vulkan.env)
        return service
    if profile == "gpu-amd":
        service["image"] = "${OLLAMA_IMAGE_ROCM:?set OLLAMA_IMAGE_ROCM in .env}"
        service["env_file"] = [{"path": "../.airig/gpu-amd.env", "required": False}]
    _pin(profile, service, env, gpus)
    return service


def _gpu_worker(
    profile: str, gpus: list[GpuSlot], ollama: str, whisper: str | None = None,
    cuda: bool = False,
) -> dict[str, Any]:  # fmt: skip
    ids = [str(g.index) for g in gpus]
    env = {
        "WORKER_NAME": "gpu" + "-".join(ids) if len(ids) == 1 else "brain-gpu" + "-".join(ids),
        "WORKER_CLASSES": GPU_WORKER_CLASSES if len(ids) == 1 else "llm,resource",
        "WORKER_GPU": ",".join(ids),
        "OLLAMA_URL": f"http://{ollama}:11434",
    }
    depends_on = {ollama: {"condition": "service_healthy"}}
    if whisper is not None:
        # transcribe and Whisper swaps go to this GPU's Whisper, whose loaded models the
        # worker reports as resident (WORKER_OWN_WHISPER); without it, the shared one
        env["WHISPER_URL"] = f"http://{whisper}:8000"
        env["WORKER_OWN_WHISPER"] = "1"
        depends_on[whisper] = {"condition": "service_healthy"}
    service: dict[str, Any] = {
        # Paths in an extra -f file resolve against the first file's folder (03-agents/).
        # Everything else comes with it: the hardening and limits of x-worker (cap_drop,
        # read_only, tmpfs, mem_limit, pids_limit); never override them here.
        "extends": {"file": "compose.yaml", "service": "worker-cpu"},
        "environment": env,
        "deploy": {"replicas": 1},
        "depends_on": depends_on,
    }
    if cuda:
        # The same build as x-airig's (Compose merges this build's args into the extended
        # service's context, Dockerfile and args) with the onnxruntime swap, tagged apart:
        # the brain and the CPU workers keep the small image.
        service["image"] = f"${{{CUDA_IMAGE}:?run python start_services.py up: it names the image}}"
        service["build"] = {"args": {CUDA_BUILD_ARG: "1"}}
    # The worker reads its GPU's temperature and free VRAM (NVML) for the thermal guard
    # and the swap protocol's VRAM check, so it is pinned to the same card.
    _pin(profile, service, env, gpus)
    return service


def amd_group_add(gids: Iterable[int | str]) -> list[str]:
    """Compose ``group_add`` for AMD devices (the per-GPU services here, 02-compute's in
    plan.py): numeric GIDs (group names do not exist in most images), each once, sorted.
    On most ROCm hosts /dev/kfd and the render nodes share the `render` group, and Compose
    rejects a list that repeats an item."""
    return [str(gid) for gid in sorted({int(gid) for gid in gids})]
