"""Scenarios (e) of the makespan benchmark (issue 40 §1): models whose real costs differ
from the guesses the brain makes from their names, scheduled from those guesses or from
estimates learned from an earlier run.

Usage: python benchmarks/sim_learned.py [--seed 7] [--sweep 20]   (sim.py adds its rows)

A stream of 7B chat answers (60, one per 10 s; its guess, 105 s a load, is right) on 3
GPUs of 12 GB, where the 7B and a 14B model do not fit together; at 300 s a burst comes
of work the names misjudge: (e1) eight 14B answers of 50-70 s, the model loading in about
40 s where its name says 14 x 15 = 210 s; (e2) six embedding batches of 80-100 s, where a
model never run is guessed at 30 s a task; (e3) both. Every claim is the brain's real
``residency.choose``; what is learned is the brain's real ``scheduling/learned.py`` (each
model's window of observations, recency-weighted medians), fed to the costs with
``learn`` as ``scheduling/estimates.py`` does:

- guesses: an empty history (a model never run, or a brain before issue 40 after a
  restart); it learns as tasks finish;
- learned estimates: the history one earlier run of the same workload (another seed)
  left in the store.

(e4) the same 7B stream and 14B burst on mismatched GPUs: one card loads the 14B in about
5 s, two older ones in about 40 s (a slower bus and disk). The history is kept per
(model, GPU model) as the brain keeps it, and fed to the costs per GPU and model-wide as
``scheduling/estimates.py`` feeds them; "model-wide costs" claims without the worker's GPU
label (every card weighs a swap by the same figure: the brain before its costs were per
GPU), "per-GPU costs" with it.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from sim_bound import lower_bound  # noqa: E402
from sim_engine import ModelSpec, Pick, Policy, SimGpu, SimTask, Simulation  # noqa: E402
from sim_policies import OrderedClaims, ResidencyClaims  # noqa: E402

from airig.brain.scheduling import learned  # noqa: E402
from airig.brain.scheduling.learned import Observation  # noqa: E402
from airig.brain.scheduling.residency import ResidencyPolicy  # noqa: E402

SMALL, BIG, EMBED = "qwen2.5:7b", "qwen2.5:14b", "nomic-embed-text"
MODELS = {
    SMALL: ModelSpec(SMALL, "llm", 5000, (90.0, 120.0)),  # the guess (105 s) is right
    BIG: ModelSpec(BIG, "llm", 9300, (38.0, 42.0)),  # guessed 210 s from "14b"
    EMBED: ModelSpec(EMBED, "llm", 800, (3.0, 5.0)),  # its 4 s guess is right
}
CARD_MB = 12 * 1024
GPUS = 3
POLICY = ResidencyPolicy()
BURST_AT = 300.0
# name -> (14B answers, embedding batches) in the burst
BURSTS = {
    "e1. 7B stream + 14B burst (loads in 40 s, guessed 210 s), 3 GPUs": (8, 0),
    "e2. 7B stream + embed batches (3x the guess), 3 GPUs": (0, 6),
    "e3. 7B stream + both bursts, 3 GPUs": (6, 4),
}


def misjudged(rng: random.Random, big: int, embed: int) -> list[SimTask]:
    """The 7B stream and the burst the names misjudge."""
    tasks = [SimTask(i, SMALL, "llm", round(rng.uniform(20, 40), 1), arrive_at=10.0 * i)
             for i in range(60)]  # fmt: skip
    for i in range(big):
        tasks.append(SimTask(100 + i, BIG, "llm", round(rng.uniform(50, 70), 1),
                             arrive_at=BURST_AT))  # fmt: skip
    for i in range(embed):
        tasks.append(SimTask(200 + i, EMBED, "llm", round(rng.uniform(80, 100), 1),
                             arrive_at=BURST_AT))  # fmt: skip
    return tasks


class LearnedClaims(ResidencyClaims):
    """The residency policy with the brain's learned estimates: each model's window of
    observations (``learned.fold``), its medians set as the costs (``learn``)."""

    def __init__(self, history: dict[str, dict[str, list[float]]] | None = None) -> None:
        super().__init__(MODELS, POLICY)
        self.windows: dict[str, dict[str, list[float]]] = {
            model: dict(window) for model, window in (history or {}).items()
        }
        for model in self.windows:
            self._learn(model)

    def observe(self, model: str, load_s: float | None, run_s: float) -> None:
        seen = Observation(run_s=run_s, load_s=load_s)
        self.windows[model] = learned.fold(self.windows.get(model, {}), seen)
        self._learn(model)

    def _learn(self, model: str) -> None:
        figures = learned.figures(learned.fold(self.windows[model], Observation()))
        if figures["load_p50_s"] is not None:
            self.costs.reload.learn(model, float(figures["load_p50_s"]))
        if figures["run_p50_s"] is not None:
            self.costs.runtime.learn(model, float(figures["run_p50_s"]))


def _run(tasks: list[SimTask], claims, seed: int):
    gpus = [SimGpu(i, CARD_MB, ("llm",)) for i in range(GPUS)]
    copies = [SimTask(**vars(t)) for t in tasks]
    return Simulation(gpus, MODELS, copies, claims, claims.observe, seed).run()


def history(seed: int, big: int, embed: int) -> dict[str, dict[str, list[float]]]:
    """What an earlier run of the same kind of workload left in the store."""
    claims = LearnedClaims()
    _run(misjudged(random.Random(seed + 1000), big, embed), claims, seed + 1000)
    return claims.windows


def rows(name: str, seed: int) -> list[dict]:
    """sim.py's table rows for one scenario (e): guesses, learned estimates, FIFO."""
    big, embed = BURSTS[name]
    tasks = misjudged(random.Random(seed), big, embed)
    bound = lower_bound(tasks, MODELS, GPUS)
    out = []
    for label, claims in (
        ("residency, guesses", LearnedClaims()),
        ("residency, learned estimates", LearnedClaims(history(seed, big, embed))),
        ("FIFO", OrderedClaims(MODELS, by_priority=False)),
    ):
        result = _run(tasks, claims, seed)
        waits = [t.claimed_at - t.ready_at for t in result.tasks.values()]
        out.append({
            "scenario": name, "policy": label, "makespan_s": round(result.makespan_s),
            "lower_bound_s": round(bound), "x_bound": round(result.makespan_s / bound, 3),
            "loads": result.loads, "load_s": round(result.load_s),
            "max_wait_s": round(max(waits)), "low_priority_wait_s": None,
            "urgent_wait_s": None,
        })  # fmt: skip
    fifo = out[-1]["makespan_s"]
    for row in out:
        row["fifo_speedup"] = round(fifo / row["makespan_s"], 2)
    return out


def gain(found: list[dict]) -> float:
    """Makespan with guesses over makespan with learned estimates (> 1: learning helped)."""
    by = {r["policy"]: r["makespan_s"] for r in found}
    return round(by["residency, guesses"] / by["residency, learned estimates"], 3)


def sweep(seeds: range) -> list[str]:
    """Each scenario's gain over many random draws: is the default seed representative?"""
    notes = []
    for name in BURSTS:
        gains = sorted(gain(rows(name, seed)) for seed in seeds)
        notes.append(
            f"({name.split('.')[0]}) guesses / learned estimates over seeds {seeds.start}-"
            f"{seeds.stop - 1}: {gains[0]}-{gains[-1]}x (median {gains[len(gains) // 2]})"
        )
    return notes


# (e4): GPU id -> its GPU model; the new card loads the 14B in ~5 s, the old ones in ~40 s
NEW, OLD = "new card", "old card"
CARDS = {0: NEW, 1: OLD, 2: OLD}
CARD_LOADS = {NEW: {BIG: (4.0, 6.0)}, OLD: {}}  # else MODELS' ranges
MIXED = "e4. 7B stream + 14B burst, the 14B loading in 5 s on 1 GPU and 40 s on 2, 3 GPUs"
Window = dict[str, list[float]]


def card_models(label: str) -> dict[str, ModelSpec]:
    return {name: replace(spec, load_s=CARD_LOADS[label].get(name, spec.load_s))
            for name, spec in MODELS.items()}  # fmt: skip


class MixedGpus(Simulation):
    """Each card loads a model in its own time; the observer hears which card ran it."""

    def __init__(self, tasks: list[SimTask], policy: Policy, seed: int,
                 learner: PerGpuClaims | None = None) -> None:  # fmt: skip
        gpus = [SimGpu(i, CARD_MB, ("llm",)) for i in range(GPUS)]
        copies = [SimTask(**vars(t)) for t in tasks]
        super().__init__(gpus, MODELS, copies, policy, self.heard if learner else None, seed)
        self.learner, self.base = learner, self.models
        self.per_card = {gpu_id: card_models(label) for gpu_id, label in CARDS.items()}
        self.finishing = 0

    def start(self, gpu: SimGpu, pick: Pick, now: float) -> None:
        self.models = self.per_card[gpu.id]  # the load drawn from this card's range
        try:
            super().start(gpu, pick, now)
        finally:
            self.models = self.base

    def finish(self, gpu: SimGpu, task: SimTask, load_s: float | None, now: float) -> None:
        self.finishing = gpu.id
        super().finish(gpu, task, load_s, now)

    def heard(self, model: str, load_s: float | None, run_s: float) -> None:
        if self.learner is not None:
            self.learner.observe_on(CARDS[self.finishing], model, load_s, run_s)


class PerGpuClaims(ResidencyClaims):
    """The residency policy with estimates learned per (model, GPU model), fed to the costs
    per GPU label and model-wide (samples-weighted) as ``scheduling/estimates.py`` feeds
    them. ``per_gpu`` False: claims carry no GPU label, so every card gets the model-wide
    figure."""

    def __init__(self, history: dict[tuple[str, str], Window] | None = None,
                 per_gpu: bool = True) -> None:  # fmt: skip
        super().__init__(MODELS, POLICY, CARDS if per_gpu else None)
        self.windows = {key: dict(window) for key, window in (history or {}).items()}
        for model in {model for model, _ in self.windows}:
            self._learn(model)

    def observe(self, model: str, load_s: float | None, run_s: float) -> None:
        raise AssertionError("MixedGpus reports through observe_on")

    def observe_on(self, label: str, model: str, load_s: float | None, run_s: float) -> None:
        seen = Observation(run_s=run_s, load_s=load_s)
        self.windows[(model, label)] = learned.fold(self.windows.get((model, label), {}), seen)
        self._learn(model)

    def _learn(self, model: str) -> None:
        rows = [(label, len(window["run"]), learned.figures(learned.fold(window, Observation())))
                for (name, label), window in self.windows.items() if name == model]  # fmt: skip
        for label in [None, *sorted({label for label, _, _ in rows})]:
            mine = [(n, f) for lab, n, f in rows if label is None or lab == label]
            for column, costs in (("load_p50_s", self.costs.reload),
                                  ("run_p50_s", self.costs.runtime)):  # fmt: skip
                pairs = [(float(f[column]), n) for n, f in mine if f[column] is not None]
                if pairs:  # weighted by samples, as estimates.py's _weighted
                    value = sum(v * n for v, n in pairs) / sum(n for _, n in pairs)
                    costs.learn(model, value, label)


def mixed_history(seed: int) -> dict[tuple[str, str], Window]:
    claims = PerGpuClaims()
    MixedGpus(misjudged(random.Random(seed + 1000), 8, 0), claims, seed + 1000, claims).run()
    return claims.windows


def mixed_rows(seed: int) -> list[dict]:
    """sim.py's table rows for (e4): model-wide against per-GPU costs, both learned."""
    tasks = misjudged(random.Random(seed), 8, 0)
    fast = {**MODELS, **card_models(NEW)}  # the bound with the fastest card's loads
    bound = lower_bound(tasks, fast, GPUS)
    past = mixed_history(seed)
    out = []
    for label, claims in (
        ("residency, guesses", PerGpuClaims()),
        ("residency, learned, model-wide costs", PerGpuClaims(past, per_gpu=False)),
        ("residency, learned, per-GPU costs", PerGpuClaims(past)),
        ("FIFO", None),
    ):
        if claims is None:
            result = MixedGpus(tasks, OrderedClaims(MODELS, by_priority=False), seed).run()
        else:
            result = MixedGpus(tasks, claims, seed, claims).run()
        waits = [t.claimed_at - t.ready_at for t in result.tasks.values()]
        out.append({
            "scenario": MIXED, "policy": label, "makespan_s": round(result.makespan_s),
            "lower_bound_s": round(bound), "x_bound": round(result.makespan_s / bound, 3),
            "loads": result.loads, "load_s": round(result.load_s),
            "max_wait_s": round(max(waits)), "low_priority_wait_s": None,
            "urgent_wait_s": None,
        })  # fmt: skip
    fifo_s = out[-1]["makespan_s"]
    for row in out:
        row["fifo_speedup"] = round(fifo_s / row["makespan_s"], 2)
    return out


def mixed_gain(found: list[dict]) -> float:
    """Makespan with model-wide costs over makespan with per-GPU costs (> 1: it helped)."""
    by = {r["policy"]: r["makespan_s"] for r in found}
    return round(by["residency, learned, model-wide costs"]
                 / by["residency, learned, per-GPU costs"], 3)  # fmt: skip


def mixed_sweep(seeds: range) -> str:
    gains = sorted(mixed_gain(mixed_rows(seed)) for seed in seeds)
    return (
        f"(e4) model-wide / per-GPU costs over seeds {seeds.start}-{seeds.stop - 1}: "
        f"{gains[0]}-{gains[-1]}x (median {gains[len(gains) // 2]})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sweep", type=int, default=20, help="seeds 1..N for the gains")
    args = parser.parse_args(argv)
    for name in BURSTS:
        found = rows(name, args.seed)
        for row in found:
            print(row)
        print(f"guesses / learned estimates: {gain(found)}x")
    found = mixed_rows(args.seed)
    for row in found:
        print(row)
    print(f"model-wide / per-GPU costs: {mixed_gain(found)}x")
    print("\n".join(sweep(range(1, args.sweep + 1))))
    print(mixed_sweep(range(1, args.sweep + 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
