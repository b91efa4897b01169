"""GPU-residency-aware claims: which READY task a worker gets, and what it must evict.

Dispatch costs milliseconds, a model swap costs seconds to minutes, so the policy
minimises swaps without starving anyone. Pure: no database, no clock, no I/O; the brain
and the makespan simulator (``benchmarks/sim.py``) drive the same function.

Rules, in order:

1. Resource tasks (explicit load / unload) before anything else.
2. A task is *compatible* when it needs no model or its model is resident on the worker.
   Compatible tasks are offered first. An incompatible task (a swap) is allowed only
   when it is *overdue* (it would pass ``max_wait_s`` if left for one more task), when
   its priority is ``urgent_priority`` (9) or more, or when nothing compatible is READY.
3. Overdue tasks go first, oldest first (the no-starvation guarantee), then urgent ones,
   then model-free tasks of the worker's preferred class, then effective priority::

       priority + min(aging_cap, waited / aging_step_s)
                + residency_bonus                          if the model is resident
                - min(swap_penalty_cap, reload_s / swap_penalty_unit_s)   otherwise

   and FIFO (ready time, then id) breaks ties.
4. An opportunistic swap (nothing compatible READY) brings in the model with the
   highest-priority task, among equals the one whose backlog would finish last (see
   ``_opportunistic_swap``). It must be worth it: some model must
   be served, so a model nobody holds always is; otherwise the backlog of that model per
   worker already holding it must exceed its reload cost, or those workers would drain
   it before this one finished loading.
5. Eviction: a model loaded less than ``min_resident_s`` ago (capped at its own reload
   cost) is not evicted by an opportunistic swap (no ping-pong); overdue and urgent
   tasks override this. Victims are
   models no READY task needs first, then the cheapest to reload (learned costs). When
   model or GPU sizes are unknown the GPU is treated as exclusive: a swap evicts all.

Every reload and run time is the one learned on the claiming worker's GPU model
(``WorkerState.gpu``) where it was measured there, else the model-wide one, else the
guess (``costs.py``): a swap to a model that loads in 5 s on this card is worth it where
the same model's 40 s on an older card is not. What the model's other holders take to
drain its backlog is their business, so that backlog is counted model-wide.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from airig.brain.scheduling.costs import ReloadCostModel, RunTimeModel
from airig.brain.scheduling.workers import eligible_classes


@dataclass(frozen=True)
class ResidencyPolicy:
    aging_step_s: float = 60.0
    aging_cap: float = 5.0
    max_wait_s: float = 900.0
    min_resident_s: float = 120.0
    residency_bonus: float = 2.0
    swap_penalty_unit_s: float = 60.0  # one priority point per minute of reload
    swap_penalty_cap: float = 3.0
    urgent_priority: int = 9


@dataclass(frozen=True)
class ResidentModel:
    name: str
    loaded_at: float
    vram_mb: int | None = None


@dataclass(frozen=True)
class WorkerState:
    """The claiming worker as the brain sees it."""

    classes: tuple[str, ...]
    resident: tuple[ResidentModel, ...] = ()
    vram_total_mb: int | None = None
    # its GPU label (estimates.py: the cards' model names, "cpu"), which picks the learned
    # costs of its card; None: the model-wide ones
    gpu: str | None = None

    @property
    def resident_names(self) -> frozenset[str]:
        return frozenset(model.name for model in self.resident)

    @property
    def preferred_class(self) -> str | None:
        return self.classes[0] if self.classes else None


@dataclass(frozen=True)
class ReadyTask:
    task_id: int
    task_class: str
    priority: int
    ready_at: float
    model: str | None = None
    vram_mb: int | None = None
    # READY tasks this candidate stands for: the brain passes only the oldest task of
    # each (class, model, priority) group, which outranks the rest of its group.
    count: int = 1


@dataclass
class Costs:
    """Learned reload and run times, shared by every claim."""

    reload: ReloadCostModel = field(default_factory=ReloadCostModel)
    runtime: RunTimeModel = field(default_factory=RunTimeModel)


@dataclass(frozen=True)
class Decision:
    task: ReadyTask
    reason: str  # resource | overdue | urgent | compatible | swap
    load: str | None = None  # the model to load before running (None: nothing to load)
    evict: tuple[str, ...] = ()


def swap_fields(decision: Decision | None) -> dict:
    """The decision's swap as ``Assignment`` fields: the worker unloads ``evict``, then
    loads ``load`` (needing ``need_vram_mb`` when the size is known) before the task."""
    if decision is None:
        return {}
    need = decision.task.vram_mb if decision.load else None
    return {"evict": list(decision.evict), "load": decision.load, "need_vram_mb": need}


@dataclass(frozen=True)
class _Claim:
    """One claim's inputs, so helpers do not pass six arguments around."""

    worker: WorkerState
    ready: Sequence[ReadyTask]
    now: float
    policy: ResidencyPolicy
    costs: Costs
    holders: Mapping[str, int]


def is_compatible(task: ReadyTask, worker: WorkerState) -> bool:
    return task.task_class == "resource" or not task.model or task.model in worker.resident_names


def effective_priority(
    task: ReadyTask, worker: WorkerState, now: float, policy: ResidencyPolicy, costs: Costs
) -> float:
    waited = max(0.0, now - task.ready_at)
    value = task.priority + min(policy.aging_cap, waited / policy.aging_step_s)
    if is_compatible(task, worker):
        return value + (policy.residency_bonus if task.model else 0.0)
    reload_s = costs.reload.cost(task.model, worker.gpu)
    return value - min(policy.swap_penalty_cap, reload_s / policy.swap_penalty_unit_s)


def _lookahead_s(claim: _Claim, compatible: Sequence[ReadyTask]) -> float:
    """How long until this worker claims again if it takes the best compatible task now."""
    if not compatible:
        return 0.0
    best = min(compatible, key=lambda task: _rank(task, claim, overdue=False))
    return claim.costs.runtime.estimate(best.model, claim.worker.gpu)


def _rank(task: ReadyTask, claim: _Claim, overdue: bool) -> tuple:
    worker = claim.worker
    urgent = task.priority >= claim.policy.urgent_priority
    return (
        task.task_class != "resource",
        not overdue,
        task.ready_at if overdue else 0.0,
        not urgent,
        not task.model and task.task_class != worker.preferred_class,
        -effective_priority(task, worker, claim.now, claim.policy, claim.costs),
        task.ready_at,
        task.task_id,
    )


def plan_eviction(task: ReadyTask, claim: _Claim, force: bool) -> tuple[str, ...] | None:
    """Models to unload before ``task`` can load; None when it cannot (yet) be done."""
    worker = claim.worker
    if is_compatible(task, worker):
        return ()
    residents = list(worker.resident)
    sized = _sized(residents)
    need, total = task.vram_mb, worker.vram_total_mb
    if sized is None or need is None or total is None:
        victims = residents  # unknown sizes: treat the GPU as exclusive
    else:
        if need > total:
            return None
        victims = _victims(task, claim, sized, need, total)
    if any(_protected(v, claim) for v in victims) and not force:
        return None
    return tuple(v.name for v in victims)


def _protected(resident: ResidentModel, claim: _Claim) -> bool:
    """Loaded too recently to evict: within ``min_resident_s``, capped at the model's own
    reload cost (rent-or-buy: holding an idle GPU longer than a reload would take costs
    more than the reload it might save)."""
    reload_s = claim.costs.reload.cost(resident.name, claim.worker.gpu)
    window = min(claim.policy.min_resident_s, reload_s)
    return claim.now - resident.loaded_at < window


def _sized(residents: list[ResidentModel]) -> list[tuple[ResidentModel, int]] | None:
    """Each resident model with its VRAM size, or None when any size is unknown."""
    sized = []
    for resident in residents:
        if resident.vram_mb is None:
            return None
        sized.append((resident, resident.vram_mb))
    return sized


def _victims(
    task: ReadyTask, claim: _Claim, sized: list[tuple[ResidentModel, int]], need: int, total: int
) -> list[ResidentModel]:
    """Fewest models to free ``need`` MiB of ``total``: unneeded first, then cheapest to
    reload."""
    needed = {t.model for t in claim.ready if t.model and t.task_id != task.task_id}
    free = total - sum(mb for _, mb in sized)
    order = sorted(
        sized,
        key=lambda pair: (
            pair[0].name in needed,
            claim.costs.reload.cost(pair[0].name, claim.worker.gpu),
            pair[0].loaded_at,
        ),
    )
    victims = []
    for resident, mb in order:
        if free >= need:
            break
        victims.append(resident)
        free += mb
    return victims


def swap_worth_it(task: ReadyTask, claim: _Claim) -> bool:
    """Would loading ``task.model`` here beat leaving its backlog to current holders?"""
    holders = claim.holders.get(task.model or "", 0)
    if holders <= 0:
        return True
    reload_s = claim.costs.reload.cost(task.model, claim.worker.gpu)
    return _backlog_s(task.model, claim) / holders > reload_s


def _decide(task: ReadyTask, claim: _Claim, reason: str, force: bool) -> Decision | None:
    evict = plan_eviction(task, claim, force)
    if evict is None:
        return None
    compatible = is_compatible(task, claim.worker)
    load = None if compatible or task.task_class == "resource" else task.model
    return Decision(task, reason, load=load, evict=evict)


def choose(
    worker: WorkerState,
    ready: Iterable[ReadyTask],
    now: float,
    policy: ResidencyPolicy | None = None,
    costs: Costs | None = None,
    holders: Mapping[str, int] | None = None,
) -> Decision | None:
    """The task this worker should run next, or None (nothing it may or should take).

    ``holders`` counts, per model, the *other* live workers that have it resident.
    """
    allowed = eligible_classes(worker.classes)
    mine = [task for task in ready if task.task_class in allowed]
    claim = _Claim(worker, mine, now, policy or ResidencyPolicy(), costs or Costs(), holders or {})
    compatible = [task for task in mine if is_compatible(task, worker)]
    horizon = claim.policy.max_wait_s - _lookahead_s(claim, compatible)

    def overdue(task: ReadyTask) -> bool:
        return now - task.ready_at >= horizon

    forced = [
        task
        for task in mine
        if not is_compatible(task, worker)
        and (overdue(task) or task.priority >= claim.policy.urgent_priority)
    ]
    for task in sorted([*compatible, *forced], key=lambda t: _rank(t, claim, overdue(t))):
        decision = _decide(task, claim, _reason(task, claim, overdue(task)), force=True)
        if decision is not None:
            return decision
    # Here nothing compatible is READY (a compatible task always gets a decision above).
    return _opportunistic_swap(mine, claim)


def _opportunistic_swap(mine: list[ReadyTask], claim: _Claim) -> Decision | None:
    """Nothing compatible is READY: pick which model to bring in, then its best task.

    The model whose best task has the highest priority wins; among equals, the one whose
    backlog would finish last if this worker joined its holders (reload + backlog per
    worker: longest-processing-time first), so GPUs spread over models in proportion to
    their work instead of all loading the first model in the queue.
    """
    best: dict[str, ReadyTask] = {}
    for task in sorted(mine, key=lambda t: _rank(t, claim, overdue=False)):
        best.setdefault(task.model or "", task)

    def model_key(task: ReadyTask) -> tuple:
        projected = claim.costs.reload.cost(task.model, claim.worker.gpu) + _backlog_s(
            task.model, claim
        ) / (claim.holders.get(task.model or "", 0) + 1)
        return (-task.priority, -projected, _rank(task, claim, overdue=False))

    for task in sorted(best.values(), key=model_key):
        if swap_worth_it(task, claim):
            decision = _decide(task, claim, "swap", force=False)
            if decision is not None:
                return decision
    return None


def _backlog_s(model: str | None, claim: _Claim) -> float:
    """The model's READY work in seconds, model-wide: its holders' cards drain most of it."""
    count = sum(task.count for task in claim.ready if task.model == model)
    return count * claim.costs.runtime.estimate(model)


def _reason(task: ReadyTask, claim: _Claim, overdue: bool) -> str:
    if task.task_class == "resource":
        return "resource"
    if overdue:
        return "overdue"
    if not is_compatible(task, claim.worker):
        return "urgent"
    return "compatible"
