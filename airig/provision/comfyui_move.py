"""Move an older kit's ComfyUI files out of its one /root volume, once (container side).

Older kits mounted one volume on ComfyUI's whole /root, where yanwk/comfyui-boot copies
its bundled ComfyUI only when ``/root/ComfyUI/main.py`` is missing: the first image's
code ran under every later image's torch. The user's files now live in one volume per
folder, at the paths upstream's compose files mount. The launcher
(``airig/launcher/lifecycle/comfy_volumes.py``) runs ``python -m airig.provision.comfyui_move``
in the kit's image with the old volume at ``/old`` and each new one at ``/new/<name>``,
before the compute stack starts. Standard library only.

Per file: copy under a hidden temporary name, rename into place, then delete the
original, so a move killed half-way loses nothing and the next run finishes it. A file
already present in the new volume is left where it was (counted as ``left``). Done
once: a marker in the old volume makes later runs answer at once.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

# folder under the old /root -> the new volume (its name after the rig's prefix), which
# the mover sees at /new/<subdir(volume)>
FOLDERS = {
    "ComfyUI/models": "comfyui-models",
    "ComfyUI/custom_nodes": "comfyui-custom-nodes",
    "ComfyUI/input": "comfyui-input",
    "ComfyUI/output": "comfyui-output",
    "ComfyUI/user": "comfyui-user",
}
MARKER = ".airig-moved.json"
TEMP_SUFFIX = ".airig-moving"


def subdir(volume: str) -> str:
    """The folder under /new where the mover sees a volume: models for comfyui-models."""
    return volume.removeprefix("comfyui-")


def _move_file(source: Path, target: Path) -> None:
    temp = target.with_name(f".{target.name}{TEMP_SUFFIX}")
    if source.is_symlink():
        temp.unlink(missing_ok=True)
        os.symlink(os.readlink(source), temp)
    else:
        shutil.copy2(source, temp)
    os.replace(temp, target)
    source.unlink()


def move_tree(source: Path, target: Path) -> tuple[int, int]:
    """Move every file under ``source`` into ``target``: (moved, left in place)."""
    moved = left = 0
    for folder, dirs, files in os.walk(source):
        here = Path(folder)
        into = target / here.relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        # os.walk lists a symlink to a folder among the folders and does not enter it:
        # it is moved as the link it is
        links = [d for d in dirs if (here / d).is_symlink()]
        dirs[:] = [d for d in dirs if d not in links]
        for name in [*files, *links]:
            if name.endswith(TEMP_SUFFIX):
                (here / name).unlink()  # a killed earlier run's copy: the original is intact
                continue
            if (into / name).exists() or (into / name).is_symlink():
                left += 1
                continue
            _move_file(here / name, into / name)
            moved += 1
    for folder, _dirs, _files in os.walk(source, topdown=False):
        if Path(folder) != source and not any(Path(folder).iterdir()):
            Path(folder).rmdir()
    return moved, left


def move_all(old: Path, new: Path) -> dict[str, object]:
    """The summary line's content; idempotent (the marker)."""
    marker = old / MARKER
    if marker.exists():
        return {"already": True, **json.loads(marker.read_text())}
    moved: dict[str, int] = {}
    left = 0
    for folder, volume in FOLDERS.items():
        source = old / folder
        if source.is_dir():
            count, kept = move_tree(source, new / subdir(volume))
            moved[volume] = count
            left += kept
    summary: dict[str, object] = {"moved": moved, "left": left, "at": int(time.time())}
    marker.write_text(json.dumps(summary))
    return {"already": False, **summary}


def main() -> None:
    old = Path(os.environ.get("AIRIG_MOVE_FROM", "/old"))
    new = Path(os.environ.get("AIRIG_MOVE_TO", "/new"))
    try:
        summary = move_all(old, new)
    except OSError as exc:
        print(f"{exc.strerror}: {exc.filename}", file=sys.stderr, flush=True)
        sys.exit(1)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
