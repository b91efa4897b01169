"""Learned estimates, kept and used: the figures of ``learned.py`` per (task type, model,
GPU) in the store's ``estimates`` table, the residency policy's costs fed from them, and
the VRAM check before a load.

- Every finished attempt (completed or failed) folds into its key's window, in the same
  transaction as the report, so what the brain learned survives a restart, is in every
  backup (the table is in the store) and is shared by two brains on one PostgreSQL store.
  The figures in memory are the stored ones (read at the first claim, again every
  ``REFRESH_S`` for what another brain learned, and after each write).
- Costs: a model's reload cost is the median load time of its keys (weighted by their
  samples), its run time the median run time, each per GPU label (the keys of that GPU)
  and model-wide (all its keys); a claim asks for the claiming worker's GPU, falling back
  to the model-wide figure where the model never ran on that GPU, and a model never run
  keeps the guess from its name (``costs.py``).
- The VRAM check: a task whose model the worker would have to load is not offered to it
  when the model's learned peak VRAM (on that GPU model, else the smallest on any GPU)
  does not fit what the load can have there: the GPU's free VRAM (its last heartbeat)
  plus what the models the swap evicts hold. The task stays READY, and its ``reason``
  says why until a worker takes it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airig.brain.scheduling import learned
from airig.brain.scheduling.learned import Observation
from airig.brain.scheduling.residency import Costs, ReadyTask, WorkerState
from airig.brain.store import estimates as stored

REFRESH_S = 60.0
WAITING = "waiting: learned peak "
REMARK_S = 60.0  # a model's reason is written at most this often (claims of many workers)
CPU = "cpu"
GIB = 1024.0
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Gpus:
    """A worker's GPUs as its last heartbeat reported them (sums over its cards)."""

    label: str  # the key's GPU part: the cards' model names, or "cpu"
    indexes: str  # "0", "0,1": what the waiting reason names
    free_mb: int
    total_mb: int


def gpus_of(reported: Iterable[Mapping[str, Any]]) -> Gpus:
    """The worker's GPUs from its reported ``GpuInfo`` list (dicts)."""
    cards = [g for g in reported if isinstance(g, Mapping)]
    names = sorted({_label(str(g.get("name") or "gpu")) for g in cards})
    return Gpus(
        label="+".join(names)[:128] if cards else CPU,
        indexes=",".join(str(g.get("index")) for g in cards),
        free_mb=sum(int(g.get("vram_free_mb") or 0) for g in cards),
        total_mb=sum(int(g.get("vram_total_mb") or 0) for g in cards),
    )


def _label(name: str) -> str:
    # A worker names its card: keep what a key and a reason may hold (PostgreSQL's text
    # holds no NUL; a dashboard shows it), at most 64 characters.
    kept = "".join(c if c.isprintable() and c.isascii() else "?" for c in name.strip())
    return kept[:64] or "gpu"


class Estimates:
    """The learned figures in memory, as stored; thread-safe (request threads share it)."""

    def __init__(self, costs: Costs) -> None:
        self.costs = costs
        # model -> {key: figures}: a claim and a completion look up one model's keys
        self._rows: dict[str, dict[Key, dict[str, Any]]] = {}
        self._read_at: float | None = None
        self._labels: dict[str, str] = {}  # worker -> GPU label, from heartbeats
        self._marked: dict[tuple[str, str], tuple[str, float]] = {}  # (class, model) ->
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ reading
    def ensure(self, conn: sqlite3.Connection, now: float) -> None:
        """Read the stored figures when never read, or ``REFRESH_S`` ago."""
        if self._read_at is not None and now - self._read_at < REFRESH_S:
            return
        rows: dict[str, dict[Key, dict[str, Any]]] = {}
        for row in stored.every(conn):
            rows.setdefault(row["model"], {})[(row["task_type"], row["model"], row["gpu"])] = dict(
                row
            )
        with self._lock:
            self._rows, self._read_at = rows, now
        self._feed_costs(rows)

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            found = [(key, row) for keys in self._rows.values() for key, row in keys.items()]
        return [dict(row) for _, row in sorted(found)]

    def _feed_costs(self, models: Iterable[str]) -> None:
        for model in models:
            if not model:
                continue
            mine = self._of(model)
            by_gpu: dict[str | None, list[dict[str, Any]]] = {None: mine}  # None: model-wide
            for row in mine:
                by_gpu.setdefault(row["gpu"], []).append(row)
            for gpu, rows in by_gpu.items():
                load = _weighted(rows, "load_p50_s")
                run = _weighted([r for r in rows if r["task_type"] != "resource"], "run_p50_s")
                if load is not None:
                    self.costs.reload.learn(model, load, gpu)
                if run is not None:
                    self.costs.runtime.learn(model, run, gpu)

    def _of(self, model: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._rows.get(model, {}).values())

    # ------------------------------------------------------------------ learning
    def heard(self, worker_id: str, gpus: Iterable[Any]) -> None:
        """A heartbeat's GPUs: the worker's label for the keys of its attempts."""
        dumped = [g.model_dump() if hasattr(g, "model_dump") else g for g in gpus]
        with self._lock:
            self._labels[worker_id] = gpus_of(dumped).label

    def label(self, conn: sqlite3.Connection, worker_id: str) -> str:
        with self._lock:
            known = self._labels.get(worker_id)
        if known is None:
            known = self._gpus(conn, worker_id).label
            with self._lock:
                self._labels[worker_id] = known
        return known

    def _gpus(self, conn: sqlite3.Connection, worker_id: str) -> Gpus:
        text = stored.gpus_json(conn, worker_id)
        try:
            reported = json.loads(text) if text else []
        except ValueError:
            reported = []
        return gpus_of(reported if isinstance(reported, list) else [])

    def observe(
        self, conn: sqlite3.Connection, task_type: str, model: str | None, worker_id: str,
        seen: Observation, now: float,
    ) -> dict[str, Any]:  # fmt: skip
        """Fold one attempt into its key, stored in the caller's transaction; its figures."""
        self.ensure(conn, now)
        key = (task_type, model or "", self.label(conn, worker_id))
        before = stored.window(conn, *key)
        try:
            window = json.loads(before["window_json"]) if before else {}
        except ValueError:
            window = {}  # a damaged row starts again rather than failing the report
        folded = learned.fold(window if isinstance(window, dict) else {}, seen)
        figures = {
            "samples": (before["samples"] if before else 0) + 1,
            "failures": (before["failures"] if before else 0) + int(seen.failed),
            "updated_at": now, **learned.figures(folded),
        }  # fmt: skip
        stored.save(conn, key, figures, json.dumps(folded, separators=(",", ":")))
        with self._lock:
            self._rows.setdefault(key[1], {})[key] = {
                "task_type": key[0], "model": key[1], "gpu": key[2], **figures,
            }  # fmt: skip
        self._feed_costs([key[1]])
        return figures

    # ------------------------------------------------------------------ the VRAM check
    def peak_mb(self, model: str, gpu: str) -> int | None:
        """The model's learned peak on ``gpu`` (the largest over task types), else the
        smallest on any GPU; None when never measured."""
        rows = self._of(model)
        here = [r["vram_peak_mb"] for r in rows if r["gpu"] == gpu and r["vram_peak_mb"]]
        if here:
            return int(max(here))
        anywhere = [r["vram_peak_mb"] for r in rows if r["vram_peak_mb"]]
        return int(min(anywhere)) if anywhere else None

    def fitting(
        self, conn: sqlite3.Connection, worker_id: str, worker: WorkerState,
        heads: list[ReadyTask], now: float,
    ) -> list[ReadyTask]:  # fmt: skip
        """``heads`` less the tasks whose model's learned peak does not fit this worker's
        GPU; each left out says why in its ``reason``."""
        self.ensure(conn, now)
        loads = [h for h in heads if _needs_load(h, worker)]
        gpu_label = self.label(conn, worker_id) if loads else CPU
        if gpu_label == CPU:
            return heads
        peaks = {h.model: self.peak_mb(h.model or "", gpu_label) for h in loads}
        if not any(peaks.values()):
            return heads  # nothing measured: the declared guesses, no check
        gpus = self._gpus(conn, worker_id)
        if gpus.total_mb <= 0:
            return heads  # the worker does not know its VRAM: no check
        room = self._room(gpus, worker)
        kept = []
        for head in heads:
            peak = peaks.get(head.model) if head in loads else None
            if peak is None or peak <= room:
                kept.append(head)
                continue
            reason = (
                f"{WAITING}{peak / GIB:.1f} GiB of {head.model} does not fit GPU "
                f"{gpus.indexes}'s {room / GIB:.1f} GiB free on {worker_id}"
            )
            self._mark(conn, head, reason, now)
        return kept

    def _room(self, gpus: Gpus, worker: WorkerState) -> int:
        """What a load can have: free VRAM plus what the evicted residents hold (a swap
        evicts them all: unknown sizes make the GPU exclusive, residency.py); the whole
        card when a resident's size was never learned."""
        held = [self.peak_mb(model, gpus.label) for model in worker.resident_names]
        if any(size is None for size in held):
            return gpus.total_mb
        return min(gpus.total_mb, gpus.free_mb + sum(size or 0 for size in held))

    def _mark(self, conn: sqlite3.Connection, head: ReadyTask, reason: str, now: float) -> None:
        group = (head.task_class, head.model or "")
        with self._lock:
            last = self._marked.get(group)
            # once a minute at most: tasks that came since get it, many claims write once
            if last is not None and now - last[1] < REMARK_S:
                return
            self._marked[group] = (reason, now)
        stored.mark_waiting(conn, head.task_class, head.model or "", reason, WAITING)

    def placed(self, conn: sqlite3.Connection, task: ReadyTask) -> None:
        """A task of this group was placed: its waiting tasks no longer say they cannot."""
        group = (task.task_class, task.model or "")
        with self._lock:
            if self._marked.pop(group, None) is None:
                return
        stored.clear_waiting(conn, task.task_class, task.model or "", WAITING)


def _needs_load(head: ReadyTask, worker: WorkerState) -> bool:
    return (
        bool(head.model)
        and head.task_class != "resource"
        and (head.model not in worker.resident_names)
    )


def _weighted(rows: list[dict[str, Any]], column: str) -> float | None:
    """The figure over several keys, each counting by its samples."""
    pairs = [(float(r[column]), int(r["samples"] or 1)) for r in rows if r[column] is not None]
    if not pairs:
        return None
    return sum(v * n for v, n in pairs) / sum(n for _, n in pairs)
