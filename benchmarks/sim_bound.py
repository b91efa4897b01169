"""A lower bound on the makespan of any schedule of a simulated workload.

Every GPU starts cold, so each model used must be loaded at least once on each GPU that
runs it. Let ``G`` GPUs, ``W_m`` the total run time of model ``m``'s tasks, ``L_m`` its
fastest possible load, and ``k_m`` the number of GPUs that ever run ``m`` (unknown, so
the bound is minimised over every choice of ``k_m`` in 1..G). For the schedule's true
``k``, both of these hold:

1. busy time: ``G * T >= sum_m (W_m + k_m * L_m)`` (loads and runs occupy a GPU);
2. per model: each of the ``k_m`` GPUs starts its first ``m`` task no earlier than
   ``max(L_m, r_m)`` (its own load; ``r_m`` the earliest moment any ``m`` task can be
   ready), so some GPU runs ``>= W_m / k_m`` of ``m`` work after that point, and the
   ``m`` task finishing last still has a chain of dependents of at least ``tail_m``
   (the shortest downstream chain of any ``m`` task):
   ``T >= max(L_m, r_m) + W_m / k_m + tail_m``.

Hence ``T >= min over k of max(bound 1, bound 2)``. Independently, every dependency chain
bounds ``T`` from below (earliest finish with each task's own load, ``ef`` below).
Unload time and dispatch overhead are ignored, which only lowers the bound.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from sim_engine import ModelSpec, SimTask


def _earliest(tasks: dict[int, SimTask], fastest: dict[str, float]):
    """Earliest start (es) and finish (ef) per task, ignoring contention."""
    es: dict[int, float] = {}
    ef: dict[int, float] = {}
    for task in sorted(tasks.values(), key=lambda t: t.id):  # dependencies have lower ids
        es[task.id] = max([task.arrive_at, *(ef[d] for d in task.deps)])
        ef[task.id] = max(es[task.id], fastest[task.model]) + task.duration_s
    return es, ef


def _tails(tasks: dict[int, SimTask]) -> dict[int, float]:
    """Longest chain of dependents after each task (run time only)."""
    children: dict[int, list[int]] = defaultdict(list)
    for task in tasks.values():
        for dep in task.deps:
            children[dep].append(task.id)
    tail: dict[int, float] = {}
    for task in sorted(tasks.values(), key=lambda t: -t.id):
        tail[task.id] = max((tasks[c].duration_s + tail[c] for c in children[task.id]), default=0.0)
    return tail


def lower_bound(tasks: list[SimTask], models: dict[str, ModelSpec], gpus: int) -> float:
    by_id = {task.id: task for task in tasks}
    fastest = {name: spec.load_s[0] for name, spec in models.items()}
    es, ef = _earliest(by_id, fastest)
    tails = _tails(by_id)
    work: dict[str, float] = defaultdict(float)
    ready_from: dict[str, float] = {}
    tail_min: dict[str, float] = {}
    for task in tasks:
        work[task.model] += task.duration_s
        ready_from[task.model] = min(ready_from.get(task.model, es[task.id]), es[task.id])
        tail_min[task.model] = min(tail_min.get(task.model, tails[task.id]), tails[task.id])
    used = sorted(work)
    best = float("inf")
    for ks in itertools.product(range(1, gpus + 1), repeat=len(used)):
        busy = sum(work[m] + k * fastest[m] for m, k in zip(used, ks, strict=True)) / gpus
        per_model = max(
            max(fastest[m], ready_from[m]) + work[m] / k + tail_min[m]
            for m, k in zip(used, ks, strict=True)
        )
        best = min(best, max(busy, per_model))
    return max(best, max(ef.values()))
