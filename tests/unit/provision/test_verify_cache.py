"""The verification cache: a hit skips the hash, any change to the file forces one."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from airig.provision import verify as verify_module
from airig.provision.cache import VerifyCache
from airig.provision.verify import ExpectedFile, FileCheckError, Verifier

DATA = b"model bytes " * 1000
DIGEST = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record every real hash the verifier computes."""
    seen: list[Path] = []
    real = verify_module.sha256_file

    def counting(path: Path, *args: object) -> str:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(verify_module, "sha256_file", counting)
    return seen


def run(cache_file: Path, blob: Path) -> bool:
    """One verification with a freshly loaded cache; returns whether it was a cache hit."""
    cache = VerifyCache(cache_file)
    [result] = Verifier(cache, settle_seconds=0).verify([ExpectedFile(blob, None, DIGEST)])
    cache.save()
    return result.cached


@pytest.fixture
def blob(tmp_path: Path) -> Path:
    path = tmp_path / "blob"
    path.write_bytes(DATA)
    return path


def test_second_run_hits_the_cache(tmp_path: Path, blob: Path, hashes: list[Path]) -> None:
    cache_file = tmp_path / "cache" / "verified.json"
    assert run(cache_file, blob) is False
    assert run(cache_file, blob) is True
    assert len(hashes) == 1


def test_mtime_change_misses(tmp_path: Path, blob: Path, hashes: list[Path]) -> None:
    cache_file = tmp_path / "verified.json"
    run(cache_file, blob)
    stat = blob.stat()
    os.utime(blob, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert run(cache_file, blob) is False
    assert len(hashes) == 2


def test_size_change_misses_and_fails(tmp_path: Path, blob: Path) -> None:
    cache_file = tmp_path / "verified.json"
    run(cache_file, blob)
    with open(blob, "ab") as handle:
        handle.write(b"!")
    with pytest.raises(FileCheckError, match="sha256 mismatch"):
        run(cache_file, blob)


def test_inode_change_misses(tmp_path: Path, blob: Path, hashes: list[Path]) -> None:
    cache_file = tmp_path / "verified.json"
    run(cache_file, blob)
    stat = blob.stat()
    replacement = tmp_path / "replacement"
    replacement.write_bytes(DATA)
    os.utime(replacement, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(replacement, blob)
    assert blob.stat().st_ino != stat.st_ino
    assert run(cache_file, blob) is False
    assert len(hashes) == 2


def test_flip_with_restored_mtime_still_misses(tmp_path: Path, blob: Path) -> None:
    """`touch -r` can restore mtime after an edit; ctime cannot be restored."""
    cache_file = tmp_path / "verified.json"
    run(cache_file, blob)
    stat = blob.stat()
    with open(blob, "r+b") as handle:
        handle.write(b"M")
    os.utime(blob, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(FileCheckError, match="sha256 mismatch"):
        run(cache_file, blob)


def test_damaged_cache_is_ignored(tmp_path: Path, blob: Path) -> None:
    cache_file = tmp_path / "verified.json"
    cache_file.write_text("{not json")
    assert run(cache_file, blob) is False
    assert run(cache_file, blob) is True


def test_save_is_atomic_and_leaves_no_temp(tmp_path: Path, blob: Path) -> None:
    cache_file = tmp_path / "verified.json"
    run(cache_file, blob)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert str(blob) in cache_file.read_text()


def test_entries_of_deleted_files_are_dropped(tmp_path: Path, blob: Path) -> None:
    cache_file = tmp_path / "verified.json"
    run(cache_file, blob)
    other = tmp_path / "other"
    other.write_bytes(DATA)
    blob.unlink()
    run(cache_file, other)
    assert str(blob) not in cache_file.read_text()


def test_files_without_a_digest_are_remembered_by_identity(tmp_path: Path, blob: Path) -> None:
    cache_file = tmp_path / "verified.json"
    for expected_cached in (False, True):
        cache = VerifyCache(cache_file)
        [result] = Verifier(cache, settle_seconds=0).verify([ExpectedFile(blob)])
        cache.save()
        assert result.cached is expected_cached
    # Asked later with a digest, the file is hashed, not trusted on identity alone.
    assert run(cache_file, blob) is False
    assert run(cache_file, blob) is True
