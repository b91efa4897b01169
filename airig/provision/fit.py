"""Will the chosen Ollama models fit the detected VRAM? Warn early, suggest smaller.

Sizes are the download sizes Ollama's library shows for common tags (weights dominate
VRAM use); unknown names are estimated from a ``:<N>b`` parameter count and the
quantisation in the tag (default q4_K_M, Ollama's default), and names with neither give
no warning rather than a guess. A model needs its weights plus room for the KV cache and
compute buffers: ``OVERHEAD`` of the weights.
"""

from __future__ import annotations

import re

GB = 1000**3
OVERHEAD = 1.2

# Download sizes (GB) of common library tags, q4_K_M unless the tag says otherwise.
KNOWN_GB: dict[str, float] = {
    "qwen2.5:0.5b": 0.40,
    "qwen2.5:1.5b": 0.99,
    "qwen2.5:3b": 1.9,
    "qwen2.5:7b": 4.7,
    "qwen2.5:14b": 9.0,
    "qwen2.5:32b": 20.0,
    "qwen2.5:72b": 47.0,
    "llama3.2:1b": 1.3,
    "llama3.2:3b": 2.0,
    "llama3.1:8b": 4.9,
    "llama3.1:70b": 43.0,
    "mistral:7b": 4.1,
    "gemma2:2b": 1.6,
    "gemma2:9b": 5.4,
    "gemma2:27b": 16.0,
    "phi3:3.8b": 2.2,
    "phi3:14b": 7.9,
    "deepseek-r1:1.5b": 1.1,
    "deepseek-r1:7b": 4.7,
    "deepseek-r1:8b": 4.9,
    "deepseek-r1:14b": 9.0,
    "deepseek-r1:32b": 20.0,
    "deepseek-r1:70b": 43.0,
    "nomic-embed-text:latest": 0.27,
}
# Tags that name the same model as a size tag.
ALIASES = {"mistral:latest": "mistral:7b", "phi3:mini": "phi3:3.8b", "phi3:medium": "phi3:14b"}
DEFAULT_TAG_SIZES = {"qwen2.5": "7b", "llama3.2": "3b", "llama3.1": "8b", "gemma2": "9b"}
DEFAULT_TAG_SIZES |= {"deepseek-r1": "7b", "phi3": "3.8b"}

_PARAMS = re.compile(r"(?:^|[-_])(\d+(?:\.\d+)?)b(?:$|[-_])", re.IGNORECASE)
# Bytes per parameter by quantisation (file size / parameter count of library models).
_BYTES_PER_PARAM = {"q2": 0.42, "q3": 0.5, "q4": 0.62, "q5": 0.72, "q6": 0.83, "q8": 1.07}
_BYTES_PER_PARAM |= {"fp16": 2.0, "f16": 2.0, "bf16": 2.0, "fp32": 4.0, "f32": 4.0}


def _split(model: str) -> tuple[str, str]:
    name, _, tag = model.strip().lower().rpartition(":")
    return (name, tag) if name else (tag, "latest")


def estimate_bytes(model: str) -> int | None:
    """Approximate weight bytes of an Ollama model name, or None when unknown."""
    name, tag = _split(model)
    if tag == "latest" and name in DEFAULT_TAG_SIZES:
        tag = DEFAULT_TAG_SIZES[name]
    key = ALIASES.get(f"{name}:{tag}", f"{name}:{tag}")
    size_tag = tag.split("-")[0]
    quant = next((q for q in _BYTES_PER_PARAM if q in tag.split("-")[-1]), "q4")
    if key in KNOWN_GB or f"{name}:{size_tag}" in KNOWN_GB:
        known = KNOWN_GB.get(key) or KNOWN_GB[f"{name}:{size_tag}"]
        return int(known * GB * _BYTES_PER_PARAM[quant] / _BYTES_PER_PARAM["q4"])
    match = _PARAMS.search(tag)
    if match is None:
        return None
    return int(float(match.group(1)) * 1e9 * _BYTES_PER_PARAM[quant])


def _suggest(model: str, budget: float) -> str | None:
    """The largest known tag of the same family that fits, else any small one that does."""
    name, _ = _split(model)
    fitting = [(gb, tag) for tag, gb in KNOWN_GB.items() if gb * GB * OVERHEAD <= budget]
    same_family = [item for item in fitting if item[1].startswith(f"{name}:")]
    if same_family:
        return max(same_family)[1]
    general = [item for item in fitting if not item[1].startswith("nomic")]
    return max(general)[1] if general else None


def check_fit(models: list[str], gpus_vram_bytes: list[int]) -> list[str]:
    """Warnings for models that cannot fit the GPUs' VRAM (none on CPU-only hosts)."""
    if not gpus_vram_bytes:
        return []
    budget = float(sum(gpus_vram_bytes))
    warnings = []
    sizes = {model: estimate_bytes(model) for model in models}
    for model, size in sizes.items():
        if size is None or size * OVERHEAD <= budget:
            continue
        advice = _suggest(model, budget)
        hint = f"; try {advice}" if advice else "; it will run (slowly) on the CPU"
        warnings.append(
            f"{model} needs about {size * OVERHEAD / GB:.1f} GB of VRAM, "
            f"the GPUs have {budget / GB:.1f} GB{hint}"
        )
    known = [size for size in sizes.values() if size is not None]
    if not warnings and len(known) > 1 and sum(known) * OVERHEAD > budget:
        warnings.append(
            f"{', '.join(sizes)} together need about {sum(known) * OVERHEAD / GB:.1f} GB of "
            f"VRAM, the GPUs have {budget / GB:.1f} GB; Ollama will swap them in and out"
        )
    return warnings
