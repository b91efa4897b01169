"""What one (task type, model, GPU) costs, learned from its recent attempts. Pure: no
database, no clock; ``estimates.py`` keeps the figures in the store and uses them.

A key keeps a bounded window of its last ``WINDOW`` observations per series (run time,
load time, peak VRAM, tokens per second, failed or not), oldest first. The figures are
recency-weighted quantiles over that window: the newest observation weighs 1, each older
one ``DECAY`` times the next (half weight after ~34 attempts), so a model moved to a
faster disk or a driver update shows within a few dozen runs, and one outlier moves a
median not at all. Keeping the observations (not only running sums) is what makes a
median and a p90 possible, and it costs at most a few kilobytes per key.

What a worker reports is checked here too: a duration that is not a finite number between
0 and ``MAX_SECONDS`` is dropped, not clamped (a clamped figure would still teach the
scheduler something false); the completion itself is kept, since its output is good.
The typed fields of the report (peak VRAM, tokens per second) are bounded by the
protocol already: out of range is a 422 there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airig.common.protocol import MAX_TOKENS_PER_S

WINDOW = 200
DECAY = 0.98
MAX_SECONDS = 7 * 24 * 3600.0  # no attempt runs a week: the brain's runtime limits end it
SERIES = ("run", "load", "vram", "tps", "fail")
# each observation's weight by its age (0: the newest), computed once
_WEIGHTS = [DECAY**age for age in range(WINDOW)]


@dataclass(frozen=True)
class Observation:
    """One finished attempt, as far as it is known (None: not measured)."""

    run_s: float | None = None
    load_s: float | None = None
    vram_mb: float | None = None
    tokens_per_s: float | None = None
    failed: bool = False


def seconds(value: Any, scale: float = 1.0) -> float | None:
    """``value`` * ``scale`` as seconds, or None when it is not a plausible duration."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        scaled = float(value) * scale
    except OverflowError:  # an int past a float's range
        return None
    if not math.isfinite(scaled) or scaled < 0 or scaled > MAX_SECONDS:
        return None
    return scaled


def rate(value: Any) -> float | None:
    """Tokens per second, or None when it is not a plausible figure."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        figure = float(value)
    except OverflowError:
        return None
    return figure if math.isfinite(figure) and 0 < figure <= MAX_TOKENS_PER_S else None


def fold(window: Mapping[str, Any], seen: Observation) -> dict[str, list[float]]:
    """``window`` with ``seen`` appended to each series it measured, each cut to ``WINDOW``."""
    out = {name: _series(window.get(name)) for name in SERIES}
    for name, value in (
        ("run", seen.run_s), ("load", seen.load_s), ("vram", seen.vram_mb),
        ("tps", seen.tokens_per_s), ("fail", 1.0 if seen.failed else 0.0),
    ):  # fmt: skip
        if value is not None:
            out[name] = [*out[name], round(float(value), 3)][-WINDOW:]
    return out


def _series(value: Any) -> list[float]:
    """A stored series, whatever an older or damaged row holds: numbers only, bounded."""
    if not isinstance(value, list):
        return []
    kept = [float(v) for v in value if isinstance(v, int | float) and not isinstance(v, bool)]
    return [v for v in kept if math.isfinite(v)][-WINDOW:]


def quantile(values: Sequence[float], q: float) -> float | None:
    """The recency-weighted ``q`` quantile of ``values`` (oldest first), None when empty:
    the smallest value whose weight with every smaller value's reaches ``q`` of the whole."""
    values = values[-WINDOW:]
    if not values:
        return None
    last = len(values) - 1
    weighted = sorted(zip(values, _WEIGHTS[last::-1], strict=True))
    total = sum(w for _, w in weighted)
    running = 0.0
    for value, weight in weighted:
        running += weight
        if running >= q * total - 1e-12:
            return value
    return weighted[-1][0]


def mean(values: Sequence[float]) -> float | None:
    """The recency-weighted mean of ``values`` (oldest first), None when empty."""
    values = values[-WINDOW:]
    if not values:
        return None
    weights = _WEIGHTS[len(values) - 1 :: -1]
    return sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)


def figures(window: Mapping[str, list[float]]) -> dict[str, float | int | None]:
    """The figures the scheduler and ``GET /v1/estimates`` use, from a folded window."""
    run, load, vram = window["run"], window["load"], window["vram"]
    peak = quantile(vram, 0.9)
    fails = mean(window["fail"])
    return {
        "run_p50_s": _round(quantile(run, 0.5)),
        "run_p90_s": _round(quantile(run, 0.9)),
        "load_p50_s": _round(quantile(load, 0.5)),
        "load_p90_s": _round(quantile(load, 0.9)),
        # the learned peak: the p90 of recent peaks, so one odd reading blocks no load
        "vram_peak_mb": None if peak is None else int(round(peak)),
        "tokens_per_s": _round(mean(window["tps"])),
        "failure_rate": _round(fails),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
