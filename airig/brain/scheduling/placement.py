"""The brain's live residency state around the pure policy in ``residency.py``.

It remembers since when each worker has held each model (from claims, heartbeats and
resource-task reports), learns reload and run times from completed attempts, keeps the
thermal guard fed from heartbeats, and answers the one question a claim asks: which task
should this worker run next. Events it records: ``model.load`` / ``model.unload`` (with
durations), ``gpu.thermal_block`` / ``gpu.thermal_resume`` and ``service.held`` /
``service.resumed``.

A compute service that is down (unreachable, restarting during ``update`` or ``restart``)
holds its tasks back: they stay READY and are offered to no worker until it answers again,
so an outage costs a task no attempt. Two sources say a service is down:

- the brain's probes (``ops/probes.py``, passed in as ``outages``): for this machine's
  workers (``WorkerView.local``; a joined rig has compute services of its own), from the
  first failed probe of a run that reached ``BRAIN_PROBE_DOWN_AFTER``, until one answers;
- a worker's own report (``suspect``): an attempt that found its service unreachable
  holds that service's tasks back from that worker for ``BRAIN_PROBE_INTERVAL_S`` (the
  probes may not have noticed yet, or may not probe that worker's server).

A task never waits for ever: ``hold_waiting`` (after each probe round) sets each held
task's ``reason`` to why it waits and fails one that has waited for a down service longer
than ``AIRIG_MAX_WAIT_S``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airig.brain.scheduling import candidates
from airig.brain.scheduling.estimates import Estimates
from airig.brain.scheduling.learned import Observation, rate, seconds
from airig.brain.scheduling.residency import (
    Costs,
    Decision,
    ResidencyPolicy,
    ResidentModel,
    WorkerState,
)
from airig.brain.scheduling.residency import choose as choose_task
from airig.brain.scheduling.thermal import ThermalGuard
from airig.brain.scheduling.workers import WorkerView, eligible_classes
from airig.brain.settings import BrainSettings
from airig.brain.store import queue, states, workers
from airig.brain.store.events import Outbox, record
from airig.common.protocol import MAX_VRAM_MB, GpuInfo

# A "load" this quick found the model resident: an event, not a reload-cost sample.
ALREADY_LOADED_MS = 100.0
_NO_TASK = {"plan_id": None, "key": None, "id": None, "attempt": None, "task_class": None}
# service -> (since when it is down, wall clock; why): what the probes say is down now
Outages = Callable[[], Mapping[str, tuple[float, str]]]
WAITING = "waiting for {service}: "
SERVICE_DOWN = "service_unreachable"


def _no_outages() -> Mapping[str, tuple[float, str]]:
    return {}


class Placement:
    def __init__(self, settings: BrainSettings, outages: Outages = _no_outages) -> None:
        self.policy = ResidencyPolicy(
            aging_step_s=settings.aging_step_s,
            aging_cap=settings.aging_cap,
            max_wait_s=settings.max_wait_s,
            min_resident_s=settings.min_resident_s,
        )
        self.costs = Costs()
        self.estimates = Estimates(self.costs)  # learned, stored, feeding self.costs
        self.thermal = ThermalGuard(settings.thermal_limit_c, settings.thermal_hysteresis_c)
        self.alive_s = settings.lease_s
        self._loaded_at: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self.outages = outages
        self.max_wait_s = settings.max_wait_s
        self.suspect_s = settings.probe_interval_s
        self._suspects: dict[tuple[str, str], float] = {}  # (worker, service) -> until
        self.marked: set[str] = set()  # services whose waiting tasks carry a reason

    # ------------------------------------------------------------------ claims
    def choose(
        self, conn: sqlite3.Connection, worker_id: str, view: WorkerView, now: float
    ) -> Decision | None:
        """The task ``worker_id`` should lease now, or None (no fit, or its GPU is hot)."""
        if self.thermal.blocked(worker_id):
            return None
        # its GPU's label picks the costs learned on that GPU model (residency.py)
        state = self.worker_state(worker_id, view, now, self.estimates.label(conn, worker_id))
        held = self.held(worker_id, view.local, now)
        heads = candidates.group_heads(conn, eligible_classes(view.classes), view.trusted, held)
        # The VRAM check before a load: a model whose learned peak does not fit is not
        # placed here (its tasks say why while they wait).
        heads = self.estimates.fitting(conn, worker_id, state, heads, now)
        holders = self.holders(conn, worker_id, now)
        decision = choose_task(state, heads, now, self.policy, self.costs, holders)
        if decision is not None:
            self.estimates.placed(conn, decision.task)
        return decision

    def worker_state(
        self, worker_id: str, view: WorkerView, now: float, gpu: str | None = None
    ) -> WorkerState:
        """The worker with its resident models (a model first seen now counts as loaded
        now) and its GPU label (``gpu``)."""
        with self._lock:
            known = self._loaded_at.setdefault(worker_id, {})
            for gone in set(known) - view.resident_models:
                del known[gone]
            for model in view.resident_models:
                known.setdefault(model, now)
            resident = tuple(ResidentModel(name, at) for name, at in sorted(known.items()))
        return WorkerState(classes=view.classes, resident=resident, gpu=gpu)

    def holders(self, conn: sqlite3.Connection, worker_id: str, now: float) -> dict[str, int]:
        """Per model, how many other live workers hold it."""
        return workers.model_holders(conn, worker_id, now - self.alive_s)

    # ------------------------------------------------------------------ outages
    def held(self, worker_id: str, local: bool, now: float) -> set[str]:
        """The compute services whose tasks this worker is not offered now."""
        down = set(self.outages()) if local else set()
        with self._lock:
            for (worker, service), until in list(self._suspects.items()):
                if until <= now:
                    del self._suspects[(worker, service)]
                elif worker == worker_id:
                    down.add(service)
        return down

    def suspect(self, worker_id: str, task: sqlite3.Row, now: float) -> str | None:
        """A worker found the service of ``task`` unreachable: hold that service's tasks
        back from it for ``suspect_s``. The service, or None (the task needs none)."""
        service = queue.service_of(task["type"], task["payload_json"])
        if service is not None:
            with self._lock:
                self._suspects[(worker_id, service)] = now + self.suspect_s
        return service

    def hold_waiting(self, conn: sqlite3.Connection, outbox: Outbox, now: float) -> None:
        """Say in each held task why it waits; fail one that has waited for a down service
        longer than ``max_wait_s``; an event when a service is held and when it resumes."""
        down = dict(self.outages())
        if not down and not self.marked:
            return
        for service, (since, why) in sorted(down.items()):
            cutoff = now - self.max_wait_s
            if since < cutoff:
                for task in queue.waited_too_long(conn, service, cutoff):
                    waited = now - max(since, task["ready_at"] or since)
                    error = (
                        f"{service} was down for the {waited:.0f} s this task waited "
                        f"({why}); it waits at most AIRIG_MAX_WAIT_S ({self.max_wait_s:g} s)"
                    )
                    states.fail_terminal(
                        conn, outbox, task, now, SERVICE_DOWN, error, f"{service} down"
                    )  # fmt: skip
            reason = (
                f"{WAITING.format(service=service)}down ({why}); offered to no worker until "
                f"it answers, for at most AIRIG_MAX_WAIT_S ({self.max_wait_s:g} s)"
            )
            queue.mark_waiting(conn, service, reason)
            if service not in self.marked:
                record(conn, outbox, "service.held", {**_NO_TASK, "model": None}, now,
                       service=service, reason=reason)  # fmt: skip
        for service in sorted(self.marked - set(down)):
            queue.clear_waiting(conn, service, WAITING.format(service=service))
            back = f"{service} answers again: its tasks are offered"
            record(conn, outbox, "service.resumed", {**_NO_TASK, "model": None}, now,
                   service=service, reason=back)  # fmt: skip
            outbox.work_ready = True  # long-polling claims look again
        self.marked = set(down)

    # ------------------------------------------------------------------ reports
    def observe_completion(
        self, conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row,
        metrics: dict[str, Any], worker_id: str, now: float,
    ) -> None:  # fmt: skip
        """Learn from a finished attempt (stored: ``estimates.py``); a model load or unload
        becomes an event."""
        load_s: float | None = None
        changes = model_changes(task, metrics)
        for action, model, duration_ms in changes:
            with self._lock:
                known = self._loaded_at.setdefault(worker_id, {})
                if action == "load":
                    known[model] = now
                else:
                    known.pop(model, None)
            if action == "load" and duration_ms >= ALREADY_LOADED_MS and model == task["model"]:
                load_s = seconds(duration_ms, 1 / 1000)
            elif action == "load" and duration_ms >= ALREADY_LOADED_MS:  # another model's
                seen = Observation(load_s=seconds(duration_ms, 1 / 1000))
                self.estimates.observe(conn, "resource", model, worker_id, seen, now)
        self.learn(conn, task, worker_id, now, metrics, load_s)
        for action, model, duration_ms in changes:
            # A load event carries the reload cost learned with it, so it can be followed.
            reload_s = self.costs.reload.cost(model, self.estimates.label(conn, worker_id))
            learned = {"reload_cost_s": round(reload_s, 3)}
            record(
                conn, outbox, f"model.{action}", task, now, worker_id=worker_id, model=model,
                duration_ms=round(duration_ms), **(learned if action == "load" else {}),
            )  # fmt: skip

    def learn(
        self, conn: sqlite3.Connection, task: sqlite3.Row, worker_id: str, now: float,
        metrics: Mapping[str, Any] | None, load_s: float | None = None,
    ) -> None:  # fmt: skip
        """One attempt into its key's estimates: a completion's ``metrics`` (its run time,
        peak VRAM, tokens per second), or a failure (``metrics`` None). Tasks of a model
        only: the scheduler's costs and the VRAM check are per model, and model-free tasks
        (shell, media) come hundreds a second, where a store write each would cost their
        exchanges about 2 ms more (measured, SQLite and PostgreSQL)."""
        if not task["model"]:
            return
        if metrics is None:
            seen = Observation(failed=True)
        else:
            resource = task["type"] == "resource"
            seen = Observation(
                run_s=None if resource else seconds(metrics.get("wall_ms"), 1 / 1000),
                load_s=load_s, vram_mb=_vram(metrics.get("peak_vram_mb")),
                tokens_per_s=rate(metrics.get("tokens_per_s")),
            )  # fmt: skip
        self.estimates.observe(conn, task["type"], task["model"], worker_id, seen, now)

    def observe_failure(
        self, conn: sqlite3.Connection, task: sqlite3.Row, worker_id: str, now: float
    ) -> None:
        """A failed attempt (the task's own failure): the key's failure rate."""
        self.learn(conn, task, worker_id, now, None)

    def observe_heartbeat(
        self, conn: sqlite3.Connection, outbox: Outbox, worker_id: str,
        gpus: Iterable[GpuInfo], now: float,
    ) -> None:  # fmt: skip
        """Feed the thermal guard; crossing the limit either way is an event."""
        gpus = list(gpus)
        self.estimates.heard(worker_id, gpus)
        hottest = max((g.temperature_c for g in gpus if g.temperature_c is not None), default=None)
        change = self.thermal.update(worker_id, hottest)
        if change is None:
            return
        kind = "gpu.thermal_block" if change.blocked else "gpu.thermal_resume"
        reason = (
            f"{change.temperature_c:g} °C >= limit {self.thermal.limit_c:g} °C: no new claims"
            if change.blocked
            else f"{change.temperature_c:g} °C < {self.thermal.resume_below_c:g} °C: claiming"
        )
        record(conn, outbox, kind, {**_NO_TASK, "model": None}, now,
               worker_id=worker_id, reason=reason)  # fmt: skip

    def warnings(self, worker_id: str) -> list[str]:
        if self.thermal.blocked(worker_id):
            return [
                f"GPU above {self.thermal.limit_c:g} °C: claims paused until it cools "
                f"below {self.thermal.resume_below_c:g} °C"
            ]
        return []


def model_changes(task: sqlite3.Row, metrics: dict[str, Any]) -> list[tuple[str, str, float]]:
    """(load | unload, model, ms) reported by a resource task or a worker-side swap."""
    changes: list[tuple[str, str, float]] = []
    if task["type"] == "resource":
        model = task["model"] or _payload_model(task)
        for action, key in (("load", "load_ms"), ("unload", "unload_ms")):
            if model and isinstance(metrics.get(key), int | float):
                changes.append((action, model, float(metrics[key])))
    swap = metrics.get("swap")
    if isinstance(swap, dict):
        for model, ms in (swap.get("unload_ms") or {}).items():
            changes.append(("unload", model, float(ms)))
        if swap.get("loaded") and isinstance(swap.get("load_ms"), int | float):
            changes.append(("load", swap["loaded"], float(swap["load_ms"])))
    return changes


def _vram(value: Any) -> float | None:
    """A completion's peak VRAM (MiB): the protocol bounds the report's typed field; an
    older worker's free-form figure is checked here the same way."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 < value <= MAX_VRAM_MB else None


def _payload_model(task: sqlite3.Row) -> str | None:
    try:
        return json.loads(task["payload_json"]).get("model")
    except (ValueError, AttributeError):
        return None
