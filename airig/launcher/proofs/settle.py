"""A failed proof moves the service to the next image of the catalogue that fits.

For each compute service on a GPU, its image is proved on each distinct (GPU model,
driver) the service will use. A failure excludes that image and asks the chooser again
(``choose_images(excluded=…)``): the next variant that fits (an older Ollama, a CUDA
build without compat libraries), the CPU image last, said in one line that quotes the
image and names the fix. A pinned image that fails is the user's word: a refusal, never
replaced. ``settle`` is pure (the proof and the chooser come in as functions); ``prove``
below binds it to Docker, the cache and the settings for `up`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from rich.markup import escape

from airig.common.errors import HardwareError
from airig.launcher.gpu_info import GpuInfo
from airig.launcher.images import ImageChoice, ImageSelection
from airig.launcher.images.catalog import LABEL
from airig.launcher.proofs.judge import NOT_RUN, Verdict
from airig.launcher.proofs.scripts import ProofSpec, spec_for

# One proof of ``choice`` on ``gpu`` with ``spec`` (run, or recalled from the cache)
ProveFn = Callable[[ImageChoice, ProofSpec, GpuInfo], Verdict]
# The selection again, with these upstream images excluded
RechooseFn = Callable[[frozenset[str]], ImageSelection]
MAX_FALLBACKS = 12  # more candidates than any service lists: a guard, never reached


@dataclass
class Settled:
    selection: ImageSelection
    lines: list[str] = field(default_factory=list)  # rich markup, one per proof or move
    verdicts: list[Verdict] = field(default_factory=list)
    moved: dict[str, dict[str, Any]] = field(default_factory=dict)  # service → what happened


def distinct_gpus(gpus: list[GpuInfo]) -> list[GpuInfo]:
    """One GPU per (model, driver): a proof on one GTX 1060 stands for the other four."""
    seen: dict[tuple[str, str], GpuInfo] = {}
    for gpu in gpus:
        seen.setdefault((gpu.name, driver_of(gpu)), gpu)
    return list(seen.values())


def driver_of(gpu: GpuInfo) -> str:
    return gpu.driver_version or gpu.kernel_driver or "?"


def settle(
    selection: ImageSelection,
    gpus: list[GpuInfo],
    pins: dict[str, str],
    prove: ProveFn,
    rechoose: RechooseFn,
    upstream_of: Callable[[str], str],
    extra_env: dict[str, str] | None = None,
) -> Settled:
    result = Settled(selection)
    for original in selection.choices:
        current, excluded = original, set[str]()
        while len(excluded) <= MAX_FALLBACKS:
            spec = _spec(current, extra_env)
            if spec is None or not current.on_gpu or current.refusal is not None or not gpus:
                break
            verdicts = [prove(current, spec, gpu) for gpu in distinct_gpus(gpus)]
            result.verdicts += verdicts
            bad = next((v for v in verdicts if v.failed), None)
            if bad is None:
                result.lines += [_kept_line(v) for v in verdicts]
                break
            if pins.get(current.variable):
                current = replace(current, refusal=_pin_refusal(current, bad))
                break
            excluded.add(upstream_of(current.image))
            following = rechoose(frozenset(excluded)).of(current.service)
            line = _moved_line(bad, following)
            result.lines.append(f"  [red]✘[/] {escape(line)}")
            result.moved[current.service] = {
                "from": current.image, "to": following.image, "on_gpu": following.on_gpu,
                "gpu": bad.gpu, "driver": bad.driver, "said": bad.detail, "fix": bad.fix,
                "line": line,
            }  # fmt: skip
            if not following.on_gpu:
                warning = f"{LABEL[current.service]} runs on CPU: {line}"
                following = replace(following, warning=warning)
            if following.image == current.image:
                break  # the chooser has nothing else: keep the line, stop asking
            current = following
        result.selection = _swap(result.selection, current)
    return result


def _spec(choice: ImageChoice, extra_env: dict[str, str] | None) -> ProofSpec | None:
    env = {**(extra_env or {}), **choice.env}
    return spec_for(choice.service, choice.backend, env)


def _kept_line(verdict: Verdict) -> str:
    if verdict.status == NOT_RUN:
        return (
            f"  [yellow]⚠[/] {escape(verdict.image)} not proved on {escape(verdict.gpu)}: "
            f"{escape(verdict.detail)}"
        )
    took = f"{verdict.seconds:.0f} s"
    cached = f" [dim]({'proved before' if verdict.recalled else took})[/]"
    return (
        f"  [green]✔[/] {escape(verdict.image)} on {escape(verdict.gpu)} (driver "
        f"{escape(verdict.driver)}): {escape(verdict.detail)}{cached}"
    )


def _moved_line(bad: Verdict, following: ImageChoice) -> str:
    target = following.image if following.on_gpu else f"its CPU image {following.image}"
    return (
        f'{bad.image} on {bad.gpu} (driver {bad.driver}): "{bad.detail}" → using {target}; '
        f"{bad.fix}"
    )


def _pin_refusal(choice: ImageChoice, bad: Verdict) -> HardwareError:
    return HardwareError(
        f"{choice.variable}={choice.image} failed its proof on {bad.gpu} (driver "
        f'{bad.driver}): "{bad.detail}"',
        f"{bad.fix}; or empty {choice.variable} in .env to let airig pick an image that runs",
    )


def _swap(selection: ImageSelection, choice: ImageChoice) -> ImageSelection:
    choices = tuple(choice if c.service == choice.service else c for c in selection.choices)
    env = dict(selection.env)
    env[choice.variable] = choice.image
    return replace(selection, choices=choices, env=env)


def verdict_of(
    choice: ImageChoice, gpu: GpuInfo, image_id: str, status: str, detail: str, fix: str,
    seconds: float,
) -> Verdict:  # fmt: skip
    at = datetime.now(UTC).isoformat(timespec="seconds")
    return Verdict(choice.service, choice.image, image_id, gpu.name, driver_of(gpu), status,
                   detail, fix, round(seconds, 1), at)  # fmt: skip
