"""A proof container's exit and words → a verdict (pure).

A verdict quotes the failure in the image's own words, as upstream's issues print it, and
names the fix. The signatures below are matched anywhere in the output, first listed
first; an output none of them matches is quoted by its last telling line.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from airig.launcher.proofs.scripts import (
    FAIL_MARK,
    INFERENCE_COMPUTE,
    NOT_RUN_EXIT,
    NOT_RUN_MARK,
    OK_MARK,
)

PASSED, FAILED, TIMEOUT, NOT_RUN = "passed", "failed", "timeout", "not run"
MAX_DETAIL = 300  # characters of a quote kept in the verdict and the cache

NEWER_DRIVER = (
    "its GPU code needs a newer NVIDIA driver than this host's (upgrade the driver, then "
    "`up --reprove`)"
)
OLLAMA_NO_GPU = (
    "Ollama in this image finds no GPU it supports: check the driver (`nvidia-smi`), or "
    "use an image built for this GPU"
)
# (pattern, fix): the words upstream prints for each known failure
SIGNATURES: tuple[tuple[re.Pattern[str], str], ...] = (
    # CUDA error 804: forward-compatibility (cuda-compat) libraries on a GPU that is not a
    # data-center part (oobabooga/text-generation-webui#4407, a GTX 1050 Ti)
    (
        re.compile(
            r"forward compatibility was attempted on non supported HW|"
            r"cudaErrorCompatNotSupportedOnDevice|CUDA error:? ?804",
            re.I,
        ),
        "its CUDA compat libraries need a data-center GPU; a driver that supports the "
        "image's CUDA version natively runs it",
    ),  # fmt: skip
    # CUDA fatbins the driver cannot load: Ollama ≥ 0.30's compressed fatbins below 550
    # (ollama#16449, #16533)
    (re.compile(r"device kernel image is invalid", re.I), NEWER_DRIVER),
    # PyTorch / CUDA: no SASS for this compute capability and no PTX the driver can JIT
    (
        re.compile(r"no kernel image is available for execution on the device", re.I),
        "its build has no kernels for this GPU's compute capability: use a build for it, "
        "or a newer driver if it carries PTX",
    ),
    (
        re.compile(
            r"CUDA driver version is insufficient for CUDA runtime version|"
            r"cudaErrorInsufficientDriver|your nvidia driver is too old",
            re.I,
        ),
        NEWER_DRIVER,
    ),  # fmt: skip
    (re.compile(r"unsupported display driver / cuda driver combination", re.I), NEWER_DRIVER),
    # ROCm: a build without this card's gfx target
    (
        re.compile(
            r"hipErrorNoBinaryForGpu|invalid device function|"
            r"HIP error: invalid device",
            re.I,
        ),
        "its ROCm build lacks this card's gfx target: set HSA_OVERRIDE_GFX_VERSION in .env "
        "if the card runs as a listed target",
    ),  # fmt: skip
    (re.compile(r"no compatible GPUs were discovered", re.I), OLLAMA_NO_GPU),
    (
        re.compile(r"sees no (GPU|CUDA device)|is_available\(\) is False", re.I),
        "the framework in this image cannot use the GPU the engine gave it: check the "
        "driver (`nvidia-smi`, `rocminfo`) and that the image is built for this GPU",
    ),
)
GENERIC_FIX = "read the quoted line; `up --reprove` runs the proof again once it is fixed"
_LIBRARY = re.compile(r'\blibrary=("?)([^"\s]*)\1')
_NAME = re.compile(r'\b(?:description|name)="([^"]+)"')


@dataclass(frozen=True)
class Verdict:
    """The proof of one (service, image, GPU model, driver)."""

    service: str
    image: str
    image_id: str
    gpu: str  # the GPU model, as detection named it
    driver: str
    status: str  # passed | failed | timeout | not run
    detail: str  # what the image said: the quote of a failure, what it saw on a pass
    fix: str = ""
    seconds: float = 0.0
    at: str = ""
    recalled: bool = False  # from .airig/proofs.json, not run this time

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def failed(self) -> bool:
        """A failure the image caused (timeout included): the next candidate takes over."""
        return self.status in (FAILED, TIMEOUT)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Outcome:
    """What the container did: its exit code (None: still running when read), its output
    (stdout and stderr together), whether the wait ran out, the seconds it took."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    seconds: float = 0.0
    not_run: str = ""  # the proof could not start (no image, no Docker): why


def judge(outcome: Outcome, until: str = "", gpus: int = 1) -> tuple[str, str, str]:
    """(status, detail, fix) of one proof. ``until``: a server's ready text (Ollama's
    discovery); ``gpus``: the devices the container was given."""
    if outcome.not_run:
        return NOT_RUN, outcome.not_run, ""
    if outcome.exit_code == NOT_RUN_EXIT and NOT_RUN_MARK in outcome.output:
        said = _line_with(outcome.output, NOT_RUN_MARK).split(NOT_RUN_MARK, 1)[1].strip()
        return NOT_RUN, clip(said), ""
    if until == INFERENCE_COMPUTE:
        return _judge_ollama(outcome, gpus)
    text = outcome.output
    if outcome.exit_code == 0 and OK_MARK in text:
        return PASSED, clip(_line_with(text, OK_MARK).split(OK_MARK, 1)[1].strip()), ""
    quote, fix = known(text)
    if outcome.timed_out and not quote:
        return TIMEOUT, f"no answer in {outcome.seconds:.0f} s", _timeout_fix()
    if not quote:
        failed = _line_with(text, FAIL_MARK)
        quote = failed.split(FAIL_MARK, 1)[1].strip() if failed else _last_telling(text)
        if outcome.exit_code not in (None, 0) and not quote:
            quote = f"exited {outcome.exit_code} with no output"
    return FAILED, clip(quote or "no output"), fix or GENERIC_FIX


def _judge_ollama(outcome: Outcome, gpus: int) -> tuple[str, str, str]:
    lines = [line for line in outcome.output.splitlines() if INFERENCE_COMPUTE in line]
    on_gpu = [line for line in lines if _library(line) not in ("", "cpu")]
    quote, fix = known(outcome.output)  # a runner's CUDA error outweighs its discovery
    if quote:
        return FAILED, clip(quote), fix
    if on_gpu and len(on_gpu) >= gpus:
        names = ", ".join(f"{_name(line)} ({_library(line)})" for line in on_gpu)
        return PASSED, clip(f"Ollama discovered {names}"), ""
    if on_gpu:  # fewer devices than the container was given
        detail = f"Ollama discovered {len(on_gpu)} of the {gpus} GPUs it was given"
        return FAILED, detail, GENERIC_FIX
    if lines:
        return FAILED, clip(lines[-1].strip()), OLLAMA_NO_GPU
    if outcome.timed_out:
        return TIMEOUT, f"no GPU discovery line in {outcome.seconds:.0f} s", _timeout_fix()
    said = _last_telling(outcome.output) or f"exited {outcome.exit_code} with no output"
    return FAILED, clip(said), GENERIC_FIX


def known(text: str) -> tuple[str, str]:
    """The line of the first known signature in ``text``, and its fix; ("", "") if none."""
    for pattern, fix in SIGNATURES:
        found = pattern.search(text)
        if found:
            start = text.rfind("\n", 0, found.start()) + 1
            end = text.find("\n", found.end())
            line = text[start : end if end >= 0 else len(text)].strip()
            return line.replace(FAIL_MARK, "").strip(), fix
    return "", ""


def _library(line: str) -> str:
    found = _LIBRARY.search(line)
    return found.group(2).lower() if found else ""


def _name(line: str) -> str:
    found = _NAME.search(line)
    return found.group(1) if found else "a GPU"


def _line_with(text: str, mark: str) -> str:
    return next((line for line in reversed(text.splitlines()) if mark in line), "")


def _last_telling(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def clip(text: str) -> str:
    text = text.replace("\x00", "")
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


def _timeout_fix() -> str:
    return (
        "the image gave no verdict in time (a busy engine, or a GPU that hangs): raise "
        "AIRIG_PROOF_TIMEOUT in .env, or `up --reprove` later"
    )
