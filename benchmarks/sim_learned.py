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
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from sim_bound import lower_bound  # noqa: E402
from sim_engine import ModelSpec, SimGpu, SimTask, Simulation  # noqa: E402
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
    print("\n".join(sweep(range(1, args.sweep + 1))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
