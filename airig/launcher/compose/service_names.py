"""One reading of a service name, for every command that takes one (`logs`, `restart`,
`triage`) and for the names the brain's alerts print: `whisper`, `ollama`, `comfyui`
find the active variant (`whisper-cpu`, `ollama-gpu-nvidia` …), never its init
container; an exact name finds itself."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from airig.common.errors import ConfigError


def matches_service(actual: str, wanted: str) -> bool:
    """`ollama` finds the active variant (`ollama-cpu`, `ollama-gpu-nvidia` …)."""
    return (
        actual == wanted or actual.startswith(f"{wanted}-") and "init" not in actual[len(wanted) :]
    )


def matching(running: Iterable[str], wanted: str) -> list[str]:
    """The services ``wanted`` names, sorted: the exact name alone when it runs, else every
    variant (one per kind on a rig; `worker` names each worker service)."""
    names = sorted(set(running))
    if wanted in names:
        return [wanted]
    return [name for name in names if matches_service(name, wanted)]


def resolve(running: Iterable[str], wanted: str) -> list[str]:
    """``matching``, or one line naming what runs when nothing matches."""
    names = sorted(set(running))
    found = matching(names, wanted)
    if not found:
        raise ConfigError(
            f"no running service named {wanted!r}",
            f"one of: {', '.join(names)}" if names else "nothing is running: start it first",
        )
    return found


def resolve_one(running: Iterable[str], wanted: str) -> str:
    """The one service ``wanted`` names (`restart`, `logs`: one service at a time)."""
    found = resolve(running, wanted)
    if len(found) > 1:
        raise ConfigError(
            f"{wanted!r} names {len(found)} running services: {', '.join(found)}",
            "name one of them",
        )
    return found[0]


def locate(by_stack: Mapping[str, Iterable[str]], wanted: str) -> tuple[str, str]:
    """The stack running the one service ``wanted`` names, and that service's name."""
    owner = {name: stack for stack, names in by_stack.items() for name in names}
    service = resolve_one(owner, wanted)
    return owner[service], service
