"""Is a compute service really on its GPU? Pure readings of the services' own answers,
shared by the launcher's `triage` and the brain's service probes so both say the same.

- Ollama ``/api/ps``: each loaded model's ``size`` and ``size_vram`` (bytes); a model with
  less than half of itself in VRAM runs mostly on the CPU (seed 001 §3, the runbook's
  "quietly on CPU" case). Ollama's server reports ``size_vram: 0`` when it fell back.
- ComfyUI ``/system_stats``: ``devices[0]`` is torch's primary device; ``type`` "cpu"
  means it started without a usable GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

VRAM_ON_GPU = 0.5  # Ollama: size_vram below half of size = mostly on the CPU


def ollama_cpu_models(models: Iterable[dict[str, Any]]) -> list[str]:
    """Evidence lines for each loaded model that sits mostly outside VRAM."""
    lines = []
    for m in models:
        size, vram = m.get("size") or 0, m.get("size_vram") or 0
        numbers = isinstance(size, int | float) and isinstance(vram, int | float)
        if numbers and size and vram < VRAM_ON_GPU * size:
            lines.append(f"/api/ps: {m.get('name')} size {size} size_vram {vram}")
    return lines


def comfyui_cpu_device(devices: Iterable[dict[str, Any]]) -> list[str]:
    """Evidence when ComfyUI's primary device is the CPU."""
    first = next(iter(devices), None)
    if first is not None and first.get("type") == "cpu":
        return [f"/system_stats: devices[0] {first.get('name')} type cpu"]
    return []
