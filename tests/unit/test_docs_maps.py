"""The maps in AGENTS.md and README ("How the code is laid out") stay in step with the tree:
every package is on a map, every file of the brain is in "The brain's map", and every
`airig/...` path the docs name exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airig"
AGENTS = (ROOT / "AGENTS.md").read_text()
README = (ROOT / "README.md").read_text()


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py"))


def test_every_package_is_on_the_map():
    brain_map = section(AGENTS, "The brain's map")
    missing = []
    for folder in packages():
        rel = folder.relative_to(ROOT).as_posix()
        if f"`{rel}/" in AGENTS:
            continue
        if folder.is_relative_to(PACKAGE / "brain") and f"`{folder.name}/" in brain_map:
            continue
        missing.append(rel)
    assert missing == []


def test_every_brain_module_is_in_the_brains_map():
    brain_map = section(AGENTS, "The brain's map")
    missing = [
        p.relative_to(ROOT).as_posix()
        for p in sorted((PACKAGE / "brain").rglob("*.py"))
        if p.name != "__init__.py" and f"`{p.name}`" not in brain_map
        and f"`{p.stem}`" not in brain_map and f"`{p.name} " not in brain_map
        and not (p.parent.name == "routes" and f"`{p.stem}`" in brain_map)
    ]  # fmt: skip
    assert missing == []


def test_every_path_the_docs_name_exists():
    named = set(re.findall(r"`(airig/[\w/.-]+)`", AGENTS + README))
    named |= set(re.findall(r"\b(airig/[\w/-]+\.py)\b", AGENTS + README))
    assert len(named) > 20  # the check reads the docs' paths, not nothing
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert missing == []


def test_the_readme_layout_lists_every_room_of_airig():
    layout = section(README, "How the code is laid out")
    rooms = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    listed = sorted(set(re.findall(r"^  (\w+)/", layout, re.M)))
    assert listed == rooms
    brain_rooms = sorted(
        p.name for p in (PACKAGE / "brain").iterdir() if (p / "__init__.py").exists()
    )
    assert sorted(set(re.findall(r"^    (\w+)/", layout, re.M))) == brain_rooms
