"""The maps and links of the docs stay in step with the tree.

- The maps: every package is on AGENTS.md's map, every file of the brain is in "The brain's
  map", the layout in docs/development.md ("How the code is laid out") lists every room,
  and every `airig/...` path a doc names (README, docs/, the AGENTS.md files, PLANS.md)
  exists.
- The links: README is the first screen and the manual is in docs/, so every docs page is
  linked from README, and every relative link of README, docs/ and the AGENTS.md files
  reaches a file that exists and, with an ``#anchor``, a heading of that file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airig"
AGENTS = (ROOT / "AGENTS.md").read_text()
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))
LAYOUT_PAGE = ROOT / "docs" / "development.md"
# Every Markdown file a person reads: its links and the paths it names must be true.
LINKED = sorted(
    {ROOT / "README.md", ROOT / "AGENTS.md", *DOCS, *ROOT.glob("0*/AGENTS.md"),
     PACKAGE / "brain" / "PLANS.md"}
)  # fmt: skip
# [text](target): the target up to a space or ")", an optional "title" after it.
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*([^)\s]+)\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py"))


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (a shell comment there is no heading, and a
    ``[x](y)`` in a code sample no link)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, the Markdown marks and punctuation out
    (letters, digits, ``-`` and ``_`` stay), each space a ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link: its text
    text = re.sub(r"[^\w\- ]", "", text.lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (``#`` to ``######``), duplicates numbered
    as GitHub numbers them (``-1``, ``-2``)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", prose(path.read_text()), re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    text = prose(path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # `[x](y)` in inline code is no link either
    return LINK.findall(text) + IMAGE.findall(text)


def broken_links(path: Path) -> list[str]:
    """Each relative link of ``path`` that reaches no file, or no heading of its file."""
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no file {os.path.relpath(dest, ROOT)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.name}")
    return broken


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


@pytest.mark.parametrize("doc", LINKED, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_path_the_docs_name_exists(doc):
    text = doc.read_text()
    named = set(re.findall(r"`(airig/[\w/.-]+)`", text))
    named |= set(re.findall(r"\b(airig/[\w/-]+\.py)\b", text))
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert missing == []


def test_the_path_check_reads_the_docs_paths():
    # the check above reads the docs' paths, not nothing
    text = "".join(p.read_text() for p in LINKED)
    assert len(set(re.findall(r"`(airig/[\w/.-]+)`", text))) > 20


def test_the_code_layout_lists_every_room_of_airig():
    layout = section(LAYOUT_PAGE.read_text(), "How the code is laid out")
    rooms = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    listed = sorted(set(re.findall(r"^  (\w+)/", layout, re.M)))
    assert listed == rooms
    brain_rooms = sorted(
        p.name for p in (PACKAGE / "brain").iterdir() if (p / "__init__.py").exists()
    )
    assert sorted(set(re.findall(r"^    (\w+)/", layout, re.M))) == brain_rooms
    # the launcher's rooms, on its line and the lines that continue it
    launcher = re.search(r"^  launcher/(.*?)\n(?=  \w)", layout, re.M | re.S)
    assert launcher is not None
    rooms = [p.name for p in (PACKAGE / "launcher").iterdir() if (p / "__init__.py").exists()]
    assert [r for r in sorted(rooms) if f"{r}/" not in launcher.group(1)] == []


def test_readme_links_every_page_of_the_manual():
    assert len(DOCS) >= 5  # the manual is in docs/, not back in README
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []


@pytest.mark.parametrize("doc", LINKED, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_a_heading(doc):
    assert broken_links(doc) == []


def test_readme_stays_a_first_screen():
    """The operator's manual moved to docs/ (issue 37): README keeps what airig is, the
    two commands, what you get, the commands, the recipes and the links."""
    headings = re.findall(r"^## (.+)$", prose(README), re.M)
    kept = ["What you get", "Commands", "Recipes", "The manual"]
    assert [h for h in headings if h in kept] == kept
    # 169 lines when the manual moved out (665 and growing before): a new section of the
    # operator's manual belongs in a docs page, linked from "The manual"
    assert len(README.splitlines()) <= 250
    first_screen = README[: README.index("\n## ")]
    assert "python start_services.py" in first_screen
    assert "```bash\npython -m pytest\n```" in first_screen  # the test command .ci/run runs
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^[^#\n]*\bpython3? -m pytest\b", ci, re.M)  # the command CI runs


# ------------------------------------------------------------------ the checks, checked
def test_a_link_to_a_missing_file_or_heading_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Second `rig`, again!\n\n## Same\n## Same\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md) [ok](docs/a.md#second-rig-again) [ok](docs/a.md#same-1) "
        "[ok](#top) [web](https://example.com/x#y) ![img](docs/a.md)\n"
        "[gone](docs/b.md) [no anchor](docs/a.md#third) [self](#nowhere)\n"
        "`[code](docs/c.md)`\n```\n[fenced](docs/d.md)\n# not a heading\n```\n# Top\n"
    )
    assert broken_links(page) == [
        "docs/b.md: no file docs/b.md",
        "docs/a.md#third: no heading with that anchor in a.md",
        "#nowhere: no heading with that anchor in README.md",
    ]
    assert anchors(page) == {"top"}


def test_the_slug_is_githubs():
    assert slug("What `up` does") == "what-up-does"
    assert slug("Goals, plan tasks and the external tier") == (
        "goals-plan-tasks-and-the-external-tier"
    )
    assert slug("A missing task_class is inferred (and reported as a fix)") == (
        "a-missing-task_class-is-inferred-and-reported-as-a-fix"
    )
    assert slug("Images, video and documents") == "images-video-and-documents"
