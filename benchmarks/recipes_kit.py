"""video-notes over a folder of generated videos, on the kit with the stand-ins, beside
the simulation of the same plan shape.

Usage: python benchmarks/recipes_kit.py [--videos 50] [--keep]

Brings the kit up (CPU profile, stand-in images from the test registry, as the e2e tests
do: run `bash .ci/run` once first, or tests/images/*.sh and tests/standins/build.sh),
generates ``--videos`` short videos with ffmpeg (6 s each: three scenes and a tone), runs
``submit recipes/video-notes.yaml --inputs-dir DIR --watch`` as a user would, and reads
the finished plan. Reported:

- end to end: submission to the last task's end, and per video (its first task's start
  to its last task's end);
- where it went: the tasks' run time by type, of which model loads (Ollama's
  ``load_duration``); the kit's overhead per task: the workers' time not spent running a
  task (workers x makespan - the tasks' run time, over the tasks: claims, exchanges,
  the brain's bookkeeping, the worker's pick-up), and per video (times its tasks); and
  the wait of a READY task for a free worker (from its last dependency's end to its
  start, p50 / p99), which is queueing behind the other videos, not overhead;
- the simulation (``sim_engine.py``, the brain's real residency policy) of the same plan
  shape on the same number of workers with the run's own measured task and load times:
  what the schedule alone would take, so the difference is the kit's overhead.

The stand-ins answer in milliseconds, so this measures the kit's own cost per item, not a
model's; README "Recipes" gives the seed rig's times from ``sim.py`` scenario d.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# tests/e2e first: its conftest is the kit's (Kit, copy_kit), tests/ has another
sys.path[:0] = [str(HERE), str(REPO), str(REPO / "tests" / "e2e"), str(REPO / "tests")]

import requests  # noqa: E402
from conftest import Kit, copy_kit, force_clean, write_test_env  # noqa: E402
from scale import percentile  # noqa: E402
from sim_engine import ModelSpec, SimGpu, SimTask, Simulation  # noqa: E402
from sim_policies import ResidencyClaims  # noqa: E402
from support_media import make_video  # noqa: E402

from airig.brain.scheduling.residency import ResidencyPolicy  # noqa: E402

BRAIN = "http://127.0.0.1:8080"
MODELS = {"llm": "qwen2.5:0.5b", "vision": "qwen2.5vl:7b", "embed": "nomic-embed-text"}
WHISPER = "Systran/faster-whisper-tiny"
CPU_WORKERS = 2


def bring_up(root: Path) -> Kit:
    force_clean()
    copy_kit(root)
    write_test_env(
        root,
        AIRIG_OLLAMA_MODELS=",".join(MODELS.values()),
        AIRIG_WHISPER_MODELS=WHISPER,
        AIRIG_PLANNER_MODEL=MODELS["llm"],
        AIRIG_VISION_MODEL=MODELS["vision"],
        AIRIG_EMBED_MODEL=MODELS["embed"],
        AIRIG_CPU_WORKERS=str(CPU_WORKERS),
    )
    kit = Kit(root)
    done = kit.run("--profile", "cpu")
    if done.returncode != 0:
        raise SystemExit(f"up failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return kit


def run_plan(kit: Kit, folder: Path) -> tuple[dict, float]:
    start = time.time()
    done = kit.run(
        "submit", "recipes/video-notes.yaml", "--inputs-dir", str(folder), "--watch", timeout=3600
    )
    found = re.search(r"plan (\w+) submitted", done.stdout + done.stderr)
    if not found:
        raise SystemExit(f"submit failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    token = kit.env()["BRAIN_ADMIN_TOKEN"]
    plan = requests.get(
        f"{BRAIN}/v1/plans/{found[1]}", headers={"Authorization": f"Bearer {token}"}, timeout=30
    ).json()
    return plan, start


def measure(plan: dict, submitted: float) -> dict:
    tasks = [t for t in plan["tasks"] if t["type"] != "group" and t.get("started_at")]
    by_key = {t["id"]: t for t in plan["tasks"]}
    overhead, per_item, load_s, run_by_type = [], {}, 0.0, {}
    for task in tasks:
        deps = [
            by_key[d]["finished_at"] for d in task["depends_on"] if by_key[d].get("finished_at")
        ]
        ready = max(deps) if deps else plan["created_at"]
        waited = max(0.0, task["started_at"] - ready)
        overhead.append(waited)
        run = task["finished_at"] - task["started_at"]
        run_by_type.setdefault(task["type"], []).append(run)
        load_s += (task["metrics"].get("load_ms") or 0) / 1000
        item = per_item.setdefault(task.get("item"), {"start": task["started_at"], "end": 0.0})
        item["start"] = min(item["start"], task["started_at"])
        item["end"] = max(item["end"], task["finished_at"])
    items = list(per_item.values())
    spans = [i["end"] - i["start"] for i in items]
    makespan = max(t["finished_at"] for t in tasks) - submitted
    busy = sum(sum(v) for v in run_by_type.values())
    idle_per_task = max(0.0, CPU_WORKERS * makespan - busy) / len(tasks)
    return {
        "tasks": len(tasks),
        "makespan_s": round(makespan, 1),
        "overhead_per_task_ms": round(idle_per_task * 1000, 1),
        "overhead_per_video_ms": round(idle_per_task * 1000 * len(tasks) / len(items), 1),
        "item_p50_s": round(statistics.median(spans), 2),
        "item_max_s": round(max(spans), 2),
        "wait_p50_ms": round(statistics.median(overhead) * 1000, 1),
        "wait_p99_ms": round(percentile(overhead, 0.99) * 1000, 1),
        "run_by_type_s": {k: round(sum(v), 1) for k, v in sorted(run_by_type.items())},
        "load_s": round(load_s, 1),
        "mean_run_s": {k: statistics.mean(v) for k, v in run_by_type.items()},
    }


def simulate(videos: int, mean_run_s: dict[str, float], load_s: float) -> float:
    """The same plan shape on CPU_WORKERS workers, the measured means as durations."""
    load = (load_s / 10, load_s / 10 + 0.001)  # per model load, spread over ~10 loads
    specs = {
        "whisper": ModelSpec("whisper", "script", 1, load),
        "llm": ModelSpec("llm", "llm", 1, load),
        "vision": ModelSpec("vision", "llm", 1, load),
        "embed": ModelSpec("embed", "script", 1, load),
        "cpu": ModelSpec("cpu", "cpu", 0, (0.0, 0.001)),
    }
    shape = [
        ("transcribe", "whisper", ()),
        ("topics", "llm", (0,)),
        ("frames", "cpu", ()),
        ("describe", "vision", (2,)),
        ("note", "cpu", (0, 1, 2, 3)),
        ("embed", "embed", (4,)),
    ]
    kinds = {
        "transcribe": "transcribe",
        "topics": "llm",
        "frames": "frames",
        "describe": "llm",
        "note": "note",
        "embed": "embed",
    }
    tasks = []
    for video in range(videos):
        base = len(shape) * video
        for offset, (name, model, deps) in enumerate(shape):
            duration = mean_run_s.get(kinds[name], 0.1)
            tasks.append(
                SimTask(
                    base + offset,
                    model,
                    specs[model].task_class,
                    round(duration, 3),
                    deps=tuple(base + d for d in deps),
                )
            )
    classes = ("cpu", "script", "llm", "resource")
    gpus = [SimGpu(i, 10, classes) for i in range(CPU_WORKERS)]
    claims = ResidencyClaims(specs, ResidencyPolicy())
    return Simulation(gpus, specs, tasks, claims, claims.observe).run().makespan_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="leave the kit running")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="airig-recipes-") as tmp:
        folder = Path(tmp) / "talks"
        folder.mkdir()
        for index in range(args.videos):
            make_video(folder / f"talk-{index:03d}.mp4", size=f"{160 + 8 * (index % 8)}x120")
        kit = bring_up(Path(tmp) / "airig")
        try:
            plan, submitted = run_plan(kit, folder)
            row = measure(plan, submitted)
        finally:
            if not args.keep:
                kit.run("down", "--volumes", "--yes")
                force_clean()
    predicted = simulate(args.videos, row.pop("mean_run_s"), row["load_s"])
    print(json.dumps({"status": plan["status"], **row}, indent=1))
    print(
        "| videos | status | makespan s (kit) | makespan s (simulation, same shape and task "
        "times) | kit / simulation | per video p50 / max s | kit overhead per task / per "
        "video ms | wait for a worker p50 / p99 ms | run s by type | of which model loads s |"
    )
    print("|---:|---|---:|---:|---:|---|---|---|---|---:|")
    by_type = ", ".join(f"{k} {v}" for k, v in row["run_by_type_s"].items())
    print(
        f"| {args.videos} | {plan['status']} | {row['makespan_s']} | {predicted:.1f} | "
        f"{row['makespan_s'] / predicted:.2f} | {row['item_p50_s']} / {row['item_max_s']} | "
        f"{row['overhead_per_task_ms']} / {row['overhead_per_video_ms']} | "
        f"{row['wait_p50_ms']} / {row['wait_p99_ms']} | {by_type} | {row['load_s']} |"
    )
    return 0 if plan["status"] == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
