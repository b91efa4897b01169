"""Whisper on one GPU vs on every worker GPU (issue 34 §3), on the seed rig, simulated.

Usage: python benchmarks/sim_whisper.py [--seed 7] [--json results/whisper_per_gpu.json]

The seed rig: five 6 GB cards, the brain's model on two (AIRIG_BRAIN_GPUS=0,3), a worker
on each of the other three. Same engine, costs and real residency policy as ``sim.py``
(``sim_engine.py``, ``sim_policies.py``). Three ways to run Whisper:

- one Whisper: the kit before issue 34 §3, one speaches server (``whisper-gpu-nvidia``,
  device 0, beside the brain's model) that every worker's transcriptions queue on, one at
  a time; it loads the model once and never touches the workers' cards;
- one per GPU: ``whisper-gpuN`` on each worker card; Whisper and the 7B LLM do not fit on
  one 6 GB card together, so the residency policy swaps them there like two LLMs;
- one per GPU at the seed's ceiling: the same, but the transcriptions running at once
  share what the seed measured for three together: 15-20x realtime on one GPU, 25x for
  three at once (the host's CPU decoding and disk are shared), so two run at 12.5x each
  and three at 8.3x (``sim_engine`` ``contended``: 25 / 17.5 of one running alone).

Workloads: (d) ``recipes/video-notes.yaml`` over 50 talks (``sim.py`` scenario d), (b) the
seed's video pipeline over 50 videos (``sim.py`` b), (t) 50 talks transcribed only.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from sim import CARD_MB, MODELS, POLICY, WHISPER, task, video_notes, video_pipeline  # noqa: E402
from sim_bound import lower_bound  # noqa: E402
from sim_engine import SimGpu, SimTask, Simulation  # noqa: E402
from sim_policies import ResidencyClaims  # noqa: E402

WORKER_GPUS = 3  # the seed's five cards less the brain's two
SOLO_X, TOGETHER_X = 17.5, 25.0  # x realtime: one GPU alone, all transcribing together


def transcripts(rng: random.Random) -> list[SimTask]:
    """50 talks of 10-20 minutes, transcribed only (30-80 s each at the seed's speed)."""
    return [task(i, WHISPER, rng.uniform(30, 80)) for i in range(50)]


WORKLOADS: dict[str, Callable[[random.Random], list[SimTask]]] = {
    "d. video-notes recipe x50": video_notes,
    "b. video pipeline x50 (batch)": video_pipeline,
    "t. transcribe only x50": transcripts,
}
SETUPS = ("one Whisper", "one per GPU", "one per GPU, seed's 25x ceiling")


def run(workload: str, setup: str, seed: int) -> dict:
    tasks = WORKLOADS[workload](random.Random(seed))
    shared = frozenset({WHISPER}) if setup == SETUPS[0] else frozenset()
    contended = {WHISPER: TOGETHER_X / SOLO_X} if setup == SETUPS[2] else None
    claims = ResidencyClaims(MODELS, POLICY)
    gpus = [SimGpu(i, CARD_MB, ("llm", "script")) for i in range(WORKER_GPUS)]
    copies = [SimTask(**vars(t)) for t in tasks]
    sim = Simulation(gpus, MODELS, copies, claims, claims.observe, seed, shared=shared,
                     contended=contended)  # fmt: skip
    claims.shared_loaded = sim.server_loaded  # what every worker reports of the server
    result = sim.run()
    whisper = [t for t in result.tasks.values() if t.model == WHISPER]
    span = max(t.finished_at for t in whisper) - min(t.claimed_at for t in whisper)
    audio_s = sum(t.duration_s for t in whisper) * SOLO_X  # durations are one GPU alone
    return {
        "workload": workload, "setup": setup, "makespan_s": round(result.makespan_s),
        "lower_bound_s": round(lower_bound(tasks, MODELS, WORKER_GPUS)) if not shared else None,
        "loads": result.loads, "load_s": round(result.load_s),
        "whisper_span_s": round(span), "realtime_x": round(audio_s / span, 1),
        "max_wait_s": round(max(t.claimed_at - t.ready_at for t in result.tasks.values())),
    }  # fmt: skip


def markdown(rows: list[dict]) -> str:
    lines = [
        "| workload | Whisper | makespan s | vs one Whisper | model loads | load s "
        "| transcription span s | x realtime | max wait s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = {r["workload"]: r["makespan_s"] for r in rows if r["setup"] == SETUPS[0]}
    for r in rows:
        speedup = round(base[r["workload"]] / r["makespan_s"], 2)
        cells = [r["workload"], r["setup"], r["makespan_s"], f"{speedup}x", r["loads"],
                 r["load_s"], r["whisper_span_s"], r["realtime_x"], r["max_wait_s"]]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def seed_sweep(seeds: range, workload: str = "d. video-notes recipe x50") -> str:
    """How much the speed-ups depend on the random draw of durations."""
    ratios: dict[str, list[float]] = {setup: [] for setup in SETUPS[1:]}
    for seed in seeds:
        base = run(workload, SETUPS[0], seed)["makespan_s"]
        for setup in SETUPS[1:]:
            ratios[setup].append(round(base / run(workload, setup, seed)["makespan_s"], 2))
    parts = [f"{setup} {min(r)}-{max(r)}x" for setup, r in ratios.items()]
    return f"({workload[0]}) over seeds {seeds.start}-{seeds.stop - 1}: " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    rows = [run(w, s, args.seed) for w in WORKLOADS for s in SETUPS]
    sweep = seed_sweep(range(1, 21))
    print(markdown(rows))
    print(sweep)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "notes": [sweep]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
