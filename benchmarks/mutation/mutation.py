"""Mutation testing of the modules that guard correctness, scored per module.

Run through ``benchmarks/mutation/run.sh`` (it provides mutmut 3 in a throwaway venv).
This helper copies the work tree (tracked and untracked-but-not-ignored files) to a
directory under /tmp, writes mutmut's ``[tool.mutmut]`` into the *copy's*
pyproject.toml, runs ``mutmut run`` there and prints, per module,

    score = detected / (mutants - equivalent)

where detected = killed, timed out or crashed the tests. The equivalent mutants (the
mutated code behaves exactly like the original, so no test can tell them apart) are
listed in ``equivalent.tsv`` beside this file, one per line with its reason; a listed
entry that matches no mutant any more is reported as stale. Every other survivor is
printed with its change (``--diffs``: its whole diff): a test should kill it.

Nothing is written into the repository: mutmut's ``mutants/`` lives in the copy.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EQUIVALENTS = HERE / "equivalent.tsv"


@dataclass(frozen=True)
class Target:
    path: str  # the module, relative to the repository
    # Only these top-level functions / classes are mutated (None: the whole module).
    only: tuple[str, ...] | None = None


# The modules that guard correctness. states.py: only the fencing parts (the task lookup
# that refuses ids naming no task, and the transition guard that refuses every move the
# state machine does not allow, so an ended attempt can never be committed twice).
TARGETS = (
    Target("airig/brain/leases.py"),
    Target("airig/brain/store/payloads.py"),  # cut out of leases.py: the same code
    Target("airig/brain/store/states.py", only=("get_task", "transition")),
    Target("airig/provision/verify.py"),
    Target("airig/launcher/hardware/decide.py"),
    Target("airig/brain/scheduling/residency.py"),
    Target("airig/brain/scheduling/candidates.py"),
    Target("airig/brain/store/candidates.py"),  # cut out of candidates.py: the same code
)

# The unit tests that exercise those modules (mutmut runs, per mutant, only the tests
# that reached the mutated function), and every tests/unit/**/test_mutants_*.py.
TESTS = (
    "tests/unit/brain/test_brain_api.py",
    "tests/unit/brain/test_brain_exchange.py",
    # leases.claim / complete / fail also hand plan tasks to the planner and failures to
    # the external tier: the tests of those paths
    "tests/unit/brain/test_brain_escalation.py",
    "tests/unit/brain/test_escalation_trust.py",
    "tests/unit/brain/test_planner_grow.py",
    "tests/unit/brain/test_planner_trust.py",
    "tests/unit/brain/test_trust_late_arrivals.py",
    "tests/unit/brain/test_brain_inflight.py",
    "tests/unit/brain/test_brain_hostile.py",
    "tests/unit/brain/test_brain_placement.py",
    "tests/unit/brain/test_brain_retry.py",
    "tests/unit/brain/test_brain_scheduling.py",
    "tests/unit/brain/test_brain_states.py",
    "tests/unit/brain/test_brain_templates.py",
    "tests/unit/brain/test_brain_worker_runtime.py",
    "tests/unit/brain/test_plan_shell_inputs.py",
    "tests/unit/brain/test_rigs_brain.py",
    "tests/unit/brain/test_rigs_trust.py",
    "tests/unit/brain/test_residency.py",
    "tests/unit/worker/test_swap_assignment.py",
    "tests/unit/launcher/test_hardware_decide.py",
    "tests/unit/launcher/test_hardware_hosts.py",
    "tests/unit/launcher/test_hardware_parts.py",
    "tests/unit/provision/test_verify.py",
    "tests/unit/provision/test_verify_cache.py",
    "tests/unit/provision/test_provision_cli.py",
    "tests/unit/provision/test_provision_ollama.py",
    "tests/unit/provision/test_provision_runner.py",
)
MUTANT_TESTS = "tests/unit/**/test_mutants_*.py"
# --with-standins adds the provisioning runs against the stand-in servers (127.0.0.1,
# no Docker; slower: every surviving verifier mutant runs them).
STANDIN_TESTS = ("tests/integration/test_provision_standins.py",)

# mutmut's exit-code verdicts that mean a test noticed the mutant.
DETECTED = {"killed", "timeout", "segfault", "caught by type check"}
MUTANT = re.compile(r"^(?P<module>[\w.]+?)\.x(?:ǁ(?P<cls>\w+)ǁ|_)(?P<func>\w+?)__mutmut_\d+$")


@dataclass
class Equivalent:
    function: str  # module path:function, e.g. airig/brain/leases.py:claim
    change: str  # the mutant's change, "old ⇒ new" (see change_of)
    reason: str
    used: int = 0


@dataclass
class ModuleScore:
    total: int = 0
    detected: int = 0
    equivalent: list[tuple[str, Equivalent]] = field(default_factory=list)
    survivors: list[tuple[str, str, str]] = field(default_factory=list)  # name, status, diff

    @property
    def score(self) -> float:
        scored = self.total - len(self.equivalent)
        return 100.0 * self.detected / scored if scored else 100.0


def tree_files(repo: Path) -> list[str]:
    """Tracked files plus untracked files git does not ignore (new tests count)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, check=True, capture_output=True,
    ).stdout  # fmt: skip
    return sorted({name for name in out.decode().split("\0") if name})


def copy_tree(repo: Path, dest: Path) -> None:
    for name in tree_files(repo):
        source = repo / name
        if not source.is_file() or name.startswith(("mutants/", "benchmarks/")):
            continue  # deleted in the work tree but still in the index; not needed
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


def restrict(module: Path, only: tuple[str, ...]) -> None:
    """Fence every top-level definition not in ``only`` with mutmut's no-mutate pragmas."""
    source = module.read_text()
    lines = source.splitlines(keepends=True)
    inserts: list[tuple[int, str]] = []
    for node in ast.parse(source).body:
        defines = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        if not defines or node.name in only:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        inserts.append((first - 1, "# pragma: no mutate start\n"))
        inserts.append((node.end_lineno, "# pragma: no mutate end\n"))
    for index, text in sorted(inserts, reverse=True):
        lines.insert(index, text)
    module.write_text("".join(lines))


def mutmut_config(targets: tuple[Target, ...], tests: tuple[str, ...], root: Path) -> str:
    def toml_list(items) -> str:
        return "[" + ", ".join(f'"{item}"' for item in items) + "]"

    also_copy = sorted(p.name for p in root.iterdir() if p.name not in {"airig", "mutants"})
    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["airig"]\n'
        f"only_mutate = {toml_list(t.path for t in targets)}\n"
        f"also_copy = {toml_list(also_copy)}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
        # in mutmut's own processes: no xdist workers (tests/conftest.py starts them)
        f"pytest_add_cli_args = {toml_list(['-p', 'no:cacheprovider', '-p', 'no:xdist'])}\n"
        "use_git_change_detection = false\n"
        "use_setproctitle = false\n"
    )


def load_equivalents() -> list[Equivalent]:
    entries = []
    for number, line in enumerate(EQUIVALENTS.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not all(p.strip() for p in parts):
            sys.exit(f"{EQUIVALENTS}:{number}: want function<TAB>old ⇒ new<TAB>reason")
        entries.append(Equivalent(*(p.strip() for p in parts)))
    return entries


def change_of(diff: str) -> str:
    """A mutant's change as ``old ⇒ new``: its removed and added lines, whitespace
    normalised, several joined with ' ⏎ '. Stable when other lines of the module move."""

    def lines(sign: str) -> str:
        return " ⏎ ".join(
            " ".join(line[1:].split())
            for line in diff.splitlines()
            if line.startswith(sign) and not line.startswith(sign * 3)
        )

    return f"{lines('-')} ⇒ {lines('+')}"


def function_of(name: str, modules: dict[str, str]) -> tuple[str, str] | None:
    match = MUTANT.match(name)
    if not match or match["module"] not in modules:
        return None
    func = f"{match['cls']}.{match['func']}" if match["cls"] else match["func"]
    return modules[match["module"]], func


def run(args: argparse.Namespace) -> int:
    targets = tuple(t for t in TARGETS if not args.module or any(m in t.path for m in args.module))
    work = Path(args.work)
    tree = work / "tree"
    if args.analyse:  # score the results of an earlier --keep run again
        return finish(tree, targets, args, elapsed=None)
    if work.exists():
        shutil.rmtree(work)
    started = time.monotonic()
    copy_tree(REPO, tree)
    for target in targets:
        if target.only:
            restrict(tree / target.path, target.only)
    tests = TESTS + (STANDIN_TESTS if args.with_standins else ())
    tests = tuple(t for t in tests if (tree / t).exists())
    tests += tuple(str(p.relative_to(tree)) for p in sorted(tree.glob(MUTANT_TESTS)))
    with open(tree / "pyproject.toml", "a") as handle:
        handle.write(mutmut_config(targets, tests, tree))
    # The copy's own airig must be the one imported (not an editable install elsewhere).
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "AIRIG_MUTATION_RUN": "1"}
    env.pop("PYTHONPATH", None)
    mutmut = [args.mutmut]
    print(f"mutating {', '.join(t.path for t in targets)} in {tree}", flush=True)
    log = work / "mutmut-run.log"
    with open(log, "w") as out:
        code = subprocess.run(
            [*mutmut, "run", "--max-children", str(args.max_children)],
            cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT,
        ).returncode  # fmt: skip
    elapsed = time.monotonic() - started
    if code != 0:
        print(log.read_text()[-4000:])
        print(f"mutmut run failed ({code}); full log: {log}")
        return 2
    return finish(tree, targets, args, elapsed)


def finish(tree: Path, targets, args: argparse.Namespace, elapsed: float | None) -> int:
    scores, equivalents = score(tree, targets)
    report(targets, scores, equivalents, args)
    if elapsed is not None:
        minutes, seconds = divmod(round(elapsed), 60)
        print(f"\nmutmut run took {minutes}m{seconds:02d}s, --max-children {args.max_children}")
    if args.keep or args.analyse:
        print(f"results kept in {tree} (`mutmut show NAME` / `mutmut browse` work there)")
    else:
        shutil.rmtree(tree.parent, ignore_errors=True)
    below = [path for path, module in scores.items() if module.score < args.target]
    return 1 if below else 0


def verdicts(tree: Path) -> dict[str, tuple[str, str, Callable[[], str]]]:
    """mutant name -> (source path, status, its diff on demand), read with mutmut's own
    code (imported: `mutmut show` per survivor would start hundreds of processes)."""
    os.chdir(tree)
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files

    found = {}
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, code in data.exit_code_by_key.items():
            diff = partial(get_diff_for_mutant, name, path=data.path)
            found[name] = (str(path), status_by_exit_code[code], diff)
    return found


def score(tree: Path, targets: tuple[Target, ...]):
    modules = {t.path.removesuffix(".py").replace("/", "."): t.path for t in targets}
    equivalents = load_equivalents()
    scores: dict[str, ModuleScore] = defaultdict(ModuleScore)
    for name, (_, status, diff_of) in sorted(verdicts(tree).items()):
        where = function_of(name, modules)
        if where is None:
            continue
        path, func = where
        module = scores[path]
        module.total += 1
        if status in DETECTED:
            module.detected += 1
            continue
        diff = diff_of()
        change = change_of(diff)
        key = f"{path}:{func}"
        match = next((e for e in equivalents if e.function == key and e.change == change), None)
        if match is not None:
            match.used += 1
            module.equivalent.append((name, match))
        else:
            module.survivors.append((name, status, diff))
    return scores, equivalents


def report(targets, scores, equivalents, args) -> None:
    for path, module in scores.items():
        for name, status, diff in module.survivors:
            print(f"\n--- {status}: {name} ({path})")
            print("\n".join(diff.splitlines()[2:]) if args.diffs else change_of(diff))
    print("\nmodule                               mutants  equiv  detected  score")
    for target in targets:
        module = scores.get(target.path, ModuleScore())
        scope = f" ({', '.join(target.only)})" if target.only else ""
        print(
            f"{target.path + scope:<36} {module.total:>7} {len(module.equivalent):>6} "
            f"{module.detected:>9} {module.score:>5.1f}%"
        )
    checked = {t.path for t in targets}
    stale = [e for e in equivalents if not e.used and e.function.split(":")[0] in checked]
    for entry in stale:
        print(f"stale entry in {EQUIVALENTS.name}: {entry.function}: {entry.change}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutmut", default="mutmut", help="the mutmut executable")
    parser.add_argument("--work", default="/tmp/airig-mutation", help="the temp copy's home")
    parser.add_argument("--max-children", type=int, default=1)
    parser.add_argument("--module", action="append", help="only targets whose path has this")
    parser.add_argument("--with-standins", action="store_true", help=STANDIN_TESTS[0])
    parser.add_argument("--diffs", action="store_true", help="print survivors' whole diffs")
    parser.add_argument("--keep", action="store_true", help="keep the temp copy")
    parser.add_argument("--analyse", action="store_true", help="only score a kept copy again")
    parser.add_argument("--target", type=float, default=90.0, help="exit 1 below this score")
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
