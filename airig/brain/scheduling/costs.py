"""What a model costs to (re)load and how long its tasks run, learned from measurements.

The brain sets each model's figures from what it learned and stored (``learn``: the
medians of ``estimates.py``, which survive restarts); the makespan simulation feeds
measurements one by one (``observe``: an exponentially weighted moving average, recent
loads counting most). Until a model has been measured, a guess from its name stands in:
the parameter count in tags such as ``qwen2.5:7b`` (the seed rig loaded a 7B model in
90-120 s, about 15 s per billion parameters), a few seconds for Whisper and embedding
models.

Each figure is kept per GPU too (``gpu``: the GPU label of ``estimates.py``'s keys, the
cards' model names, or "cpu"): a 14B model that loads in 5 s on one card may take 40 s on
an older one behind a slower bus, and a claim asks for the claiming worker's card. A
lookup takes the most specific figure known: learned on that GPU, else learned on any
(the model-wide figure), else the guess.
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


# A key: (model, GPU label); the GPU "" is the model-wide figure.
Key = tuple[str, str]
ANY_GPU = ""


class _Ewma:
    """Per-key EWMA; thread-safe because the brain's request threads share one."""

    def __init__(self, alpha: float) -> None:
        if not 0 < alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        self.alpha = alpha
        self._values: dict[Key, float] = {}
        self._counts: dict[Key, int] = {}
        self._lock = threading.Lock()

    def observe(self, key: Key, value: float) -> None:
        with self._lock:
            old = self._values.get(key)
            self._values[key] = value if old is None else old + self.alpha * (value - old)
            self._counts[key] = self._counts.get(key, 0) + 1

    def set(self, key: Key, value: float) -> None:
        with self._lock:
            self._values[key] = value
            self._counts[key] = self._counts.get(key, 0) + 1

    def get(self, model: str, gpu: str | None) -> float | None:
        """The figure learned on ``gpu``, else the model-wide one, else None."""
        with self._lock:
            if gpu:
                found = self._values.get((model, gpu))
                if found is not None:
                    return found
            return self._values.get((model, ANY_GPU))

    def samples(self, key: Key) -> int:
        with self._lock:
            return self._counts.get(key, 0)


def _keys(model: str, gpu: str | None) -> tuple[Key, ...]:
    """What one measurement on ``gpu`` updates: that GPU's figure and the model-wide one."""
    return ((model, gpu), (model, ANY_GPU)) if gpu else ((model, ANY_GPU),)


class ReloadCostModel:
    """Seconds to load each model: measured (EWMA) once seen, guessed from the name before;
    per GPU where measured there."""

    def __init__(self, alpha: float = 0.3, defaults: dict[str, float] | None = None) -> None:
        self._ewma = _Ewma(alpha)
        self._defaults = dict(defaults or {})

    def observe(self, model: str, load_ms: float, gpu: str | None = None) -> None:
        if load_ms >= 0:
            for key in _keys(model, gpu):
                self._ewma.observe(key, load_ms / 1000.0)

    def learn(self, model: str, seconds: float, gpu: str | None = None) -> None:
        """The load time the brain learned for ``model`` (its stored median), on ``gpu``
        (None: the model-wide figure)."""
        if seconds >= 0:
            self._ewma.set((model, gpu or ANY_GPU), seconds)

    def cost(self, model: str | None, gpu: str | None = None) -> float:
        """Expected seconds to load ``model`` on ``gpu`` (0 for tasks that need no model)."""
        if not model:
            return 0.0
        learned = self._ewma.get(model, gpu)
        if learned is not None:
            return learned
        return self._defaults.get(model, guess_load_s(model))

    def samples(self, model: str, gpu: str | None = None) -> int:
        return self._ewma.samples((model, gpu or ANY_GPU))


class RunTimeModel:
    """Seconds a task of each model runs (EWMA), per GPU where measured there; looks one
    task ahead for max-wait."""

    def __init__(self, alpha: float = 0.2, default_s: float = DEFAULT_RUN_S) -> None:
        self._ewma = _Ewma(alpha)
        self.default_s = default_s

    def observe(self, model: str | None, run_ms: float, gpu: str | None = None) -> None:
        if run_ms >= 0:
            for key in _keys(model or "", gpu):
                self._ewma.observe(key, run_ms / 1000.0)

    def learn(self, model: str | None, seconds: float, gpu: str | None = None) -> None:
        """The run time the brain learned for ``model``'s tasks (their stored median), on
        ``gpu`` (None: the model-wide figure)."""
        if seconds >= 0:
            self._ewma.set((model or "", gpu or ANY_GPU), seconds)

    def estimate(self, model: str | None, gpu: str | None = None) -> float:
        learned = self._ewma.get(model or "", gpu)
        return self.default_s if learned is None else learned
