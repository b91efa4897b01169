"""`tune KNOB=VALUE`: change one runtime knob in .env, recreate only what uses it, log it.

The compute runbook's order: concurrency first (fewer workers, less held ahead), then
memory (fewer loaded models, fewer parallel slots, shorter context, a smaller KV cache,
a smaller Whisper model), offload depth (OLLAMA_GPU_OVERHEAD) last.
Every change and rollback is one JSON line in ``.airig/tuning.log``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from airig.common.errors import ConfigError
from airig.launcher.compose.plan import ComposePlan, StackPlan
from airig.launcher.envfile import read_env, set_values
from airig.launcher.settings import Settings

STAGES = ("concurrency", "memory", "offload")


class KnobError(ConfigError):
    """A knob or value `tune` refuses: a usage error, nothing changed."""

    exit_code = 2


@dataclass(frozen=True)
class Knob:
    stage: int  # index in STAGES
    pattern: str  # a full match of the value
    hint: str


def _int(low: int) -> str:
    return r"0|[1-9][0-9]*" if low == 0 else r"[1-9][0-9]*"


KNOBS = {
    "AIRIG_CPU_WORKERS": Knob(0, _int(0), "a whole number ≥ 0, e.g. 1"),
    "AIRIG_WORKER_PREFETCH": Knob(0, _int(1), "a whole number ≥ 1 (1 = nothing held ahead)"),
    "OLLAMA_MAX_LOADED_MODELS": Knob(1, _int(1), "a whole number ≥ 1, e.g. 1"),
    "OLLAMA_CONTEXT_LENGTH": Knob(1, _int(1), "a whole number of tokens, e.g. 4096"),
    "OLLAMA_KV_CACHE_TYPE": Knob(1, "f16|q8_0|q4_0", "one of f16, q8_0, q4_0"),
    "OLLAMA_FLASH_ATTENTION": Knob(1, "0|1", "0 or 1 (q8_0/q4_0 KV cache needs 1)"),
    "OLLAMA_NUM_PARALLEL": Knob(1, _int(1), "a whole number ≥ 1 (each slot holds a context)"),
    # the Whisper model size: its init container pulls and verifies the new one
    "AIRIG_WHISPER_MODELS": Knob(
        1,
        r"[\w.-]+/[\w.-]+(,[\w.-]+/[\w.-]+)*",
        "Hugging Face ids, e.g. Systran/faster-whisper-base",
    ),
    # offload depth: VRAM Ollama leaves free per GPU; more means fewer layers on the GPU
    "OLLAMA_GPU_OVERHEAD": Knob(2, _int(0), "bytes ≥ 0, e.g. 1073741824 (1 GiB)"),
}


@dataclass
class Change:
    knob: str
    before: str
    after: str
    services: list[tuple[StackPlan, str]]
    warning: str  # "" or the one line saying the change skips ahead in the runbook's order


def log_path(settings: Settings) -> Path:
    return settings.state_dir / "tuning.log"


def parse_assignment(text: str) -> tuple[str, str]:
    """``KNOB=VALUE`` checked against KNOBS; a KnobError says what is wrong and the fix."""
    knob, sep, value = text.partition("=")
    knob, value = knob.strip(), value.strip()
    if not sep or not knob:
        raise KnobError(f"{text!r} is not KNOB=VALUE", "e.g. tune OLLAMA_CONTEXT_LENGTH=4096")
    if knob not in KNOBS:
        raise KnobError(f"{knob} is not a knob tune changes", f"one of: {', '.join(KNOBS)}")
    if not re.fullmatch(KNOBS[knob].pattern, value):
        raise KnobError(f"{knob}={value!r} is not a valid value", KNOBS[knob].hint)
    return knob, value


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", "fix or move the file away") from None


def append_log(path: Path, entry: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps(entry, sort_keys=True) + "\n")


def order_warning(knob: str, entries: list[dict[str, Any]]) -> str:
    """One line when ``knob`` skips a stage the log shows no change in yet."""
    tried = {KNOBS[e["knob"]].stage for e in entries if e.get("knob") in KNOBS}
    skipped = [i for i in range(KNOBS[knob].stage) if i not in tried]
    if not skipped:
        return ""
    names = [k for k, v in KNOBS.items() if v.stage in skipped]
    stage = STAGES[KNOBS[knob].stage]
    article = "an" if stage[0] in "aeiou" else "a"
    return (
        f"{knob} is {article} {stage} knob, but the tuning log has no "
        f"{' or '.join(STAGES[i] for i in skipped)} change yet (runbook order: try "
        f"{', '.join(names)} first)"
    )


def services_using(plan: ComposePlan, knob: str) -> list[tuple[StackPlan, str]]:
    """Services whose compose definition interpolates ``${KNOB…}`` (anchors merged)."""
    found = re.compile(r"\$\{" + re.escape(knob) + r"(?=[:}?+-])")
    out = []
    for stack in plan.stacks:
        for name, service in _services(stack).items():
            if any(found.search(s) for s in _strings(service)):
                out.append((stack, name))
    return out


class _Loader(yaml.SafeLoader):
    """Compose's own tags (``!reset``, ``!override`` in generated overlays) read as plain."""


def _tagged(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_Loader.add_multi_constructor("!", _tagged)


def _services(stack: StackPlan) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for path in stack.files:
        if not path.is_file():
            continue  # a generated overlay `up` has yet to write
        model = yaml.load(path.read_text(), Loader=_Loader) or {}  # noqa: S506
        for name, service in (model.get("services") or {}).items():
            merged.setdefault(name, []).append(service)
    return {
        name: parts
        for name, parts in merged.items()
        if _active(parts[0] if isinstance(parts[0], dict) else {}, stack.profiles)
    }


def _active(service: dict[str, Any], profiles: tuple[str, ...]) -> bool:
    wanted = service.get("profiles") or []
    return not wanted or any(p in profiles for p in wanted)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def current_value(settings: Settings, knob: str) -> str:
    """What .env holds (else .env.example's default)."""
    env = read_env(settings.env_file) if settings.env_file.is_file() else {}
    if knob in env:
        return env[knob]
    example = settings.example_file
    return read_env(example).get(knob, "") if example.is_file() else ""


def plan_change(settings: Settings, plan: ComposePlan, assignment: str) -> Change:
    knob, value = parse_assignment(assignment)
    if not settings.env_file.is_file():
        raise ConfigError(f"{settings.env_file} does not exist", "run python start_services.py")
    return Change(
        knob,
        current_value(settings, knob),
        value,
        services_using(plan, knob),
        order_warning(knob, read_log(log_path(settings))),
    )


def pending(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Changes not yet rolled back, oldest first."""
    undone = {e["rollback_of"] for e in entries if e.get("rollback_of") is not None}
    return [e for e in entries if e.get("rollback_of") is None and e.get("id") not in undone]


def apply(
    settings: Settings,
    change: Change,
    why: str,
    restart: Callable[[StackPlan, str], bool],
    triage: Callable[[], str | None],
    rollback_of: int | None = None,
) -> dict[str, Any]:
    """Write .env, recreate the services that use the knob, append the log entry."""
    path = log_path(settings)
    entries = read_log(path)
    before = triage()
    set_values(settings.env_file, {change.knob: change.after})
    healthy = {name: restart(stack, name) for stack, name in change.services}
    entry = {
        "id": max((int(e.get("id", 0)) for e in entries), default=0) + 1,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "knob": change.knob,
        "before": change.before,
        "after": change.after,
        "why": why,
        "services": sorted(healthy),
        "healthy": all(healthy.values()),
        "triage_before": before,
        "triage_after": triage(),
        "rollback_of": rollback_of,
    }
    append_log(path, entry)
    return entry


def rollback_change(settings: Settings, plan: ComposePlan) -> tuple[Change, int]:
    """The change undoing the newest change not yet rolled back, and that change's id."""
    todo = pending(read_log(log_path(settings)))
    if not todo:
        raise ConfigError("nothing to roll back", "tune --log shows the history")
    last = todo[-1]
    knob = last["knob"]
    change = Change(knob, current_value(settings, knob), last["before"], [], "")
    change.services = services_using(plan, knob)
    return change, int(last["id"])
