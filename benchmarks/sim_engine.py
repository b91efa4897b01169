"""A discrete-event simulation of GPU workers claiming tasks, for the makespan benchmark.

Simulated clock, simulated GPUs (VRAM, resident models), model load costs and task
durations; the claim decision comes from a pluggable policy, so the real
``airig.brain.scheduling.residency.choose`` and the baselines run on identical inputs. A claim that
needs a model first unloads the evicted models (``UNLOAD_S`` each), then loads, then
runs: the GPU is busy for all of it, as a real worker running the swap protocol is.
Idle workers re-poll every ``POLL_S`` while work is READY, like the brain's long-poll.

``shared``: models one shared server serves instead of the workers' GPUs (the kit's one
Whisper before issue 34 §3): a task of such a model loads nothing on its worker's GPU and
waits for the server, which runs one request at a time and loads the model once; the
worker is busy until its answer comes back, as a worker waiting on the HTTP call is.

``contended``: per model, what all its tasks running at once may do together, in units of
one running alone (the seed's Whisper: 15-20x realtime on one GPU, 25x for three at once,
so 25 / 17.5): k tasks running share it (processor sharing), each at ``min(1, cap / k)``.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

UNLOAD_S = 1.0
POLL_S = 1.0


@dataclass(frozen=True)
class ModelSpec:
    name: str
    task_class: str
    vram_mb: int
    load_s: tuple[float, float]  # uniform range of one cold load


@dataclass
class SimTask:
    id: int
    model: str
    task_class: str
    duration_s: float
    priority: int = 5
    arrive_at: float = 0.0
    deps: tuple[int, ...] = ()
    ready_at: float | None = None
    claimed_at: float | None = None
    finished_at: float | None = None


@dataclass
class SimGpu:
    id: int
    vram_mb: int
    classes: tuple[str, ...]
    resident: dict[str, tuple[float, int]] = field(default_factory=dict)  # model -> (at, mb)
    busy: bool = False


@dataclass(frozen=True)
class Pick:
    task: SimTask
    evict: tuple[str, ...] = ()


# (gpu, ready tasks, now, all gpus) -> Pick or None
Policy = Callable[[SimGpu, list[SimTask], float, list[SimGpu]], Pick | None]
# called after each finished task: (model, load seconds or None, run seconds)
Observer = Callable[[str, float | None, float], None]


@dataclass
class RunResult:
    makespan_s: float
    loads: int
    load_s: float
    tasks: dict[int, SimTask]


class Simulation:
    def __init__(
        self,
        gpus: list[SimGpu],
        models: dict[str, ModelSpec],
        tasks: list[SimTask],
        policy: Policy,
        observer: Observer | None = None,
        seed: int = 7,
        shared: frozenset[str] = frozenset(),
        contended: dict[str, float] | None = None,
    ) -> None:
        self.gpus, self.models, self.policy, self.observer = gpus, models, policy, observer
        self.shared = shared
        # the shared server: the models it holds loaded, and when it is next free
        self.server_loaded: set[str] = set()
        self.server_free_at = 0.0
        self.contended = contended or {}
        # contended tasks running now: id -> [gpu, task, load_s, solo seconds left]
        self.active: dict[int, list] = {}
        self.active_since = 0.0
        self.version = 0  # finish events of an older sharing are stale
        self.tasks = {task.id: task for task in tasks}
        self.rng = random.Random(seed)
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = 0
        self.ready: dict[int, SimTask] = {}
        self.waiting_on: dict[int, set[int]] = {t.id: set(t.deps) for t in tasks}
        self.dependents: dict[int, list[int]] = {t.id: [] for t in tasks}
        for task in tasks:
            for dep in task.deps:
                self.dependents[dep].append(task.id)
        self.loads, self.load_total, self.poll_at = 0, 0.0, None

    def push(self, at: float, kind: str, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, payload))

    def run(self, limit_s: float = 10_000_000.0) -> RunResult:
        for task in self.tasks.values():
            self.push(task.arrive_at, "arrive", task.id)
        now = 0.0
        while self.events:
            now = self.events[0][0]
            if now > limit_s:
                raise RuntimeError("simulation did not finish: a policy starves work")
            while self.events and self.events[0][0] == now:
                _, _, kind, payload = heapq.heappop(self.events)
                self.handle(kind, payload, now)
            self.dispatch(now)
        unfinished = [t.id for t in self.tasks.values() if t.finished_at is None]
        if unfinished:
            raise RuntimeError(f"tasks never ran: {unfinished[:5]}")
        makespan = max(t.finished_at for t in self.tasks.values())
        return RunResult(makespan, self.loads, self.load_total, self.tasks)

    def handle(self, kind: str, payload: object, now: float) -> None:
        if kind == "arrive":
            self.arrive(self.tasks[payload], now)
        elif kind == "finish":
            self.finish(*payload, now)
        elif kind == "run_shared":  # a contended task's run begins (after its swap)
            self.share(now)
            gpu, task, load_s = payload
            self.active[task.id] = [gpu, task, load_s, task.duration_s]
            self.reshare(now)
        elif kind == "done_shared":
            task_id, version = payload
            if version == self.version:
                self.share(now)
                gpu, task, load_s, _left = self.active.pop(task_id)
                self.reshare(now)
                self.finish(gpu, task, load_s, now)
        elif kind == "poll":
            self.poll_at = None

    def finish(self, gpu: SimGpu, task: SimTask, load_s: float | None, now: float) -> None:
        gpu.busy = False
        task.finished_at = now
        if self.observer:
            self.observer(task.model, load_s, task.duration_s)
        for child in self.dependents[task.id]:
            self.waiting_on[child].discard(task.id)
            self.arrive(self.tasks[child], now)

    def rate(self, model: str) -> float:
        """How fast each running task of ``model`` goes, in units of running alone."""
        running = sum(1 for entry in self.active.values() if entry[1].model == model)
        return min(1.0, self.contended[model] / running) if running else 1.0

    def share(self, now: float) -> None:
        """Charge the time since the last change to each contended task's work left."""
        for entry in self.active.values():
            entry[3] -= (now - self.active_since) * self.rate(entry[1].model)
        self.active_since = now

    def reshare(self, now: float) -> None:
        """Their number changed: each one's finish moves (earlier events go stale)."""
        self.version += 1
        for task_id, entry in self.active.items():
            at = now + max(0.0, entry[3]) / self.rate(entry[1].model)
            self.push(at, "done_shared", (task_id, self.version))

    def arrive(self, task: SimTask, now: float) -> None:
        if not self.waiting_on[task.id] and now >= task.arrive_at and task.ready_at is None:
            task.ready_at = now
            self.ready[task.id] = task

    def dispatch(self, now: float) -> None:
        for gpu in self.gpus:
            if gpu.busy or not self.ready:
                continue
            pick = self.policy(gpu, list(self.ready.values()), now, self.gpus)
            if pick is None:
                continue
            self.start(gpu, pick, now)
        idle = any(not gpu.busy for gpu in self.gpus)
        if idle and self.ready and self.poll_at is None:
            self.poll_at = now + POLL_S
            self.push(self.poll_at, "poll", None)

    def start(self, gpu: SimGpu, pick: Pick, now: float) -> None:
        task = pick.task
        del self.ready[task.id]
        task.claimed_at = now
        busy_s = 0.0
        for model in pick.evict:
            if model in self.shared:
                continue  # the shared server's model is no worker's to unload
            gpu.resident.pop(model, None)
            busy_s += UNLOAD_S
        load_s = None
        if task.model in self.shared:
            self.serve_shared(gpu, task, now + busy_s)
            return
        if task.model not in gpu.resident:
            spec = self.models[task.model]
            load_s = self.rng.uniform(*spec.load_s)
            self.loads += 1
            self.load_total += load_s
            busy_s += load_s
            if sum(mb for _, mb in gpu.resident.values()) + spec.vram_mb > gpu.vram_mb:
                raise RuntimeError(f"policy overfilled GPU {gpu.id} loading {task.model}")
            gpu.resident[task.model] = (now + busy_s, spec.vram_mb)
        gpu.busy = True
        if task.model in self.contended:
            self.push(now + busy_s, "run_shared", (gpu, task, load_s))
            return
        self.push(now + busy_s + task.duration_s, "finish", (gpu, task, load_s))

    def serve_shared(self, gpu: SimGpu, task: SimTask, at: float) -> None:
        """The worker's request waits for the one shared server, which loads the model on
        first use and runs one request at a time; the worker waits for the answer."""
        start = max(at, self.server_free_at)
        load_s = None
        if task.model not in self.server_loaded:
            load_s = self.rng.uniform(*self.models[task.model].load_s)
            self.loads += 1
            self.load_total += load_s
            self.server_loaded.add(task.model)
        end = start + (load_s or 0.0) + task.duration_s
        self.server_free_at = end
        gpu.busy = True
        self.push(end, "finish", (gpu, task, load_s))
