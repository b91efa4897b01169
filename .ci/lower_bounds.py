"""Print pip constraints that pin every dependency in pyproject.toml at its lower bound.

`.ci/lower-bounds` installs the kit with them and runs tests/unit, so the low end of each
range pyproject.toml states is tested, as the newest end is by `.ci/run`. Covers
[project] dependencies and every optional extra; a requirement's environment marker goes
with its pin, so a pin holds exactly where its requirement does. Needs `packaging`
(parsed as pip parses, not by hand).

Usage: python .ci/lower_bounds.py [pyproject.toml] > constraints.txt
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# Operators whose version is the lowest release the requirement admits.
LOWER = (">=", "==", "~=")


def lower_bound(requirement: Requirement) -> Version:
    bounds = [Version(s.version) for s in requirement.specifier if s.operator in LOWER]
    if not bounds:
        raise SystemExit(
            f"error: {requirement} has no lower bound; "
            "give it one (>=) in pyproject.toml, the release tests/unit passed on"
        )
    return max(bounds)


def constraints(pyproject: dict) -> list[str]:
    project = pyproject["project"]
    own = canonicalize_name(project["name"])
    requirements = [Requirement(line) for line in project.get("dependencies", [])]
    for extra in project.get("optional-dependencies", {}).values():
        requirements += [Requirement(line) for line in extra]
    pins: dict[tuple[str, str], Version] = {}  # (name, marker) -> the highest lower bound
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        if name == own:  # an extra that names the others (`airig[gateway]`)
            continue
        key = (name, str(requirement.marker or ""))
        bound = lower_bound(requirement)
        pins[key] = max(bound, pins.get(key, bound))
    return [f"{name}=={version}" + (f"; {marker}" if marker else "")
            for (name, marker), version in sorted(pins.items())]  # fmt: skip


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else "pyproject.toml")
    print("\n".join(constraints(tomllib.loads(path.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
