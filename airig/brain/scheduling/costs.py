"""What a model costs to (re)load and how long its tasks run, learned from measurements.

The brain sets each model's figures from what it learned and stored (``learn``: the
medians of ``estimates.py``, which survive restarts); the makespan simulation feeds
measurements one by one (``observe``: an exponentially weighted moving average, recent
loads counting most). Until a model has been measured, a guess from its name stands in:
the parameter count in tags such as ``qwen2.5:7b`` (the seed rig loaded a 7B model in
90-120 s, about 15 s per billion parameters), a few seconds for Whisper and embedding
models.
"""

from __future__ import annotations

import re
import threading

# Seed figures: 7B cold load 90-120 s; Whisper and embedding models 3-5 s.
SECONDS_PER_BILLION_PARAMS = 15.0
SMALL_MODEL_LOAD_S = 4.0
UNKNOWN_MODEL_LOAD_S = 60.0
DEFAULT_RUN_S = 30.0
_PARAMS = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)b\b", re.IGNORECASE)
_SMALL_HINTS = ("whisper", "embed", "minilm", "bge", "e5-")


def guess_load_s(model: str) -> float:
    """A first estimate of a model's load time from its name alone."""
    name = model.lower()
    if any(hint in name for hint in _SMALL_HINTS):
        return SMALL_MODEL_LOAD_S
    found = _PARAMS.search(name.split("/")[-1])
    if found:
        return min(
            600.0, max(SMALL_MODEL_LOAD_S, float(found.group(1)) * SECONDS_PER_BILLION_PARAMS)
        )
    return UNKNOWN_MODEL_LOAD_S


class _Ewma:
    """Per-key EWMA; thread-safe because the brain's request threads share one."""

    def __init__(self, alpha: float) -> None:
        if not 0 < alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        self.alpha = alpha
        self._values: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def observe(self, key: str, value: float) -> None:
        with self._lock:
            old = self._values.get(key)
            self._values[key] = value if old is None else old + self.alpha * (value - old)
            self._counts[key] = self._counts.get(key, 0) + 1

    def set(self, key: str, value: float) -> None:
        with self._lock:
            self._values[key] = value
            self._counts[key] = self._counts.get(key, 0) + 1

    def get(self, key: str) -> float | None:
        with self._lock:
            return self._values.get(key)

    def samples(self, key: str) -> int:
        with self._lock:
            return self._counts.get(key, 0)


class ReloadCostModel:
    """Seconds to load each model: measured (EWMA) once seen, guessed from the name before."""

    def __init__(self, alpha: float = 0.3, defaults: dict[str, float] | None = None) -> None:
        self._ewma = _Ewma(alpha)
        self._defaults = dict(defaults or {})

    def observe(self, model: str, load_ms: float) -> None:
        if load_ms >= 0:
            self._ewma.observe(model, load_ms / 1000.0)

    def learn(self, model: str, seconds: float) -> None:
        """The load time the brain learned for ``model`` (its stored median)."""
        if seconds >= 0:
            self._ewma.set(model, seconds)

    def cost(self, model: str | None) -> float:
        """Expected seconds to load ``model`` (0 for tasks that need no model)."""
        if not model:
            return 0.0
        learned = self._ewma.get(model)
        if learned is not None:
            return learned
        return self._defaults.get(model, guess_load_s(model))

    def samples(self, model: str) -> int:
        return self._ewma.samples(model)


class RunTimeModel:
    """Seconds a task of each model runs (EWMA); looks one task ahead for max-wait."""

    def __init__(self, alpha: float = 0.2, default_s: float = DEFAULT_RUN_S) -> None:
        self._ewma = _Ewma(alpha)
        self.default_s = default_s

    def observe(self, model: str | None, run_ms: float) -> None:
        if run_ms >= 0:
            self._ewma.observe(model or "", run_ms / 1000.0)

    def learn(self, model: str | None, seconds: float) -> None:
        """The run time the brain learned for ``model``'s tasks (their stored median)."""
        if seconds >= 0:
            self._ewma.set(model or "", seconds)

    def estimate(self, model: str | None) -> float:
        learned = self._ewma.get(model or "")
        return self.default_s if learned is None else learned
