"""One declaration per setting: a key two sides read lives in ``airig/common/shared_settings.py``.

Each side has one settings object in ``airig/<side>/settings.py`` (the launcher, the brain,
the gateway, the workers, the init containers). The rules held here:

- No key is declared in two settings modules: a module declares a key when one of its
  fields spells it (an ``alias``, the launcher's ``knob(default, "KEY", …)``, or the field's
  name where the object reads names case-insensitively, as provisioning's does).
- A key two settings objects read is in ``SHARED``, and every field reading it takes it
  from there (``shared.setting``, the launcher's ``shared_knob``): none spells it.
- Each side's default is common's (``in_container`` for the containers), with its help
  and bounds; and unset gives what the default's text gives, so a side that reads the value
  as another type (the brain's bool for on/off, the gateway's SecretStr) agrees with it.
- Compose's fallbacks (``${KEY:-default}``) of a shared key are its default, and no module
  of ``airig/`` but common spells a shared default such as the planner's model.

``tests/unit/test_settings_declared.py`` holds the launcher's declaration to .env.example
and docs/configuration.md.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import AliasChoices, Field, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from airig.common import shared_settings
from airig.common.shared_settings import SHARED, Shared
from airig.launcher.settings import env_text

ROOT = Path(__file__).resolve().parents[2]
COMMON = ROOT / "airig" / "common" / "shared_settings.py"
MODULES = sorted((ROOT / "airig").glob("*/settings.py"))
HOST = "airig.launcher.settings"  # the one settings object on the host: Shared.default
# The calls that take a field from common: shared.setting(...), the launcher's shared_knob.
FROM_COMMON = {"setting", "shared_knob"}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def settings_classes() -> dict[str, type[BaseSettings]]:
    """module -> the settings object it defines (one each)."""
    found = {}
    for path in MODULES:
        module = importlib.import_module(module_name(path))
        classes = [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, BaseSettings)
            and value.__module__ == module.__name__
        ]
        assert len(classes) == 1, f"{module.__name__}: one settings object, found {classes}"
        found[module.__name__] = classes[0]
    return found


CLASSES = settings_classes()


def keys_of(name: str, field: FieldInfo) -> list[str]:
    """The environment keys a field reads."""
    if isinstance(field.validation_alias, AliasChoices):
        return [str(choice) for choice in field.validation_alias.choices]
    if isinstance(field.validation_alias, str):
        return [field.validation_alias]
    return [field.alias or name.upper()]


def readers() -> dict[str, list[tuple[str, str]]]:
    """key -> (module, attribute) of every settings field that reads it."""
    found: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for module, cls in CLASSES.items():
        for name, field in cls.model_fields.items():
            for key in keys_of(name, field):
                found[key].append((module, name))
    return found


def fields_taken_from_common(module: str) -> dict[str, ast.Call]:
    """attribute -> its call, for the fields of ``module``'s settings object whose value is
    a call to common's declaration (``shared.setting(…)``, ``shared_knob(…)``)."""
    tree = ast.parse((ROOT / Path(*module.split("."))).with_suffix(".py").read_text())
    [body] = [node for node in tree.body if isinstance(node, ast.ClassDef)
              and node.name == CLASSES[module].__name__]  # fmt: skip
    taken = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        call = node.value
        if isinstance(call, ast.Call):
            func = call.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in FROM_COMMON:
                taken[node.target.id] = call
    return taken


def declared_in_modules() -> dict[str, set[str]]:
    """key -> the settings modules that declare it themselves (not taken from common)."""
    found: dict[str, set[str]] = defaultdict(set)
    for module, cls in CLASSES.items():
        taken = fields_taken_from_common(module)
        for name, field in cls.model_fields.items():
            if name not in taken:
                for key in keys_of(name, field):
                    found[key].add(module)
    return found


def test_every_settings_module_is_seen() -> None:
    assert set(CLASSES) >= {
        "airig.launcher.settings",
        "airig.brain.settings",
        "airig.gateway.settings",
        "airig.worker.settings",
        "airig.provision.settings",
    }


def test_no_key_is_declared_in_two_settings_modules() -> None:
    twice = {key: sorted(mods) for key, mods in declared_in_modules().items() if len(mods) > 1}
    assert twice == {}, (
        f"declared in more than one settings module: {twice}; declare each once in "
        "airig/common/shared_settings.py and take it with shared.setting / shared_knob"
    )


def test_a_key_two_sides_read_is_declared_in_common_and_taken_from_there() -> None:
    shared_by = {key: places for key, places in readers().items() if len(places) > 1}
    missing = sorted(set(shared_by) - set(SHARED))
    assert missing == [], f"read by two settings objects, not in SHARED: {missing}"
    spelled = {key: sorted(declared_in_modules()[key]) for key in SHARED}
    spelled = {key: mods for key, mods in spelled.items() if mods}
    assert spelled == {}, f"shared keys a settings module declares itself: {spelled}"
    lonely = sorted(key for key in SHARED if len(readers().get(key, [])) < 2)
    assert lonely == [], f"in SHARED but read by one settings object or none: {lonely}"


def test_the_registry_holds_every_declaration_once() -> None:
    declared = [v for v in vars(shared_settings).values() if isinstance(v, Shared)]
    assert len(declared) == len(SHARED) == len({d.key for d in declared})
    for key, declaration in SHARED.items():
        assert declaration.key == key and declaration.help.strip(), key
        assert "\n" not in declaration.help, f"{key}: help is one line"


@pytest.mark.parametrize("key", sorted(SHARED))
def test_each_default_fits_its_declared_type_and_bounds(key: str) -> None:
    declared = SHARED[key]
    check: Any = TypeAdapter(Annotated[declared.kind, Field(**declared.bounds)])
    for default in {declared.default, declared.in_container}:
        assert check.validate_python(default) == default, key


def expected_default(module: str, declared: Shared[Any]) -> Any:
    return declared.default if module == HOST else declared.in_container


@pytest.mark.parametrize(
    ("module", "attribute", "key"),
    [
        (module, name, key)
        for key, places in sorted(readers().items())
        if key in SHARED
        for module, name in places
    ],
)
def test_each_side_takes_default_bounds_and_help_from_common(
    module: str, attribute: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    declared = SHARED[key]
    cls = CLASSES[module]
    field = cls.model_fields[attribute]
    default = expected_default(module, declared)
    assert type(field.default) is type(default) and field.default == default, (
        f"{module}.{attribute}: default {field.default!r}, common declares {default!r}"
    )
    assert field.description == declared.help, f"{module}.{attribute}: help not common's"
    bounds = [item for item in field.metadata if not isinstance(item, type)]  # not NoDecode
    assert bounds == Field(**declared.bounds).metadata, f"{module}.{attribute}: bounds"
    # Unset, or set to the default's text: the same value, whatever type the side reads.
    for name in readers():
        monkeypatch.delenv(name, raising=False)
    extra = {"WORKER_NAME": "check"} if module == "airig.worker.settings" else {}
    unset = getattr(cls(**extra), attribute)
    given = getattr(cls(**extra, **{key: env_text(default)}), attribute)
    assert unset == given, f"{module}.{attribute}: unset {unset!r}, {key}={default!r} {given!r}"


def test_compose_fallbacks_of_shared_keys_are_their_defaults() -> None:
    text = "".join(path.read_text() for path in sorted(ROOT.glob("0*/compose*.yaml")))
    differ = {
        (key, value)
        for key, value in re.findall(r"\$\{(\w+):?-([^}]*)\}", text)
        if key in SHARED and value != env_text(SHARED[key].default)
    }
    assert differ == set(), f"compose fallback vs airig/common/shared_settings.py: {differ}"


def string_constants(path: Path) -> set[str]:
    """The string literals of a module, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings
    }  # fmt: skip


def test_no_module_but_common_spells_a_shared_default() -> None:
    """The planner's model, the servers' URLs, the key file's path: written once, in
    common; code that needs one (the plan executor's fallback model) imports it."""
    values = {
        value
        for declared in SHARED.values()
        for value in (declared.default, declared.in_container)
        if isinstance(value, str) and len(value) >= 8
    }
    assert shared_settings.PLANNER_MODEL.default in values
    spelled = {
        str(path.relative_to(ROOT)): sorted(values & string_constants(path))
        for path in sorted((ROOT / "airig").rglob("*.py"))
        if path != COMMON
    }
    spelled = {path: found for path, found in spelled.items() if found}
    assert spelled == {}, f"import these from airig.common.shared_settings: {spelled}"
