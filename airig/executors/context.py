"""What every executor receives and returns, and the helpers they share.

Executors import from here; ``airig.executors.base`` re-exports these names together
with the dispatch table, so callers need only one import.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from airig.common.errors import AirigError
from airig.common.shared_settings import MAX_IMAGE_PIXELS

T = TypeVar("T")

# The most pixels an image may declare before anything decodes it (AIRIG_MAX_IMAGE_PIXELS;
# media.py says why 64 megapixels); a PDF page at the asked dpi is held to it too.
DEFAULT_MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS.default


@dataclass
class ExecContext:
    """Everything an executor may use for one attempt."""

    ollama_url: str
    comfyui_url: str
    whisper_url: str
    data_dir: Path
    output_dir: Path
    timeout_s: float
    cancel: threading.Event
    trusted: bool
    gpu_index: int | None = None
    # Load-time Ollama options pinned per model (num_ctx, num_gpu ...): every request and
    # every preload for that model uses the same values, so Ollama never reloads silently.
    model_options: dict[str, dict] = field(default_factory=dict)
    # The largest image an llm / ocr task reads (AIRIG_MAX_IMAGE_BYTES; media.py says why).
    max_image_bytes: int = 20 * 1024 * 1024
    # The most pixels an image read by an llm / ocr task or a rendered PDF page may have.
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    started: float = field(default_factory=time.monotonic)

    def remaining(self) -> float:
        """Seconds left of this attempt's runtime limit (never negative)."""
        return max(0.0, self.timeout_s - (time.monotonic() - self.started))

    def check(self) -> None:
        """Raise the right TaskError when the attempt was cancelled or ran out of time."""
        if self.cancel.is_set():
            raise cancelled_error()
        if self.remaining() <= 0:
            raise timeout_error(self.timeout_s)


@dataclass
class ExecResult:
    output: dict
    files: list[str] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)


class TaskError(AirigError):
    """An attempt failed. ``error_type`` is matched exactly by the retry policy."""

    def __init__(
        self,
        message: str,
        *,
        error_type: str,
        retryable: bool = True,
        hint: str = "",
        details: dict | None = None,
    ) -> None:
        super().__init__(message, hint)
        self.error_type = error_type
        self.retryable = retryable
        # JSON-able facts for the report (exit code, output tails, node errors ...).
        self.details = details or {}

    def to_dict(self) -> dict:
        return {
            "error_type": self.error_type,
            "message": self.message,
            "retryable": self.retryable,
            "hint": self.hint,
            "details": self.details,
        }


def cancelled_error() -> TaskError:
    return TaskError(
        "attempt cancelled", error_type="cancelled", hint="the lease was lost or the worker stops"
    )


def timeout_error(limit_s: float) -> TaskError:
    return TaskError(
        f"attempt exceeded its {limit_s:g} s runtime limit",
        error_type="timeout",
        hint="raise the task's timeout or split the work",
    )


def resolve_data_path(data_dir: Path, relative: str) -> Path:
    """The real path of ``relative`` under ``data_dir``; refuses anything that leaves it.

    Symlinks are resolved first, so a link inside the volume cannot point outside it.
    """
    _no_nul(relative)
    candidate = Path(relative)
    if candidate.is_absolute() or ".." in candidate.parts:
        raise bad_path(relative)
    root = data_dir.resolve()
    try:
        resolved = (root / candidate).resolve()
    except (OSError, RuntimeError) as exc:  # a name too long, a loop of links
        raise TaskError(
            f"path {relative[:200]!r} cannot be looked up: {getattr(exc, 'strerror', None) or exc}",
            error_type="bad_input",
            retryable=False,
            hint="give a shorter path, without links that loop",
        ) from None
    if resolved != root and root not in resolved.parents:
        raise bad_path(relative)
    return resolved


def _no_nul(relative: str) -> None:
    if "\x00" in relative:  # no file name holds one; os calls raise ValueError on it
        raise TaskError(
            f"path {ascii(relative)[:200]} holds a NUL byte, which no file name may",
            error_type="bad_input",
            retryable=False,
            hint="give a path relative to the shared data directory",
        )


# Where tasks write on the data volume: outputs/ (what `backup` keeps, what the file service
# serves). inputs/ holds the user's files, and index/ the brain's search index, which the
# brain alone writes (a note naming index/search.sqlite broke every search).
OUTPUTS = "outputs"
BRAIN_ONLY = "index"


def output_folder_path(data_dir: Path, relative: str, what: str) -> Path:
    """The real path of a folder a task writes into: inside ``outputs/`` once every link
    is resolved, never under ``index/``."""
    return _inside_outputs(data_dir, relative, what, resolve_data_path(data_dir, relative))


def output_file_path(data_dir: Path, relative: str, what: str) -> Path:
    """A file a task writes: its folder's real path (inside ``outputs/``, as above) with
    the file's own name kept, not followed: a link standing there is replaced, never
    written through."""
    _no_nul(relative)
    candidate = Path(relative)
    if not candidate.name or candidate.name in (".", ".."):
        raise bad_path(relative)
    folder = resolve_data_path(data_dir, candidate.parent.as_posix())
    target = _inside_outputs(data_dir, relative, what, folder / candidate.name)
    if target == data_dir.resolve() / OUTPUTS:
        raise _not_in_outputs(relative, what)
    return target


def _inside_outputs(data_dir: Path, relative: str, what: str, path: Path) -> Path:
    root = data_dir.resolve()
    brain, outputs = root / BRAIN_ONLY, root / OUTPUTS
    if path == brain or brain in path.parents:
        raise TaskError(
            f"{what} {relative!r} is in {BRAIN_ONLY}/, the brain's search index: no task "
            "writes there",
            error_type="bad_input",
            retryable=False,
            hint=f"write under {OUTPUTS}/ (a recipe's {{{{ outputs_dir }}}})",
        )
    if path != outputs and outputs not in path.parents:
        raise _not_in_outputs(relative, what)
    _inside_named_folder(root, relative, what, path)
    return path


def _inside_named_folder(root: Path, relative: str, what: str, path: Path) -> None:
    """A path naming a folder of ``outputs/`` (``outputs/talks/...``: a plan's folder,
    ``airig/common/write_paths.py``) stays inside it once links are resolved: a link in
    it cannot lead the write into another plan's folder."""
    parts = Path(relative).parts
    if len(parts) < 3 or parts[0] != OUTPUTS:
        return
    folder = (root / OUTPUTS / parts[1]).resolve()
    if path != folder and folder not in path.parents:
        raise TaskError(
            f"{what} {relative!r} leads through a link out of {OUTPUTS}/{parts[1]}/ (to "
            f"{path.relative_to(root).as_posix()!r}): a task writes inside the folder of "
            f"{OUTPUTS}/ its path names",
            error_type="bad_input",
            retryable=False,
            hint=f"remove the link, or name the real folder under {OUTPUTS}/",
        )


def _not_in_outputs(relative: str, what: str) -> TaskError:
    return TaskError(
        f"{what} {relative!r} is not inside {OUTPUTS}/: tasks write only under "
        f"{OUTPUTS}/ of the data volume",
        error_type="bad_input",
        retryable=False,
        hint=f"name a path under {OUTPUTS}/ (a recipe's {{{{ outputs_dir }}}}), "
        f"e.g. {OUTPUTS}/notes/talk.md; a link there may not lead out of it",
    )


def bad_path(relative: str) -> TaskError:
    return TaskError(
        f"path {relative!r} leaves the data volume",
        error_type="bad_input",
        retryable=False,
        hint="give a path relative to the shared data directory",
    )


def run_abortable(ctx: ExecContext, call: Callable[[], T], abort: Callable[[], None]) -> T:
    """Run a blocking ``call`` while watching cancel and the deadline.

    When either fires, ``abort`` runs (close the connection, interrupt the service) and a
    TaskError is raised at once; the call's thread is left to wind down on its own.
    """
    box: dict[str, object] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="airig-exec-call", daemon=True).start()
    while not done.wait(min(0.05, max(ctx.remaining(), 0.001))):
        if ctx.cancel.is_set() or ctx.remaining() <= 0:
            abort()
            ctx.check()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def elapsed_ms(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 3)


def pinned_by_runtime() -> bool:
    """True inside a container the launcher pinned to its GPUs.

    Docker's NVIDIA device request sets NVIDIA_VISIBLE_DEVICES, and the launcher sets
    ROCR_VISIBLE_DEVICES for AMD; either way the container sees only its own cards,
    renumbered from 0, so host indexes mean nothing inside it.
    """
    return bool(os.environ.get("NVIDIA_VISIBLE_DEVICES") or os.environ.get("ROCR_VISIBLE_DEVICES"))
