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
