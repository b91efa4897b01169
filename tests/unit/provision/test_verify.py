"""The verifier: every way a model file can be wrong is caught, naming the file."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest
from support import unprivileged

from airig.provision.cache import VerifyCache
from airig.provision.verify import (
    ExpectedFile,
    FileCheckError,
    Verifier,
    check_regular,
    is_partial,
    sha256_file,
)

DATA = os.urandom(300_000)
DIGEST = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def blob(tmp_path: Path) -> Path:
    path = tmp_path / "blobs" / f"sha256-{DIGEST}"
    path.parent.mkdir()
    path.write_bytes(DATA)
    return path


def verifier(cache: VerifyCache | None = None, settle: float = 0.0) -> Verifier:
    return Verifier(cache, settle_seconds=settle)


def test_good_file_verifies(blob: Path) -> None:
    [result] = verifier().verify([ExpectedFile(blob, len(DATA), DIGEST)])
    assert (result.size, result.sha256, result.cached) == (len(DATA), DIGEST, False)


def test_sha256_file_matches_hashlib_across_buffer_boundaries(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = os.urandom(10_000)
    path.write_bytes(data)
    assert sha256_file(path, buffer_bytes=4096) == hashlib.sha256(data).hexdigest()


def test_truncated_file_fails_on_size(blob: Path) -> None:
    blob.write_bytes(DATA[:-1])
    with pytest.raises(FileCheckError, match="299999 bytes, expected 300000") as caught:
        verifier().verify([ExpectedFile(blob, len(DATA), DIGEST)])
    assert caught.value.path == blob and caught.value.corrupt


def test_one_flipped_byte_fails_on_digest(blob: Path) -> None:
    flipped = bytearray(DATA)
    flipped[123_456] ^= 0x01
    blob.write_bytes(bytes(flipped))
    with pytest.raises(FileCheckError, match="sha256 mismatch") as caught:
        verifier().verify([ExpectedFile(blob, len(DATA), DIGEST)])
    assert caught.value.corrupt


def test_missing_blob_fails_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "blobs" / "sha256-abc"
    with pytest.raises(FileCheckError, match="sha256-abc is missing") as caught:
        verifier().verify([ExpectedFile(missing, 1, None)])
    assert not caught.value.corrupt


def test_zero_size_fails(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.touch()
    with pytest.raises(FileCheckError, match="empty"):
        verifier().verify([ExpectedFile(empty)])


def test_directory_in_place_of_file_fails(tmp_path: Path) -> None:
    (tmp_path / "model.bin").mkdir()
    with pytest.raises(FileCheckError, match="is a directory"):
        check_regular(tmp_path / "model.bin")


def test_dangling_symlink_fails(tmp_path: Path) -> None:
    link = tmp_path / "model.bin"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(FileCheckError, match="dangling symlink"):
        check_regular(link)


def test_symlink_into_store_is_fine_outside_is_not(tmp_path: Path, blob: Path) -> None:
    link = tmp_path / "snapshot" / "model.bin"
    link.parent.mkdir()
    link.symlink_to(blob)
    assert check_regular(link, store=tmp_path).st_size == len(DATA)
    with pytest.raises(FileCheckError, match="links outside"):
        check_regular(link, store=tmp_path / "snapshot")


def test_unreadable_file_fails(reachable_tmp: Path) -> None:
    # As an unprivileged user (nobody when pytest runs as root, as on CI): root reads any
    # file, so the check could never fail there.
    blob = reachable_tmp / f"sha256-{DIGEST}"
    blob.write_bytes(DATA)
    blob.chmod(0)
    assert unprivileged(lambda: check_regular(blob)) == [
        "FileCheckError",
        f"{blob} is not readable",
    ]
    blob.chmod(0o644)
    assert unprivileged(lambda: check_regular(blob)) is None  # the same file, readable


def test_file_still_growing_fails(tmp_path: Path) -> None:
    growing = tmp_path / "growing.gguf"
    growing.write_bytes(b"x" * 1000)
    stop = threading.Event()

    def writer() -> None:
        with open(growing, "ab") as handle:
            while not stop.is_set():
                handle.write(b"y" * 1000)
                handle.flush()
                time.sleep(0.01)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        with pytest.raises(FileCheckError, match="still changing"):
            verifier(settle=0.2).verify([ExpectedFile(growing)])
    finally:
        stop.set()
        thread.join()


def test_stable_file_passes_the_settle_pause(blob: Path) -> None:
    pauses: list[float] = []
    check = Verifier(settle_seconds=5.0, sleep=pauses.append)
    check.verify([ExpectedFile(blob, len(DATA), DIGEST)])
    assert len(pauses) == 1 and 0 < pauses[0] <= 5.0


def test_cache_hits_skip_the_pause_but_are_still_restated(tmp_path: Path, blob: Path) -> None:
    pauses: list[float] = []
    cache = VerifyCache(tmp_path / "verified.json")
    check = Verifier(cache, settle_seconds=5.0, sleep=pauses.append)
    files = [ExpectedFile(blob, len(DATA), DIGEST)]
    check.verify(files)
    [result] = check.verify(files)
    assert result.cached and len(pauses) == 1


def test_partial_files_are_recognised() -> None:
    assert is_partial(Path("sha256-abc-partial-0"))
    assert is_partial(Path("model.safetensors.airig-partial"))
    assert not is_partial(Path("sha256-abc"))
