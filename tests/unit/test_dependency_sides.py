"""Each side installs what it imports, and only that (AGENTS.md, "Where things are").

Two sides run airig's code: the host launcher (``airig/launcher/``, which
``python start_services.py`` installs with the extra it names) and the servers of the kit's
image (``03-agents/Dockerfile`` installs the extras it names). Every import is read from the
code, following each side's ``airig`` imports into the rooms below it (the launcher's
``models`` command runs part of ``provision``), lazy ones included. ``pyproject.toml``'s
base list holds what both sides import, each extra what one side alone imports.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airig"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# Each third-party import name and the distribution that installs it. A new import: add it
# here and its distribution, with a tested range, to its side's list in pyproject.toml.
DISTRIBUTION = {
    "alembic": "alembic",
    "anthropic": "anthropic",
    "apprise": "apprise",
    "apsw": "apsw",
    "docker": "docker",
    "dotenv": "python-dotenv",
    "fastapi": "fastapi",
    "httpx": "httpx",
    "httpx2": "httpx2",
    "inscriptis": "inscriptis",
    "libzim": "libzim",
    "markdown_it": "markdown-it-py",
    "ollama": "ollama",
    "openai": "openai",
    "prometheus_client": "prometheus-client",
    "psycopg": "psycopg",
    "pydantic": "pydantic",
    "pydantic_settings": "pydantic-settings",
    "pynvml": "nvidia-ml-py",
    "pytest": "pytest",
    "python_on_whales": "python-on-whales",
    "rapidocr_onnxruntime": "rapidocr-onnxruntime",
    "requests": "requests",
    "rich": "rich",
    "schemathesis": "schemathesis",
    "selenium": "selenium",
    "sqlalchemy": "sqlalchemy",
    "sqlite_vec": "sqlite-vec",
    "typer": "typer",
    "uvicorn": "uvicorn",
    "xdist": "pytest-xdist",
    "yaml": "pyyaml",
}
# Imported, and installed by the declared distribution that requires it.
COMES_WITH = {
    "anyio": "fastapi",  # starlette's and httpx's
    "hypothesis": "schemathesis",
    # rapidocr-onnxruntime's (an NVIDIA image's onnxruntime-gpu gives the same module)
    "onnxruntime": "rapidocr-onnxruntime",
    "PIL": "rapidocr-onnxruntime",
    "packaging": "pytest",
    "pydantic_core": "pydantic",
    "starlette": "fastapi",
}
# Imported when present, never installed by pip: amdsmi comes with ROCm on the host.
OPTIONAL = {"amdsmi"}
# Declared, never imported: used by what is installed, or run as a program.
NOT_IMPORTED = {
    "httptools": "uvicorn's HTTP parser when present",
    "uvloop": "uvicorn's event loop when present",
    "comfy-cli": "the `comfy` program the ComfyUI provisioner runs",
    "plotly": "its plotly.min.js, served by the brain's dashboard (found, never imported)",
}

LAUNCHER_ROOMS = ("launcher",)
SERVER_ROOMS = ("brain", "worker", "executors", "gateway", "services", "provision", "common")
# Test-only images: their own dependencies, in their own Dockerfiles.
TESTS_OWN_IMAGES = ("standins", "images")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imported(path: Path) -> set[str]:
    """Every module name ``path`` imports, anywhere in it (importlib with a literal too)."""
    this = module_name(path) if path.is_relative_to(PACKAGE) else ""
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def third_party(names: set[str], local: frozenset[str] | set[str] = frozenset()) -> set[str]:
    tops = {name.split(".")[0] for name in names if name}
    return {
        top
        for top in tops
        if top not in sys.stdlib_module_names and top not in {"airig", "__future__"} | local
    }


def side_imports(rooms: tuple[str, ...], extra_roots: tuple[str, ...] = ()) -> dict[str, str]:
    """Third-party import -> one airig module of the side that imports it."""
    todo = [m for m in MODULES if m.split(".")[1:2] and m.split(".")[1] in rooms]
    todo += list(extra_roots)
    seen: set[str] = set()
    found: dict[str, str] = {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        names = imported(MODULES[module])
        for top in sorted(third_party(names)):
            found.setdefault(top, module)
        for name in names:
            parts = name.split(".")
            # importing airig.a.b runs airig/a/__init__.py too
            todo += [".".join(parts[:i]) for i in range(2, len(parts) + 1)]
        todo = [m for m in todo if m in MODULES]
    return found


def distributions(imports: set[str]) -> set[str]:
    return {DISTRIBUTION.get(name) or COMES_WITH[name] for name in imports - OPTIONAL}


def requirements(extras: list[str] | None) -> set[str]:
    """Distributions ``pip install '.[extras]'`` installs directly (``airig[x]`` followed);
    None: the base list alone."""
    project = PYPROJECT["project"]
    lines = list(project["dependencies"])
    todo, done = list(extras or []), set()
    while todo:
        extra = todo.pop()
        if extra in done:
            continue
        done.add(extra)
        for line in project["optional-dependencies"][extra]:
            requirement = Requirement(line)
            if canonicalize_name(requirement.name) == "airig":
                todo += sorted(requirement.extras)
            else:
                lines.append(line)
    return {canonicalize_name(Requirement(line).name) for line in lines}


def extra_only(extra: str) -> set[str]:
    lines = PYPROJECT["project"]["optional-dependencies"][extra]
    return {canonicalize_name(Requirement(line).name) for line in lines}


def launcher_extras() -> list[str]:
    """The extra ``start_services.py`` installs into ``.venv/`` (its ``EXTRA``)."""
    tree = ast.parse((REPO / "start_services.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "EXTRA"
        ]:
            assert isinstance(node.value, ast.Constant)
            return node.value.value.split(",")
    raise AssertionError("start_services.py names no EXTRA")


def installed_extras(path: str, pattern: str) -> list[str]:
    found = re.findall(pattern, (REPO / path).read_text())
    assert len(found) == 1, f"{path}: one install of the package, with its extras"
    return found[0].split(",")


def image_extras() -> list[str]:
    return installed_extras("03-agents/Dockerfile", r'pip install [^\n]*"/src\[([a-z,]+)\]"')


SIDES = {
    "launcher": (lambda: side_imports(LAUNCHER_ROOMS, ("airig.__main__",)), launcher_extras),
    "server": (lambda: side_imports(SERVER_ROOMS), image_extras),
}


def unknown(imports: set[str]) -> list[str]:
    return sorted(imports - set(DISTRIBUTION) - set(COMES_WITH) - OPTIONAL)


def test_every_third_party_import_has_its_distribution():
    for side, (imports, _) in SIDES.items():
        assert unknown(set(imports())) == [], f"{side}: add these to DISTRIBUTION here"


def test_each_side_installs_what_it_imports():
    for side, (imports, extras) in SIDES.items():
        found = imports()
        installed = requirements(extras())
        missing = sorted(
            f"{DISTRIBUTION.get(name) or COMES_WITH[name]} (import {name} in {module})"
            for name, module in found.items()
            if name not in OPTIONAL
            and (DISTRIBUTION.get(name) or COMES_WITH[name]) not in installed
        )
        assert missing == [], f"the {side} side's install set ({extras()}) lacks these"


def test_each_list_names_only_what_its_sides_import():
    launcher = distributions(set(SIDES["launcher"][0]()))
    server = distributions(set(SIDES["server"][0]()))
    base = requirements(None)
    assert sorted(base - (launcher & server)) == [], "not imported by both sides: an extra's"
    assert sorted(extra_only("launcher") - launcher) == []
    assert sorted(extra_only("launcher") & server) == [], "the servers import it: base"
    for extra in ("server", "gateway", "provision"):
        assert sorted(extra_only(extra) - server - set(NOT_IMPORTED)) == [], extra
        assert sorted(extra_only(extra) & launcher) == [], f"{extra}: the launcher imports it"


def test_the_image_installs_the_servers_side_only():
    extras = image_extras()
    assert "launcher" not in extras and "test" not in extras
    installed = requirements(extras)
    assert installed.isdisjoint(extra_only("launcher"))
    # the Docker clients stay on the host (python-dotenv comes anyway, with pydantic-settings)
    assert {"python-on-whales", "docker"}.isdisjoint(installed)
    # the offline wheelhouse holds exactly what the image installs
    wheelhouse = installed_extras("tests/images/wheelhouse.sh", r'"\$root\[([a-z,]+)\]"')
    assert sorted(wheelhouse) == sorted(extras)


def test_the_launcher_never_installs_the_servers():
    installed = requirements(launcher_extras())
    assert installed.isdisjoint(extra_only("server") - requirements(None))
    assert "launcher" in launcher_extras()


def test_the_test_extra_installs_both_sides_and_what_the_tests_import():
    installed = requirements(["test"])
    for side, (_, extras) in SIDES.items():
        assert requirements(extras()) <= installed, side
    tests = REPO / "tests"
    local = {"tests"} | {p.stem for p in tests.rglob("*.py")}
    local |= {p.name for p in tests.rglob("*") if p.is_dir()}
    found: dict[str, str] = {}
    for path in sorted(tests.rglob("*.py")):
        if path.relative_to(tests).parts[0] in TESTS_OWN_IMAGES:
            continue
        for name in sorted(third_party(imported(path), local)):
            found.setdefault(name, str(path.relative_to(REPO)))
    assert unknown(set(found)) == [], "add these to DISTRIBUTION here"
    missing = sorted(
        f"{name} ({path})"
        for name, path in found.items()
        if name not in OPTIONAL and (DISTRIBUTION.get(name) or COMES_WITH[name]) not in installed
    )
    assert missing == []
