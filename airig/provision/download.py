"""Download one ComfyUI model file into a temporary name, resumably.

comfy-cli is the tool ComfyUI users know, so a fresh download goes through it. Its
httpx downloader (read from comfy-cli 1.23 ``file_utils.py``) cannot resume, though:
every attempt streams into a new ``<dest>.<random>.part`` that it deletes on any
failure, it only accepts HTTP 200, it refuses an existing destination, and it checks
no checksum. A verified, resumable download matters more than the tool, so:

1. no partial yet → ``comfy model download`` into ``<filename>.airig-partial``;
2. comfy-cli failed, or a partial is left over (from our own fallback, or a ``.part``
   orphaned when a container was killed mid-transfer) → resume that partial with an
   HTTP ``Range`` request through requests, appending to it.

The partial name contains ``-partial``, which the verifier and ComfyUI's model lists
(known extensions only) both ignore.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import requests

from airig.common.errors import ProvisionError

PARTIAL_SUFFIX = ".airig-partial"
# Small enough that a dropped connection loses little: urllib3 discards a chunk it could
# not fill, and whatever reached the file is what the next run resumes from.
CHUNK_BYTES = 64 * 1024
FILE_TIMEOUT = (10.0, 300.0)

Progress = Callable[[int], None]


def partial_path(final: Path) -> Path:
    return final.with_name(final.name + PARTIAL_SUFFIX)


def comfy_command(root: Path, url: str, folder: str, filename: str) -> list[str]:
    """The comfy-cli call; global flags must come before the subcommand."""
    return [
        "comfy",
        "--skip-prompt",
        f"--workspace={root}",
        "model",
        "download",
        "--url",
        url,
        "--relative-path",
        f"models/{folder}",
        "--filename",
        filename,
    ]


def adopt_orphans(partial: Path) -> None:
    """Keep the largest leftover of this download as ``partial``; delete the others.

    comfy-cli names its temp ``<partial name>.<8 chars>.part``; a SIGKILL leaves it.
    """
    candidates = [p for p in partial.parent.glob(f"{partial.name}.*.part") if p.is_file()]
    if partial.is_file():
        candidates.append(partial)
    if not candidates:
        return
    best = max(candidates, key=lambda p: p.stat().st_size)
    for path in candidates:
        if path != best:
            path.unlink(missing_ok=True)
    if best != partial:
        os.replace(best, partial)


def partial_bytes(partial: Path) -> int:
    """Bytes landed so far, counting comfy-cli's own in-flight ``.part`` sibling."""
    total = 0
    for path in [partial, *partial.parent.glob(f"{partial.name}.*.part")]:
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


def run_comfy_cli(root: Path, url: str, folder: str, filename: str) -> str | None:
    """Run comfy-cli; None on success, else the last line it printed (the reason).

    comfy-cli 1.23 creates ``~/.config/comfy-cli/tmp`` before any command
    (``config_manager.py`` ``ConfigManager.load``, the path from ``constants.py``
    ``DEFAULT_CONFIG``), and the init container's root file system, ``/root`` included,
    is read-only: it gets a private HOME in the temporary directory (a tmpfs there).
    """
    if shutil.which("comfy") is None:
        return "comfy-cli is not installed"
    with tempfile.TemporaryDirectory(prefix="comfy-cli-home-") as home:
        env = {**os.environ, "DO_NOT_TRACK": "1", "HOME": home}
        result = subprocess.run(
            comfy_command(root, url, folder, filename),
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode == 0:
        return None
    lines = (result.stdout + result.stderr).strip().splitlines()
    return lines[-1][:300] if lines else f"exit code {result.returncode}"


def _open_for_resume(response: requests.Response, partial: Path, offset: int) -> tuple[str, int]:
    """The file mode and start offset the server's answer to our Range request allows."""
    if response.status_code == 206:
        content_range = response.headers.get("Content-Range", "")
        if not content_range.startswith(f"bytes {offset}-"):
            raise ProvisionError(f"server answered Range {offset}- with {content_range!r}")
        return "ab", offset
    if response.status_code == 200:
        return "wb", 0  # the server ignores Range: start over
    raise ProvisionError(f"download failed: HTTP {response.status_code} from {response.url}")


def range_download(
    url: str,
    partial: Path,
    expected_size: int,
    progress: Progress,
    session: requests.Session | None = None,
) -> None:
    """Append to ``partial`` until it holds ``expected_size`` bytes (or fail, keeping it)."""
    http = session or requests.Session()
    offset = partial.stat().st_size if partial.exists() else 0
    if offset > expected_size:
        partial.unlink()
        offset = 0
    if offset == expected_size:
        return
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        with http.get(url, headers=headers, stream=True, timeout=FILE_TIMEOUT) as response:
            mode, done = _open_for_resume(response, partial, offset)
            with open(partial, mode) as handle:
                for chunk in response.iter_content(CHUNK_BYTES):
                    handle.write(chunk)
                    done += len(chunk)
                    progress(done)
                    if done > expected_size:
                        break
    except requests.RequestException as exc:
        raise ProvisionError(
            f"connection lost during download ({type(exc).__name__})", "run again to resume"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise ProvisionError(f"disk full writing {partial}", "free space, run again") from None
        raise ProvisionError(f"cannot write {partial}: {exc.strerror}") from None
    if done < expected_size:
        raise ProvisionError(
            f"download incomplete ({done} of {expected_size} bytes)", "run again to resume"
        )


COMFY_CLI = "comfy-cli"
RANGE = "range"


def fetch(
    root: Path,
    url: str,
    folder: str,
    partial: Path,
    expected_size: int,
    progress: Progress,
) -> tuple[str, str | None]:
    """Bring ``partial`` to ``expected_size`` bytes: comfy-cli first, Range resume after.

    Returns which downloader brought the file (``COMFY_CLI`` or ``RANGE``) and, for
    ``RANGE``, why comfy-cli did not.
    """
    partial.parent.mkdir(parents=True, exist_ok=True)
    adopt_orphans(partial)
    if partial.exists():
        reason: str | None = "a partial download is left over: resuming it"
    else:
        reason = run_comfy_cli(root, url, folder, partial.name)
        adopt_orphans(partial)  # a comfy-cli killed mid-way leaves its .part behind
        if reason is None and partial.exists():
            progress(partial.stat().st_size)
            return COMFY_CLI, None
        reason = reason or "comfy-cli exited 0 but wrote no file"
    range_download(url, partial, expected_size, progress)
    return RANGE, reason
