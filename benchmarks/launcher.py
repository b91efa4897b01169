"""Launcher cost: `python start_services.py up` against plain `docker compose up -d --wait`.

Usage: python benchmarks/launcher.py [--reps 3] [--json results/launcher.json]
       [--readme benchmarks/README.md] [--profile DIR]

A copy of the kit (``tests/e2e/conftest.py``: ``copy_kit``, ``write_test_env``) with the
stand-in images, the cpu profile and its own project prefix (``airigbench``: its
containers and volumes never meet the e2e tests'). One untimed ``up`` first builds the
kit's image if its sources changed and provisions the models, so every timed run starts
on an already-pulled stack. The baseline is the exact compose commands the launcher runs,
taken from ``up --dry-run`` (same compose files, profiles, env files, project names),
run in the same process environment. Each repetition, alternating which goes first:
stacks down (containers only; volumes and network stay), a first ``up`` (everything to
start), a second ``up`` (nothing to do); the same for the plain compose commands. Then,
the stacks up, ``status`` against ``docker compose ps`` of the three stacks (same project
names, files and env files), alternating, median of STATUS_RUNS each. The engine's own
answer time is ``docker info`` and one ``docker compose ps`` per stack.

Targets (median of the per-repetition ratios): first ``up``, second ``up`` and ``status``
each <= 1.10x its plain compose counterpart.
The whole run holds ``/tmp/airig-docker.lock`` (the engine is shared with the e2e tests);
run under ``flock /tmp/airig-docker.lock …`` it uses the lock it was handed.
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "launcher"
sys.path[:0] = [str(HERE), str(HERE.parent)]

LOCK = Path("/tmp/airig-docker.lock")
PREFIX = "airigbench"
TARGET = 1.10  # each ratio's ceiling
STATUS_RUNS = 3  # `status` and `compose ps` runs per repetition, alternating
IMAGES = ["airig-test/base:bookworm", "airig-test/ollama:test", "airig-test/comfyui:test",
          "airig-test/whisper:test"]  # fmt: skip


def environment(root: Path) -> dict[str, str]:
    """What tests/e2e's Kit.run gives the launcher; the compose baseline gets the same."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRIG_", "OLLAMA_"))}
    env.update(AIRIG_HOME=str(root), COLUMNS="200", AIRIG_NO_BOOTSTRAP="1")
    return env


def timed(argv: list[str], env: dict[str, str], cwd: Path, out: list[str] | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - start
    if out is not None:
        out.append(done.stdout)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)[:200]} failed:\n{done.stdout[-2000:]}"
                           f"\n{done.stderr[-2000:]}")  # fmt: skip
    return elapsed


class Kit:
    def __init__(self, root: Path) -> None:
        self.root, self.env = root, environment(root)
        self.cli = [sys.executable, str(root / "start_services.py")]
        self.outputs: list[str] = []  # what each launcher run printed
        self.prepare_s = 0.0

    def launcher(self, *args: str) -> float:
        return timed([*self.cli, *args], self.env, self.root, self.outputs)

    def compose_ups(self) -> list[list[str]]:
        """The `compose up` commands `up` runs, in order, from its --dry-run."""
        done = subprocess.run([*self.cli, "up", "--dry-run"], env=self.env, cwd=self.root,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"up --dry-run failed:\n{done.stdout}\n{done.stderr}")
        lines = [line for line in done.stdout.splitlines() if " compose " in line]
        ups = [shlex.split(line) for line in lines if " up --detach --wait " in line]
        if len(ups) != 3:
            raise RuntimeError(f"expected 3 compose up commands in the dry run:\n{done.stdout}")
        return ups

    def compose(self, commands: list[list[str]]) -> float:
        start = time.perf_counter()
        for argv in commands:
            timed(argv, self.env, self.root)
        return time.perf_counter() - start

    def status_pair(self, ups: list[list[str]], first: str) -> tuple[float, float]:
        """Medians of `status` and of `compose ps` of the three stacks, alternating."""
        spent: dict[str, list[float]] = {"launcher": [], "compose": []}
        ps = [[*argv[: argv.index("up")], "ps"] for argv in ups]
        order = [first, "compose" if first == "launcher" else "launcher"]
        for _ in range(STATUS_RUNS):
            for who in order:
                took = self.launcher("status") if who == "launcher" else self.compose(ps)
                spent[who].append(took)
        return statistics.median(spent["launcher"]), statistics.median(spent["compose"])

    def down(self, ups: list[list[str]]) -> None:
        """Containers of every stack removed, last stack first; volumes and network stay."""
        for argv in reversed(ups):
            base = argv[: argv.index("up")]
            timed([*base, "down", "--remove-orphans"], self.env, self.root)


def engine_answer(ups: list[list[str]], env: dict[str, str], cwd: Path) -> dict:
    info = [timed(["docker", "info", "--format", "{{.ServerVersion}}"], env, cwd)
            for _ in range(5)]  # fmt: skip
    ps = []
    for _ in range(5):
        ps.append(sum(timed([*a[: a.index("up")], "ps", "--quiet"], env, cwd) for a in ups))
    return {"docker_info_s": round(statistics.median(info), 3),
            "compose_ps_3_stacks_s": round(statistics.median(ps), 3)}  # fmt: skip


def prepare(workdir: Path) -> Kit:
    """The kit copy, brought up once (untimed): its image built, its models provisioned."""
    from tests.e2e.conftest import KIT_FILES, ROOT, write_test_env

    # Copied, not hard-linked as the e2e kit is: other edits of this checkout must not
    # reach the timed kit (a changed source means a rebuild of its image), and the image
    # has its own tag, which no e2e run rebuilds from other sources meanwhile.
    root = workdir / "airig"
    for name in KIT_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name,
                            ignore=shutil.ignore_patterns("__pycache__", ".env"))  # fmt: skip
        else:
            shutil.copy2(src, root / name)
    write_test_env(root, AIRIG_PROFILE="cpu", AIRIG_PROJECT_PREFIX=PREFIX,
                   AIRIG_IMAGE=f"airig/airig:{PREFIX}",
                   AIRIG_OLLAMA_MODELS="qwen2.5:0.5b,nomic-embed-text",
                   AIRIG_WHISPER_MODELS="Systran/faster-whisper-tiny")  # fmt: skip
    kit = Kit(root)
    kit.prepare_s = kit.launcher("up")  # builds the image if needed, provisions the models
    return kit


def run(reps: int, workdir: Path) -> dict:
    kit = prepare(workdir)
    ups = kit.compose_ups()
    rows = []
    try:
        for rep in range(reps):
            order = ["launcher", "compose"] if rep % 2 == 0 else ["compose", "launcher"]
            row: dict = {"rep": rep + 1, "first": order[0]}
            for who in order:
                kit.down(ups)
                if who == "launcher":
                    row["launcher_up_s"] = round(kit.launcher("up"), 2)
                    row["launcher_again_s"] = round(kit.launcher("up"), 2)
                    # A timed run that built the image would measure the build, not `up`.
                    row["built"] = any("Building" in text for text in kit.outputs[-2:])
                else:
                    row["compose_up_s"] = round(kit.compose(ups), 2)
                    row["compose_again_s"] = round(kit.compose(ups), 2)
            status_s, ps_s = kit.status_pair(ups, order[0])
            row["launcher_status_s"], row["compose_ps_s"] = round(status_s, 2), round(ps_s, 2)
            row["ratio"] = round(row["launcher_up_s"] / row["compose_up_s"], 3)
            row["again_ratio"] = round(row["launcher_again_s"] / row["compose_again_s"], 3)
            row["status_ratio"] = round(status_s / ps_s, 3)
            print(f"  {json.dumps(row)}", file=sys.stderr, flush=True)
            rows.append(row)
        engine = engine_answer(ups, kit.env, kit.root)
    finally:
        kit.launcher("down", "--volumes", "--yes")
    return {"rows": rows, "prepare_s": round(kit.prepare_s, 1), **engine}


def profile(workdir: Path, out: Path) -> None:
    """cProfile of a first and a second `up` (``--profile DIR``): where `up`'s time goes."""
    import pstats

    kit = prepare(workdir)
    ups = kit.compose_ups()
    out.mkdir(parents=True, exist_ok=True)
    try:
        for name in ("first", "second"):
            if name == "first":
                kit.down(ups)
            path = out / f"up-{name}.prof"
            argv = [sys.executable, "-m", "cProfile", "-o", str(path), kit.cli[1], "up"]
            took = timed(argv, kit.env, kit.root)
            print(f"--- {name} `up`: {took:.1f} s")
            pstats.Stats(str(path)).sort_stats("cumulative").print_stats(35)
    finally:
        kit.launcher("down", "--volumes", "--yes")


def summarize(result: dict) -> dict:
    rows = result["rows"]

    def med(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 2)

    def ratio(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    return {"launcher_up_s": med("launcher_up_s"), "compose_up_s": med("compose_up_s"),
            "ratio": ratio("ratio"),
            "launcher_again_s": med("launcher_again_s"),
            "compose_again_s": med("compose_again_s"), "again_ratio": ratio("again_ratio"),
            "launcher_status_s": med("launcher_status_s"), "compose_ps_s": med("compose_ps_s"),
            "status_ratio": ratio("status_ratio")}  # fmt: skip


def verdict(ratio: float, what: str, ours: float, plain: str, theirs: float) -> str:
    word = "PASS" if ratio <= TARGET else "FAIL"
    return (f"{word} {what} {ours} s vs {plain} {theirs} s: median ratio {ratio}x "
            f"(target <= {TARGET:.2f}x)")  # fmt: skip


def verdicts(result: dict) -> list[str]:
    s = summarize(result)
    return [
        verdict(s["ratio"], "first `up`", s["launcher_up_s"], "plain compose",
                s["compose_up_s"]),
        verdict(s["again_ratio"], "second `up` (nothing to do)", s["launcher_again_s"],
                "plain `compose up` of the 3 running stacks", s["compose_again_s"]),
        verdict(s["status_ratio"], "`status`", s["launcher_status_s"],
                "`compose ps` of the 3 stacks", s["compose_ps_s"]),
    ]  # fmt: skip


def markdown(result: dict) -> str:
    lines = ["| rep | first | `up` s | plain compose s | ratio | second `up` s "
             "| second plain compose s | ratio | `status` s | `compose ps` ×3 s | ratio |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in result["rows"]:
        lines.append(
            f"| {r['rep']} | {r['first']} | {r['launcher_up_s']} | {r['compose_up_s']} "
            f"| {r['ratio']} | {r['launcher_again_s']} | {r['compose_again_s']} "
            f"| {r['again_ratio']} | {r['launcher_status_s']} | {r['compose_ps_s']} "
            f"| {r['status_ratio']} |"
        )
    return "\n".join(lines)


def missing() -> str | None:
    if not shutil.which("docker"):
        return "docker is not installed"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode != 0:
        return "the Docker engine does not answer"
    absent = [i for i in IMAGES if subprocess.run(["docker", "image", "inspect", i],
                                                  capture_output=True).returncode != 0]  # fmt: skip
    if absent:
        return f"stand-in images missing ({', '.join(absent)}): run tests/standins/build.sh"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--profile", type=Path, help="instead: cProfile a first and a second "
                        "`up` into this folder and print where the time goes")  # fmt: skip
    parser.add_argument("--readme", type=Path, help=f"rewrite this file's {NAME} section")
    args = parser.parse_args(argv)
    with LOCK.open("a") as lock:
        fcntl.flock(held_lock(lock.fileno()) or lock, fcntl.LOCK_EX)  # released on close
        why = missing()
        if why:
            print(f"launcher: not run ({why})", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="airig-launcher-") as tmp:
            if args.profile:
                profile(Path(tmp), args.profile)
                return 0
            result = run(args.reps, Path(tmp))
    checks = verdicts(result)
    notes = [f"untimed first `up` (image build if needed, model provisioning): "
             f"{result['prepare_s']} s; {args.reps} alternating repetitions, stacks down "
             f"(containers only) before each first `up`; `status` and `compose ps`: median "
             f"of {STATUS_RUNS} alternating runs per repetition, the stacks up",
             f"the engine answers `docker info` in {result['docker_info_s']} s, `compose ps` "
             f"(quiet) of the 3 stacks in {result['compose_ps_3_stacks_s']} s"]  # fmt: skip
    print(markdown(result))
    print("\n".join(checks + notes))
    if args.readme:
        bullets = [f"- {c}" for c in checks + notes]
        write_section(args.readme, "\n".join([markdown(result), "", *bullets]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**result, "verdicts": checks, "notes": notes},
                                        indent=1))  # fmt: skip
    return 0 if all(c.startswith("PASS") for c in checks) else 1


def held_lock(own: int) -> int | None:
    """The lock's descriptor this process inherited, when run under `flock LOCK …`: flock(1)
    holds the lock on that open file, so locking a second open of it would wait forever;
    locking the inherited one again returns at once."""
    fds = Path("/proc/self/fd")
    for fd in fds.iterdir() if fds.is_dir() else []:
        try:
            if fd.name != str(own) and Path(os.readlink(fd)) == LOCK.resolve():
                return int(fd.name)
        except OSError:
            continue
    return None


def write_section(readme: Path, text: str) -> None:
    """Replace what stands between this benchmark's markers in ``readme``."""
    start, end = f"<!-- {NAME}:start -->", f"<!-- {NAME}:end -->"
    head, rest = readme.read_text().split(start, 1)
    _, tail = rest.split(end, 1)
    stamp = f"Measured {datetime.date.today().isoformat()} on {os.cpu_count()} cores."
    readme.write_text(f"{head}{start}\n{stamp}\n\n{text}\n{end}{tail}")


if __name__ == "__main__":
    sys.exit(main())
