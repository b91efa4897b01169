"""The claim policies the makespan benchmark compares.

``ResidencyClaims`` adapts the brain's real policy (``airig.brain.scheduling.residency.choose``) and
feeds it the simulated measurements, exactly as the brain feeds it workers' reports.
The baselines: FIFO (oldest READY task, load whatever it needs, evict least recently
loaded) and strict priority (highest priority, then FIFO; no aging, no max-wait).
"""

from __future__ import annotations

from sim_engine import ModelSpec, Pick, SimGpu, SimTask

from airig.brain.scheduling.residency import (
    Costs,
    ReadyTask,
    ResidencyPolicy,
    ResidentModel,
    WorkerState,
    choose,
)


class ResidencyClaims:
    def __init__(
        self, models: dict[str, ModelSpec], policy: ResidencyPolicy,
        labels: dict[int, str] | None = None,
    ) -> None:  # fmt: skip
        self.models, self.policy, self.costs = models, policy, Costs()
        # GPU id -> its GPU model's label, as the brain keys its learned costs (None: the
        # model-wide costs, every card alike)
        self.labels = dict(labels or {})
        # the models a shared server holds loaded (Simulation.server_loaded): every worker
        # whose requests go there reports them resident, as the kit's workers report the
        # shared Whisper's loaded models (airig/worker/runner.py resident_models)
        self.shared_loaded: set[str] = set()

    def observe(self, model: str, load_s: float | None, run_s: float) -> None:
        if load_s is not None:
            self.costs.reload.observe(model, load_s * 1000)
        self.costs.runtime.observe(model, run_s * 1000)

    def __call__(
        self, gpu: SimGpu, ready: list[SimTask], now: float, gpus: list[SimGpu]
    ) -> Pick | None:
        shared = tuple(ResidentModel(name, 0.0, 0) for name in sorted(self.shared_loaded))
        worker = WorkerState(
            classes=gpu.classes,
            resident=tuple(ResidentModel(name, at, mb) for name, (at, mb) in gpu.resident.items())
            + shared,
            vram_total_mb=gpu.vram_mb,
            gpu=self.labels.get(gpu.id),
        )
        holders: dict[str, int] = {}
        for other in gpus:
            if other is not gpu:
                for name in [*other.resident, *self.shared_loaded]:
                    holders[name] = holders.get(name, 0) + 1
        by_id = {task.id: task for task in ready}
        candidates = [
            ReadyTask(t.id, t.task_class, t.priority, t.ready_at, t.model,
                      self.models[t.model].vram_mb)
            for t in ready
        ]  # fmt: skip
        decision = choose(worker, candidates, now, self.policy, self.costs, holders)
        if decision is None:
            return None
        return Pick(by_id[decision.task.task_id], decision.evict)


def _lru_evictions(gpu: SimGpu, need_mb: int) -> tuple[str, ...]:
    free = gpu.vram_mb - sum(mb for _, mb in gpu.resident.values())
    victims = []
    for name, (_, mb) in sorted(gpu.resident.items(), key=lambda item: item[1][0]):
        if free >= need_mb:
            break
        victims.append(name)
        free += mb
    return tuple(victims)


class OrderedClaims:
    """Take the first READY task of the worker's classes in a fixed order; load as needed."""

    def __init__(self, models: dict[str, ModelSpec], by_priority: bool) -> None:
        self.models, self.by_priority = models, by_priority

    def observe(self, model: str, load_s: float | None, run_s: float) -> None:
        """Baselines learn nothing."""

    def __call__(
        self, gpu: SimGpu, ready: list[SimTask], now: float, gpus: list[SimGpu]
    ) -> Pick | None:
        mine = [t for t in ready if t.task_class in gpu.classes]
        if not mine:
            return None
        if self.by_priority:
            task = min(mine, key=lambda t: (-t.priority, t.ready_at, t.id))
        else:
            task = min(mine, key=lambda t: (t.ready_at, t.id))
        if task.model in gpu.resident:
            return Pick(task)
        return Pick(task, _lru_evictions(gpu, self.models[task.model].vram_mb))
