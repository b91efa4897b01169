"""`up`'s proofs on this host: the pure ``settle`` bound to Docker, the cache and .env.

Before the proofs each image is pulled (the proof runs the exact image Compose will
start); a candidate that takes over is pulled in its turn. ``AIRIG_PROOF=off`` skips it
all: the images are then trusted from the catalogue, as before issue 34.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.markup import escape

from airig.launcher.compose.docker import Docker, engine_errors
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.hardware.choice import Choice, backends_from, igpu_on, profile_gpus
from airig.launcher.images import ImageChoice, ImageSelection, choose_images, pins_from
from airig.launcher.images.catalog import Catalog, load_catalog
from airig.launcher.images.registry import mirrored
from airig.launcher.proofs.cache import ProofCache
from airig.launcher.proofs.judge import FAILED, GENERIC_FIX, Outcome, Verdict, clip, judge, known
from airig.launcher.proofs.run import image_id, run_options, run_proof
from airig.launcher.proofs.scripts import ProofSpec
from airig.launcher.proofs.settle import Settled, distinct_gpus, driver_of, settle, verdict_of
from airig.launcher.settings import Settings

OFF_LINE = (
    "  [yellow]⚠ AIRIG_PROOF=off: GPU images are trusted from 02-compute/images.yaml, not "
    "proved on this host[/]"
)


def prove_images(
    settings: Settings,
    docker: Docker,
    choice: Choice,
    selection: ImageSelection,
    say: Callable[[str], None],
    reprove: bool = False,
) -> Settled:
    """The selection `up` starts, each GPU image proved (or recalled) on this host."""
    gpus = profile_gpus(choice.report, choice.profile, igpu_on(settings))
    if not gpus or not any(c.on_gpu for c in selection.choices):
        _forget(settings)
        return Settled(selection)
    if settings.proof == "off":
        say(OFF_LINE)
        _forget(settings)
        return Settled(selection)
    catalog = load_catalog(settings.root)
    cache = ProofCache(settings.state_dir)
    client = docker.probe_sdk(max(settings.gpu_probe_timeout, settings.proof_timeout))
    gids = {"amd": choice.report.amd.gids, "intel": choice.report.intel.gids}
    pins = pins_from(settings.value_of)

    def prove(image: ImageChoice, spec: ProofSpec, gpu: GpuInfo) -> Verdict:
        found = _pulled(docker, client, image.image, say)
        if not reprove:
            kept = cache.get(spec.service, found, gpu.name, driver_of(gpu))
            if kept is not None:
                return kept
        say(f"  Proving {escape(image.image)} on {escape(gpu.name)} …")
        options = run_options(gpu, tuple(gids.get(gpu.vendor, ())))
        outcome = run_proof(client, image.image, spec, options, settings.proof_timeout)
        verdict = _verdict(image, gpu, found, spec, outcome)
        cache.put(verdict)
        return verdict

    def rechoose(excluded: frozenset[str]) -> ImageSelection:
        return choose_images(
            catalog, choice.profile, gpus, pins, settings.hsa_override_gfx_version.strip(),
            settings.image_registry, backends_from(settings), excluded,
        )  # fmt: skip

    extra = {}
    if settings.hsa_override_gfx_version.strip():
        extra["HSA_OVERRIDE_GFX_VERSION"] = settings.hsa_override_gfx_version.strip()
    settled = settle(
        selection, gpus, pins, prove, rechoose,
        lambda image: upstream_of(catalog, image, settings.image_registry), extra,
    )  # fmt: skip
    for line in settled.lines:
        say(line)
    cache.outcome = settled.moved
    cache.last_up = [v.to_dict() for v in settled.verdicts]
    cache.save()
    return settled


def _forget(settings: Settings) -> None:
    """Nothing was proved this time: `status` and `triage` must not show an older `up`'s
    moves (the verdicts themselves stay for the next `up`)."""
    cache = ProofCache(settings.state_dir)
    if cache.outcome or cache.last_up:
        cache.outcome, cache.last_up = {}, []
        cache.save()


def upstream_of(catalog: Catalog, image: str, registry: str) -> str:
    """The catalogue's (upstream) name of ``image``: a digest dropped, a mirror undone."""
    bare = image.split("@", 1)[0]
    for variants in catalog.gpu.values():
        for variant in variants:
            if bare in (variant.image, mirrored(variant.image, registry)):
                return variant.image
    return bare


def _pulled(docker: Docker, client: Any, image: str, say: Callable[[str], None]) -> str:
    """The local id of ``image``, pulled first when the engine lacks it."""
    with engine_errors(f"inspecting the image {image}"):
        found = image_id(client, image)
    if found is None:
        say(f"[bold]Pulling[/] {escape(image)} to prove it on the GPU …")
        docker.pull_image(image)
        with engine_errors(f"inspecting the image {image}"):
            found = image_id(client, image)
    return found or "?"


def _verdict(
    choice: ImageChoice, gpu: GpuInfo, found: str, spec: ProofSpec, outcome: Outcome
) -> Verdict:
    status, detail, fix = judge(outcome, spec.until, gpus=1)
    return verdict_of(choice, gpu, found, status, detail, fix, outcome.seconds)


# ------------------------------------------------------------------ Ollama's load proof
LOAD_PROOF_EVENT = "load_proof"


def load_proof_env(settings: Settings, selection: ImageSelection | None) -> dict[str, str]:
    """host.env for ollama-init: load the smallest model on the GPU once pulled
    (AIRIG_LOAD_PROOF=gpu), naming the image it proves; off on the CPU or proofs off."""
    if selection is None or settings.proof == "off":
        return {"AIRIG_LOAD_PROOF": "off", "AIRIG_LOAD_PROOF_IMAGE": ""}
    ollama = selection.of("ollama")
    on = ollama.on_gpu and ollama.backend in ("cuda", "rocm") and ollama.refusal is None
    return {
        "AIRIG_LOAD_PROOF": "gpu" if on else "off",
        "AIRIG_LOAD_PROOF_IMAGE": ollama.image if on else "",
    }


def load_failure(log_text: str) -> dict[str, Any] | None:
    """ollama-init's failed load proof, from its log lines (one JSON object a line)."""
    for line in reversed(log_text.splitlines()):
        start = line.find("{")
        if start < 0 or LOAD_PROOF_EVENT not in line:
            continue
        try:
            event = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == LOAD_PROOF_EVENT:
            return event if event.get("status") == "failed" else None
    return None


def record_load_failure(
    settings: Settings, docker: Docker, choice: Choice, ollama: ImageChoice, said: str
) -> list[Verdict]:
    """A model load that failed in ``ollama``'s image fails its proof on every GPU model
    it runs on: kept in the cache, so the next `up` moves Ollama to the next image (or
    refuses a pin) before anything starts."""
    quote, fix = known(said)
    detail = clip(quote or said or "the model did not load on the GPU")
    client = docker.probe_sdk(settings.gpu_probe_timeout)
    with engine_errors(f"inspecting the image {ollama.image}"):
        found = image_id(client, ollama.image) or "?"
    cache = ProofCache(settings.state_dir)
    verdicts = []
    for gpu in distinct_gpus(profile_gpus(choice.report, choice.profile, igpu_on(settings))):
        verdict = verdict_of(ollama, gpu, found, FAILED, detail, fix or GENERIC_FIX, 0.0)
        cache.put(verdict)
        verdicts.append(verdict)
    cache.save()
    return verdicts
