"""Ollama's Vulkan choice, settled by what Vulkan saw inside its container.

The catalogue's rules send an AMD card no ROCm image fits, and Intel GPUs, to Ollama's
Vulkan runner. Whether Vulkan can drive the card is only known by asking it there
(``hardware/vulkan.py``): a Mesa driver that lacks the card, a kernel driver that is not
loaded or a render node the container may not open all leave Vulkan with llvmpipe, and
Ollama on the CPU without a word. Here the probe's verdict becomes the choice:
- passed: the Vulkan choice stands, with what Vulkan listed in ``why``;
- failed, backend chosen by airig: the CPU image, with one warning line that says why and
  how to fix it (``up`` goes on: the other services keep their GPUs);
- failed, ``OLLAMA_BACKEND=vulkan`` in .env: a refusal, never a silent CPU;
- not run (no image yet, no Docker): the choice stands and ``why`` says it was not probed.
Pure: the probe's status and words come in, a selection goes out.
"""

from __future__ import annotations

from dataclasses import replace

from airig.common.errors import HardwareError
from airig.launcher.images.catalog import CATALOG_FILE, VARIABLE, Catalog
from airig.launcher.images.choose import ImageChoice, ImageSelection, backend_variable
from airig.launcher.images.registry import mirrored

SERVICE = "ollama"
CHECK_NODES = (
    "check the card's kernel driver (amdgpu, i915 or xe) is loaded and its render node "
    "is there (`ls -l /dev/dri`), then run `up` again"
)


def with_vulkan_verdict(
    selection: ImageSelection,
    catalog: Catalog,
    pins: dict[str, str],
    status: str,
    detail: str,
    forced: bool,
    registry: str = "",
) -> ImageSelection:
    """``status``: the probe's passed | failed | not run, ``detail`` its words; ``forced``:
    OLLAMA_BACKEND=vulkan in .env. A selection whose Ollama is not on Vulkan is returned
    unchanged."""
    ollama = selection.of(SERVICE)
    if ollama.backend != "vulkan" or not ollama.on_gpu or ollama.refusal is not None:
        return selection
    if status == "passed":
        return _swap(selection, replace(ollama, why=f"{ollama.why}; probe: {detail}"))
    if status != "failed":
        return _swap(selection, replace(ollama, why=f"{ollama.why}; Vulkan not probed: {detail}"))
    knob = backend_variable(SERVICE)
    if forced:
        refusal = HardwareError(
            f"{knob}=vulkan in .env, but Vulkan in Ollama's container sees no GPU: {detail}",
            f"{CHECK_NODES}; or set {knob}=auto (or cpu) in .env",
        )
        return _swap(selection, replace(ollama, refusal=refusal))
    variable = VARIABLE[(SERVICE, "cpu")]
    cpu = catalog.cpu[SERVICE]
    image = mirrored(pins.get(variable) or cpu.image, registry)
    source = f"{variable} in .env" if pins.get(variable) else CATALOG_FILE.as_posix()
    why = f"the Vulkan probe failed ({detail}); image from {source}"
    warning = f"Ollama runs on CPU: {detail} → {CHECK_NODES}; or set OLLAMA_BACKEND=cpu in .env"
    choice = ImageChoice(SERVICE, variable, image, False, why, cpu.args, warning)
    return _swap(selection, choice)


def _swap(selection: ImageSelection, choice: ImageChoice) -> ImageSelection:
    choices = tuple(choice if c.service == choice.service else c for c in selection.choices)
    env = dict(selection.env)
    env[choice.variable] = choice.image
    return replace(selection, choices=choices, env=env)
