"""The house rules for imports, read from the code: no circle between modules, and no
import that runs up from a lower room to a higher one (AGENTS.md, "Where things run")."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "airig"

# What each room may import besides itself. Rooms are the folders under airig/; the
# launcher runs on the host, services/brain/worker in containers, common on both sides.
ALLOWED: dict[str, set[str]] = {
    "common": set(),
    "executors": {"common"},
    "provision": {"common"},
    "services": {"common"},
    "brain": {"common"},
    "gateway": {"common"},  # the escalation gateway's container: the provider's key, alone
    "worker": {"common", "executors"},
    "launcher": {"common", "provision"},
    "root": {"launcher"},  # airig/__main__.py
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_of(module: str) -> str:
    parts = module.split(".")
    return (
        parts[1]
        if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir())
        else "root"
    )


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """airig modules ``path`` imports, anywhere in the file (a lazy import still counts)."""
    found = set()
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != this and name != "airig":
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: imports_of(path, modules) for name, path in paths.items()}


def test_no_import_runs_up_between_rooms():
    wrong = sorted(
        f"{a} -> {b}"
        for a, targets in graph().items()
        for b in targets
        if room_of(a) != room_of(b) and room_of(b) not in ALLOWED[room_of(a)]
    )
    assert wrong == []


def test_no_import_circle():
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert circles == []


def children_graph(package: str, imports: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """The imports between the direct children (modules and subpackages) of ``package``."""
    edges: dict[str, set[str]] = {}
    prefix = package + "."
    for source, targets in (imports if imports is not None else graph()).items():
        if not source.startswith(prefix):
            continue
        child = source[len(prefix) :].split(".")[0]
        edges.setdefault(child, set())
        for target in targets:
            if target.startswith(prefix):
                other = target[len(prefix) :].split(".")[0]
                if other != child:
                    edges[child].add(other)
    return edges


def packages() -> list[str]:
    return sorted(module_name(p) for p in PACKAGE.rglob("__init__.py"))


def reaches(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in edges.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_no_import_runs_back_up_inside_any_package():
    """Inside every package, its modules and subpackages stand in layers: no two of them
    import each other, even through other files (leases.py -> escalation/criteria.py
    while escalation/sender.py imported leases.py was such a pair)."""
    imports = graph()
    wrong = []
    for package in packages():
        edges = children_graph(package, imports)
        wrong += [
            f"{package}: {child} -> {target} -> ... -> {child}"
            for child, targets in edges.items()
            for target in targets
            if child in reaches(edges, target)
        ]
    assert sorted(wrong) == []


def layers(edges: dict[str, set[str]]) -> int:
    depth: dict[str, int] = {}

    def floor(node: str) -> int:
        if node not in depth:
            depth[node] = 0  # a circle is the test above's finding, not an endless loop
            depth[node] = 1 + max((floor(t) for t in edges.get(node, ())), default=0)
        return depth[node]

    return max((floor(node) for node in edges), default=0)


# The brain's rooms (airig/brain/*), bottom up: what each may import besides itself.
# store/ is the database and what it records; scheduling/ and ops/ read it; plans/ and
# planner/ shape plans; escalation/ hands tasks out; reactions.py is what the brain does
# with a type's tasks (index, planner, training sample); leases.py ties a claim together;
# service.py is the running brain; api/ is the HTTP edge; __main__ starts it.
BRAIN_BASE = {"settings", "inflight", "timing", "dashboard", "waiters"}
BRAIN_ROOMS: dict[str, set[str]] = {
    "settings": set(),
    "inflight": set(),
    "timing": set(),
    "waiters": set(),  # long-polling claims on the event loop
    "store": set(),
    "ops": {"store"},
    "scheduling": {"store"},
    "plans": {"store"},
    "planner": {"plans", "store"},
    "escalation": {"planner", "plans", "store"},
    "reactions": {"planner", "store"},  # what the brain does with a type's tasks
    "leases": {"escalation", "planner", "reactions", "scheduling", "store"},
    "service": {"escalation", "ops", "scheduling", "store"},
    "api": {"service", "leases", "escalation", "planner", "plans", "ops", "scheduling", "store"},
    "__main__": {"api", "service", "store"},  # store: `--snapshot` (backup)
}


def test_the_brain_rooms_stand_in_their_layers():
    edges = children_graph("airig.brain")
    assert set(edges) - {"__init__"} <= set(BRAIN_ROOMS), "a new room: give it its place"
    wrong = sorted(
        f"airig.brain.{room} -> airig.brain.{target}"
        for room, targets in edges.items()
        for target in targets
        if target not in BRAIN_ROOMS.get(room, set()) | BRAIN_BASE
    )
    assert wrong == []
    assert layers(edges) <= 8


# The launcher's rooms (airig/launcher/*), bottom up: what each may import besides the
# loose modules under it (LAUNCHER_BASE). compose/ is the plan and the one Docker adapter;
# hardware/ and proofs/ look at the host's GPUs through it; lifecycle/ holds the verbs that
# change the kit, views/ those that only read it; cli/ is the command line over all of them.
LAUNCHER_BASE = {"settings", "envfile", "console", "gpu_info"}
LAUNCHER_ROOMS: dict[str, set[str]] = {
    "settings": set(),
    "envfile": set(),
    "console": set(),
    "gpu_info": set(),
    "images": set(),
    "brain_client": set(),
    "recipes": set(),
    "plan_inputs": {"recipes"},
    "inputs_sync": {"brain_client"},
    "compose": {"images"},
    "hardware": {"compose", "images"},
    "proofs": {"compose", "hardware", "images"},
    "lifecycle": {"compose", "hardware", "proofs", "images", "recipes", "brain_client"},
    "views": {"lifecycle", "compose", "hardware", "proofs", "images", "brain_client"},
    "cli": {
        "views",
        "lifecycle",
        "compose",
        "hardware",
        "proofs",
        "images",
        "recipes",
        "brain_client",
        "plan_inputs",
        "inputs_sync",
    },  # fmt: skip
}
# At most this many modules lie loose at airig/launcher/'s top (__init__.py included): a
# new one goes into a room.
LAUNCHER_LOOSE_MAX = 10


def test_the_launcher_rooms_stand_in_their_layers():
    edges = children_graph("airig.launcher")
    assert set(edges) - {"__init__"} <= set(LAUNCHER_ROOMS), "a new room: give it its place"
    wrong = sorted(
        f"airig.launcher.{room} -> airig.launcher.{target}"
        for room, targets in edges.items()
        for target in targets
        if target not in LAUNCHER_ROOMS.get(room, set()) | LAUNCHER_BASE
    )
    assert wrong == []


def test_few_modules_lie_loose_at_the_launchers_top():
    loose = sorted(p.name for p in (PACKAGE / "launcher").glob("*.py"))
    assert len(loose) <= LAUNCHER_LOOSE_MAX, loose


def test_every_module_belongs_to_a_room():
    assert {room_of(name) for name in graph()} <= set(ALLOWED)
    # the flat root holds only the package's face and its entry point
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py"]


def test_the_checker_sees_a_circle_and_an_upward_import(tmp_path, monkeypatch):
    """The rules above cannot pass by reading nothing."""
    fake = tmp_path / "airig"
    (fake / "common").mkdir(parents=True)
    (fake / "brain").mkdir()
    for folder in (fake, fake / "common", fake / "brain"):
        (folder / "__init__.py").write_text("")
    (fake / "common" / "a.py").write_text("from airig.brain import b\n")
    (fake / "brain" / "b.py").write_text("import airig.common.a\n")
    monkeypatch.setattr(f"{__name__}.PACKAGE", fake)
    assert "airig.brain.b" in graph()["airig.common.a"]
    assert graph()["airig.brain.b"] == {"airig.common.a"}
    try:
        test_no_import_circle()
    except AssertionError:
        pass
    else:
        raise AssertionError("the circle was not found")
    try:
        test_no_import_runs_up_between_rooms()
    except AssertionError:
        pass
    else:
        raise AssertionError("the upward import was not found")


def test_the_checker_sees_two_siblings_that_import_each_other(tmp_path, monkeypatch):
    fake = tmp_path / "airig"
    (fake / "brain" / "escalation").mkdir(parents=True)
    for folder in (fake, fake / "brain", fake / "brain" / "escalation"):
        (folder / "__init__.py").write_text("")
    (fake / "brain" / "leases.py").write_text("from airig.brain.escalation import criteria\n")
    (fake / "brain" / "escalation" / "criteria.py").write_text("")
    (fake / "brain" / "escalation" / "sender.py").write_text("from airig.brain import leases\n")
    monkeypatch.setattr(f"{__name__}.PACKAGE", fake)
    assert children_graph("airig.brain")["leases"] == {"escalation"}
    try:
        test_no_import_runs_back_up_inside_any_package()
    except AssertionError:
        pass
    else:
        raise AssertionError("the pair was not found")
    assert layers({"a": {"b"}, "b": {"c"}, "c": set()}) == 3


def test_the_checker_sees_a_launcher_room_that_imports_up_and_a_crowded_top(tmp_path, monkeypatch):
    """The launcher's rules cannot pass by reading nothing: compose/ importing views/ is
    found, and an eleventh loose module is too many."""
    fake = tmp_path / "airig"
    for folder in ("launcher/compose", "launcher/views"):
        (fake / folder).mkdir(parents=True)
    for folder in (fake, fake / "launcher", fake / "launcher/compose", fake / "launcher/views"):
        (folder / "__init__.py").write_text("")
    (fake / "launcher/compose/docker.py").write_text("from airig.launcher.views import status\n")
    (fake / "launcher/views/status.py").write_text("")
    monkeypatch.setattr(f"{__name__}.PACKAGE", fake)
    assert children_graph("airig.launcher")["compose"] == {"views"}
    try:
        test_the_launcher_rooms_stand_in_their_layers()
    except AssertionError:
        pass
    else:
        raise AssertionError("the upward launcher import was not found")
    test_few_modules_lie_loose_at_the_launchers_top()
    for n in range(LAUNCHER_LOOSE_MAX):
        (fake / "launcher" / f"loose{n}.py").write_text("")
    try:
        test_few_modules_lie_loose_at_the_launchers_top()
    except AssertionError:
        pass
    else:
        raise AssertionError("eleven loose modules were let through")
