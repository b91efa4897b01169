"""Makespan benchmark: the brain's residency policy vs FIFO vs a lower bound, simulated.

Usage: python benchmarks/sim.py [--seed 7] [--json results/makespan.json]

Simulated clock and GPUs (see sim_engine.py), seed-rig load costs (7B LLM 90-120 s,
Whisper 3-5 s, embedding model 3-5 s) on 6 GB cards where the LLM and Whisper do not fit
together but the LLM and the embedding model do. Scenarios:

a. 60 LLM and 60 Whisper tasks interleaved (L W L W ...) on 3 GPUs;
d. recipes/video-notes.yaml over 50 videos (c. is below): transcribe, topics, keyframe
   descriptions by a vision model, embeddings; per-video time on the seed's costs.
b. the seed's video pipeline, transcribe -> segment (LLM) -> embed, over 50 videos,
   all queued at once (b) and arriving one per minute (b2);
c. a priority mix on 2 GPUs: a steady stream of priority-7 LLM tasks, one priority-2
   Whisper task that would starve behind it, and one priority-10 embedding task.
e. learned estimates against the guesses from the models' names (sim_learned.py); e4
   model-wide against per-GPU learned costs on mismatched GPUs.

Runs in a few seconds. Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import sim_learned  # noqa: E402
from sim_bound import lower_bound  # noqa: E402
from sim_engine import ModelSpec, SimGpu, SimTask, Simulation  # noqa: E402
from sim_policies import OrderedClaims, ResidencyClaims  # noqa: E402

from airig.brain.scheduling.residency import ResidencyPolicy  # noqa: E402

LLM, WHISPER, EMBED = "qwen2.5:7b", "whisper-small.en", "all-mpnet-base-v2"
VISION = "qwen2.5vl:7b"
# Seed rig: 6 GB cards; Qwen 7B with its KV cache does not fit beside Whisper, but a
# sentence-transformers embedding model fits beside either.
MODELS = {
    LLM: ModelSpec(LLM, "llm", 5000, (90.0, 120.0)),
    WHISPER: ModelSpec(WHISPER, "script", 1500, (3.0, 5.0)),
    EMBED: ModelSpec(EMBED, "script", 800, (3.0, 5.0)),
    # A 7B vision-language model at q4 fills a 6 GB card as the text model does.
    VISION: ModelSpec(VISION, "llm", 5200, (90.0, 120.0)),
}
CARD_MB = 6144
POLICY = ResidencyPolicy()  # the brain's defaults: max-wait 900 s, min-resident 120 s
LOW, URGENT = 1000, 1001  # task ids watched in scenario c


def task(tid: int, model: str, duration: float, **extra) -> SimTask:
    return SimTask(tid, model, MODELS[model].task_class, round(duration, 1), **extra)


def interleaved(rng: random.Random) -> list[SimTask]:
    """Chat-sized LLM answers (100-400 tokens at the seed's ~15 tok/s) and 1-5 min audio
    clips (Whisper at 15-20x realtime), submitted together in alternating order."""
    tasks = []
    for pair in range(60):
        tasks.append(task(2 * pair, LLM, rng.uniform(8, 30)))
        tasks.append(task(2 * pair + 1, WHISPER, rng.uniform(4, 20)))
    return tasks


def video_pipeline(rng: random.Random, every_s: float = 0.0) -> list[SimTask]:
    """Per video: transcribe (10-20 min of audio), segment topics with the LLM, embed."""
    tasks = []
    for video in range(50):
        base, at = 3 * video, video * every_s
        tasks.append(task(base, WHISPER, rng.uniform(30, 80), arrive_at=at))
        tasks.append(task(base + 1, LLM, rng.uniform(30, 90), deps=(base,), arrive_at=at))
        tasks.append(task(base + 2, EMBED, rng.uniform(2, 8), deps=(base + 1,), arrive_at=at))
    return tasks


def video_notes(rng: random.Random) -> list[SimTask]:
    """recipes/video-notes.yaml per video, GPU tasks only (keyframes and the note run on
    CPU workers in seconds): transcribe, topics (LLM), describe 12 keyframes (the vision
    model, 4-8 s each at the seed's speed), embed the topics."""
    tasks = []
    for video in range(50):
        base = 4 * video
        tasks.append(task(base, WHISPER, rng.uniform(30, 80)))
        tasks.append(task(base + 1, LLM, rng.uniform(30, 90), deps=(base,)))
        tasks.append(task(base + 2, VISION, 12 * rng.uniform(4, 8)))
        tasks.append(task(base + 3, EMBED, rng.uniform(2, 8), deps=(base + 1, base + 2)))
    return tasks


def priority_mix(rng: random.Random) -> list[SimTask]:
    """Priority-7 LLM work arriving faster than two GPUs drain it, one priority-2
    transcription that strict priority would leave behind all of it, and one
    priority-10 embedding job."""
    tasks = [task(i, LLM, rng.uniform(15, 25), priority=7, arrive_at=9.0 * i) for i in range(200)]
    tasks.append(task(LOW, WHISPER, 30.0, priority=2, arrive_at=400.0))
    tasks.append(task(URGENT, EMBED, 5.0, priority=10, arrive_at=1200.0))
    return tasks


SCENARIOS = {
    "a. LLM+Whisper interleaved, 3 GPUs": (interleaved, 3),
    "b. video pipeline x50 (batch), 3 GPUs": (video_pipeline, 3),
    "b2. video pipeline x50 (1 per 60 s), 3 GPUs": (
        lambda rng: video_pipeline(rng, every_s=60.0),
        3,
    ),
    "c. priority mix, 2 GPUs": (priority_mix, 2),
    "d. video-notes recipe x50, 3 GPUs": (video_notes, 3),
}


def policies():
    return {
        "residency (airig)": lambda: ResidencyClaims(MODELS, POLICY),
        "FIFO": lambda: OrderedClaims(MODELS, by_priority=False),
        "strict priority": lambda: OrderedClaims(MODELS, by_priority=True),
    }


def run_scenario(name: str, seed: int) -> list[dict]:
    build, gpu_count = SCENARIOS[name]
    tasks = build(random.Random(seed))
    bound = lower_bound(tasks, MODELS, gpu_count)
    rows = []
    for label, make in policies().items():
        claims = make()
        gpus = [SimGpu(i, CARD_MB, ("llm", "script")) for i in range(gpu_count)]
        copies = [SimTask(**vars(t)) for t in tasks]
        result = Simulation(gpus, MODELS, copies, claims, claims.observe, seed).run()
        waits = {t.id: t.claimed_at - t.ready_at for t in result.tasks.values()}
        rows.append({
            "scenario": name, "policy": label, "makespan_s": round(result.makespan_s),
            "lower_bound_s": round(bound), "x_bound": round(result.makespan_s / bound, 3),
            "loads": result.loads, "load_s": round(result.load_s),
            "max_wait_s": round(max(waits.values())),
            "low_priority_wait_s": round(waits[LOW]) if name.startswith("c") else None,
            "urgent_wait_s": round(waits[URGENT]) if name.startswith("c") else None,
        })  # fmt: skip
    fifo = next(r for r in rows if r["policy"] == "FIFO")["makespan_s"]
    for row in rows:
        row["fifo_speedup"] = round(fifo / row["makespan_s"], 2)
    return rows


def check_targets(rows: list[dict]) -> list[str]:
    ours = {r["scenario"][0]: r for r in rows if r["policy"] == "residency (airig)"}
    a, c = ours["a"], ours["c"]
    return [
        f"{'PASS' if a['x_bound'] <= 1.10 else 'FAIL'} (a) makespan {a['x_bound']}x the "
        "lower bound (target <= 1.10x)",
        f"{'PASS' if a['fifo_speedup'] >= 3 else 'FAIL'} (a) {a['fifo_speedup']}x faster "
        "than FIFO (target >= 3x)",
        f"{'PASS' if c['low_priority_wait_s'] <= POLICY.max_wait_s else 'FAIL'} (c) starving "
        f"task waited {c['low_priority_wait_s']} s (max-wait {POLICY.max_wait_s:g} s)",
    ]


def seed_sweep(seeds: range) -> str:
    """Scenario (a) over many random draws: is the default seed representative?"""
    ours = []
    for seed in seeds:
        rows = run_scenario(next(iter(SCENARIOS)), seed)
        ours.append(next(r for r in rows if r["policy"] == "residency (airig)"))
    bounds = [r["x_bound"] for r in ours]
    speedups = sorted(r["fifo_speedup"] for r in ours)
    return (
        f"(a) over seeds {seeds.start}-{seeds.stop - 1}: x bound {min(bounds)}-{max(bounds)}, "
        f"FIFO/this {speedups[0]}-{speedups[-1]} (median {statistics.median(speedups)})"
    )


def markdown(rows: list[dict]) -> str:
    head = (
        "| scenario | policy | makespan s | lower bound s | x bound | FIFO/this | loads "
        "| load s | max wait s | low-prio wait s | urgent wait s |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        extra = [r["low_priority_wait_s"], r["urgent_wait_s"]]
        cells = [
            r["scenario"], r["policy"], r["makespan_s"], r["lower_bound_s"], r["x_bound"],
            r["fifo_speedup"], r["loads"], r["load_s"], r["max_wait_s"],
            *("" if v is None else v for v in extra),
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the rows and verdicts here")
    args = parser.parse_args(argv)
    rows = [row for name in SCENARIOS for row in run_scenario(name, args.seed)]
    verdicts = check_targets(rows)
    # (e): learned estimates against the guesses from the names (sim_learned.py)
    rows += [row for name in sim_learned.BURSTS for row in sim_learned.rows(name, args.seed)]
    rows += sim_learned.mixed_rows(args.seed)  # (e4): the same, on mismatched GPUs
    notes = [seed_sweep(range(1, 21)), *sim_learned.sweep(range(1, 21)),
             sim_learned.mixed_sweep(range(1, 21))]  # fmt: skip
    print(markdown(rows))
    print("\n".join([*verdicts, *notes]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"rows": rows, "verdicts": verdicts, "notes": notes}
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if all(v.startswith("PASS") for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
