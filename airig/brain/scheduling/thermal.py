"""The thermal guard: a hot GPU claims nothing new until it has cooled down.

Pure logic over the temperatures the workers' heartbeats report. A GPU at or above
``limit_c`` (default 83 °C, the seed cards' throttle target) is blocked; it is unblocked
only once it reads below ``limit_c - hysteresis_c``, so a card hovering at the limit does
not flap between claiming and refusing on every heartbeat. An unknown temperature (no
NVML, a board without a sensor) never blocks and keeps the previous state.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class ThermalChange:
    """A GPU crossed into or out of the blocked state on this reading."""

    gpu: str
    blocked: bool
    temperature_c: float


class ThermalGuard:
    def __init__(self, limit_c: float = 83.0, hysteresis_c: float = 5.0) -> None:
        if hysteresis_c < 0:
            raise ValueError("hysteresis must not be negative")
        self.limit_c = limit_c
        self.hysteresis_c = hysteresis_c
        self._blocked: dict[str, float] = {}  # gpu -> temperature when it was blocked
        self._lock = threading.Lock()

    @property
    def resume_below_c(self) -> float:
        return self.limit_c - self.hysteresis_c

    def update(self, gpu: str, temperature_c: float | None) -> ThermalChange | None:
        """Feed one reading; returns the change it caused, if any."""
        if temperature_c is None:
            return None
        with self._lock:
            was_blocked = gpu in self._blocked
            if not was_blocked and temperature_c >= self.limit_c:
                self._blocked[gpu] = temperature_c
                return ThermalChange(gpu, True, temperature_c)
            if was_blocked and temperature_c < self.resume_below_c:
                del self._blocked[gpu]
                return ThermalChange(gpu, False, temperature_c)
            return None

    def blocked(self, gpu: str) -> bool:
        with self._lock:
            return gpu in self._blocked

    def any_blocked(self, gpus: list[str]) -> bool:
        return any(self.blocked(gpu) for gpu in gpus)
