"""The recipes a rig is set up for (``AIRIG_RECIPES``, ``up --recipe NAME``): their models
are pulled with the ones ``.env`` lists.

A recipe (``recipes/<name>.yaml``) names its models by role, ``{{ models.vision }}``; the
role's model is the one ``.env`` chose (``plan_inputs.ROLES``). Without this a user who
wants to run ``video-notes`` must find out which role it uses, which knob names that
role's model, and add it to ``AIRIG_OLLAMA_MODELS`` by hand; with it ``up`` pulls them.
An optional model (``{{ models.vision | optional }}``: ``pdf-text`` reads pages with
tesseract without one) is pulled too: naming the recipe asks for its best path.

The effective lists reach ``ollama-init`` / ``whisper-init`` through ``.airig/host.env``
(it comes after ``.env``, so its value wins) and ``submit`` checks plans against the same
lists (``pulled``), so what `up` pulled is what `submit` accepts.
"""

from __future__ import annotations

import re
from pathlib import Path

from airig.common.errors import ConfigError
from airig.common.ollama_names import OllamaName
from airig.launcher.settings import Settings

# ``{{ models.<role> }}``, or ``{{ models.<role> | optional }}``: the recipe runs without
# that model (an empty string in its place) when the rig does not pull it.
MODEL = re.compile(r"\{\{\s*models\.([A-Za-z_]+)\s*(\|\s*optional\s*)?\}\}")
# role -> (the knob that chooses its model, the list that must hold that model)
ROLES = {
    "llm": ("AIRIG_PLANNER_MODEL", "AIRIG_OLLAMA_MODELS"),
    "vision": ("AIRIG_VISION_MODEL", "AIRIG_OLLAMA_MODELS"),
    "embed": ("AIRIG_EMBED_MODEL", "AIRIG_OLLAMA_MODELS"),
    "whisper": ("AIRIG_WHISPER_MODELS", "AIRIG_WHISPER_MODELS"),
}
RECIPES_DIR = "recipes"
RECIPES_KEY = "AIRIG_RECIPES"
MAX_RECIPE_BYTES = 1 << 20  # a recipe is a page of YAML; a larger file is not one


def chosen_models(settings: Settings) -> dict[str, str]:
    """The model .env chose for each role ("" where none)."""
    return {
        "llm": settings.planner_model,
        "vision": settings.vision_model,
        "embed": settings.embed_model,
        "whisper": settings.whisper_models[0] if settings.whisper_models else "",
    }


def recipe_names(settings: Settings) -> list[str]:
    folder = settings.root / RECIPES_DIR
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def recipe_path(settings: Settings, name: str) -> Path:
    """``recipes/<name>.yaml``; ConfigError naming the recipes there for any other name
    (a path, ``..``, a typo)."""
    known = recipe_names(settings)
    if name not in known:
        raise ConfigError(
            f"{RECIPES_KEY} names {name!r}, which is no recipe of this kit",
            f"use one of {', '.join(known) or '(none: recipes/ is missing)'}",
        )
    return settings.root / RECIPES_DIR / f"{name}.yaml"


def recipe_models(settings: Settings, name: str) -> dict[str, list[str]]:
    """The models recipe ``name`` runs, by the list that must hold them
    (``AIRIG_OLLAMA_MODELS`` / ``AIRIG_WHISPER_MODELS``)."""
    path = recipe_path(settings, name)
    try:
        with path.open("rb") as handle:
            text = handle.read(MAX_RECIPE_BYTES + 1).decode("utf-8", "replace")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", "check the file") from None
    if len(text) > MAX_RECIPE_BYTES:
        raise ConfigError(f"{path} is over {MAX_RECIPE_BYTES} bytes", "is it a recipe?")
    chosen = chosen_models(settings)
    wanted: dict[str, list[str]] = {}
    for role in sorted({m.group(1) for m in MODEL.finditer(text)}):
        if role not in ROLES or not chosen[role]:
            continue  # `submit` says what is wrong with the recipe, with its line
        listed = ROLES[role][1]
        if chosen[role] not in wanted.setdefault(listed, []):
            wanted[listed].append(chosen[role])
    return wanted


def pulled(settings: Settings) -> dict[str, tuple[str, ...]]:
    """What this rig pulls, by list: ``.env``'s lists, then each model of the recipes in
    ``AIRIG_RECIPES`` that the list lacks (Ollama's spellings of one model count once)."""
    lists = {
        "AIRIG_OLLAMA_MODELS": settings.ollama_models,
        "AIRIG_WHISPER_MODELS": settings.whisper_models,
    }
    out = {key: list(value) for key, value in lists.items()}
    for name in settings.recipes:
        for listed, models in recipe_models(settings, name).items():
            for model in models:
                if not any(same_model(model, have, listed) for have in out[listed]):
                    out[listed].append(model)
    return {key: tuple(value) for key, value in out.items()}


def pull_env(settings: Settings) -> dict[str, str]:
    """host.env's model lists when AIRIG_RECIPES adds to them; {} when it does not (.env's
    own values then stand, exactly as the user wrote them)."""
    if not settings.recipes:
        return {}
    return {key: ",".join(models) for key, models in pulled(settings).items()}


def same_model(model: str, name: str, listed: str) -> bool:
    """Ollama spells one model several ways (``library/x:latest`` is ``x``)."""
    if listed != "AIRIG_OLLAMA_MODELS":
        return model == name
    try:
        return OllamaName.parse(model).display == OllamaName.parse(name).display
    except ConfigError:
        return False
