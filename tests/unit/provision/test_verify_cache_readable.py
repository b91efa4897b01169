"""The verify cache is readable by the `models-ready` gate's user (uid 10001), whatever
mode the model volume's root came with (issue 22 §5: the Models page said `comfyui
unreadable: Permission denied`)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from support import unprivileged

from airig.provision.cache import VerifyCache
from airig.services.gate import inventory


@pytest.fixture
def host_dir():
    """A folder every user can reach (pytest's own tmp root is private to its user)."""
    path = Path(tempfile.mkdtemp(prefix="airig-cache-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def test_the_gate_reads_a_cache_written_into_a_0700_volume_root(host_dir):
    volume = host_dir / "comfyui"  # a fresh volume copied up from yanwk's /root: 0700
    volume.mkdir(mode=0o700)
    cache_path = volume / ".airig-verified.json"
    cache = VerifyCache(cache_path)
    cache.mark_model("checkpoints/sd15.safetensors", 2, 1)
    cache.save()
    assert stat.S_IMODE(volume.stat().st_mode) == 0o711  # search only: no listing
    assert unprivileged(lambda: _models(cache_path)) is None
    seen = inventory([cache_path])[str(cache_path)]
    assert "checkpoints/sd15.safetensors" in seen["models"]


def test_an_unchanged_cache_still_opens_a_volume_an_older_kit_left_private(host_dir):
    volume = host_dir / "comfyui"
    volume.mkdir()
    cache_path = volume / ".airig-verified.json"
    first = VerifyCache(cache_path)
    first.mark_model("m", 1, 1)
    first.save()
    os.chmod(volume, 0o700)  # as the earlier kit left it
    VerifyCache(cache_path).save()  # nothing changed: nothing to write
    assert unprivileged(lambda: _models(cache_path)) is None


def _models(path) -> None:
    got = inventory([path])[str(path)]
    if "error" in got:
        raise PermissionError(got["error"])
