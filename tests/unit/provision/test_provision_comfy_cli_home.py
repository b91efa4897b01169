"""comfy-cli in the init container: a writable HOME of its own, and which downloader ran.

comfy-cli 1.23 creates ``~/.config/comfy-cli/tmp`` before any command
(``config_manager.py`` ``ConfigManager.load``); the init container's ``/root`` is on a
read-only root file system, so with the inherited HOME every download took the fallback.
A stand-in ``comfy`` on PATH does the same first step, then writes the file.
"""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

import pytest
import requests

from airig.provision import download
from airig.provision.download import partial_path
from airig.provision.events import Emitter

FAKE_COMFY = """#!/bin/sh
# what comfy-cli does first (ConfigManager.load): makedirs ~/.config/comfy-cli/tmp
mkdir -p "$HOME/.config/comfy-cli/tmp" || exit 1
echo "$HOME" > "{seen}"
workspace=""; rel=""; name=""
while [ $# -gt 0 ]; do
  case "$1" in
    --workspace=*) workspace="${{1#--workspace=}}" ;;
    --relative-path) rel="$2"; shift ;;
    --filename) name="$2"; shift ;;
  esac
  shift
done
printf 'x%.0s' $(seq 1 {size}) > "$workspace/$rel/$name"
"""


@pytest.fixture
def fake_comfy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`comfy` on PATH; HOME points where nothing can be made (a path under a file),
    as /root is for root in a container with read_only: true."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "home-seen"
    script = bin_dir / "comfy"
    script.write_text(FAKE_COMFY.format(seen=seen, size=16))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("HOME", str(blocker / "root"))
    return seen


def test_comfy_cli_runs_with_a_writable_home_of_its_own(tmp_path: Path, fake_comfy: Path) -> None:
    (tmp_path / "ws" / "models" / "loras").mkdir(parents=True)
    reason = download.run_comfy_cli(tmp_path / "ws", "http://h/x", "loras", "m.airig-partial")
    assert reason is None
    home = Path(fake_comfy.read_text().strip())
    assert home != Path(os.environ["HOME"])
    assert not home.exists()  # a private, temporary HOME: removed when comfy-cli is done


def test_fetch_says_comfy_cli_brought_the_file(tmp_path: Path, fake_comfy: Path) -> None:
    partial = partial_path(tmp_path / "models" / "loras" / "m.safetensors")
    seen: list[int] = []
    result = download.fetch(tmp_path, "http://h/x", "loras", partial, 16, seen.append)
    assert result == (download.COMFY_CLI, None)
    assert partial.read_bytes() == b"x" * 16 and seen == [16]


def test_fetch_says_range_and_why_when_comfy_cli_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download, "run_comfy_cli", lambda *_: "comfy-cli is not installed")

    class Body:
        status_code, headers, url = 200, {}, "http://h/x"

        def __enter__(self) -> Body:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def iter_content(self, _size: int) -> list[bytes]:
            return [b"y" * 8]

    class Session:
        def get(self, *_: object, **__: object) -> Body:
            return Body()

    monkeypatch.setattr(requests, "Session", Session)
    partial = partial_path(tmp_path / "models" / "vae" / "v.safetensors")
    result = download.fetch(tmp_path, "http://h/x", "vae", partial, 8, lambda _: None)
    assert result == (download.RANGE, "comfy-cli is not installed")


def test_the_downloader_event_line() -> None:
    out = io.StringIO()
    Emitter("comfyui", out).downloader("tiny", "comfy-cli", None)
    assert json.loads(out.getvalue()) == {
        "event": "downloader",
        "service": "comfyui",
        "model": "tiny",
        "tool": "comfy-cli",
        "reason": None,
    }
