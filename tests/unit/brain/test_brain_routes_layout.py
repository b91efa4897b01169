"""The brain's route files share what they need through ``airig/brain/api/deps.py`` (house
style): no route file imports another one."""

from __future__ import annotations

import ast
from pathlib import Path

ROUTES = Path(__file__).resolve().parents[3] / "airig" / "brain" / "api" / "routes"


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative to airig.brain.api.routes (level 1), airig.brain (2)
                anchor = "airig.brain.api.routes".rsplit(".", node.level - 1)[0]
                base = f"{anchor}.{base}" if base else anchor
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def test_no_route_file_imports_another():
    files = sorted(ROUTES.glob("*.py"))
    routes = {f"airig.brain.api.routes.{p.stem}" for p in files if p.stem != "__init__"}
    assert len(routes) >= 5
    crossing = {p.name: sorted(imported(p) & routes) for p in files}
    assert {name: found for name, found in crossing.items() if found} == {}
