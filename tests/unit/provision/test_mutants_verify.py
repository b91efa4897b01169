"""The verifier as provisioning sees it: which broken files it calls corrupt (so a repair
deletes them and pulls again), what it keeps, and what a Whisper store's links may reach.

Written against the mutants that survived ``benchmarks/mutation/run.sh`` in
``airig/provision/verify.py``. A repair is observed through ``remove_corrupt``, the
function every provisioner's repair runs.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from support import unprivileged

from airig.provision.cache import VerifyCache
from airig.provision.common import remove_corrupt
from airig.provision.verify import ExpectedFile, FileCheckError, Verifier, sha256_file

DATA = b"model bytes " * 1000
DIGEST = hashlib.sha256(DATA).hexdigest()


def write(path: Path, data: bytes = DATA) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def refusal(verifier: Verifier, expected: ExpectedFile) -> FileCheckError:
    with pytest.raises(FileCheckError) as caught:
        verifier.verify([expected])
    assert caught.value.path == expected.path
    return caught.value


def quick(**kwargs) -> Verifier:
    return Verifier(settle_seconds=0, **kwargs)


# ------------------------------------------------------------------ corrupt: repair deletes
def test_an_empty_file_is_corrupt_and_repair_deletes_it(tmp_path: Path) -> None:
    empty = write(tmp_path / "model.gguf", b"")
    error = refusal(quick(), ExpectedFile(empty))
    assert (error.corrupt, error.message) == (True, f"{empty} is empty (0 bytes)")
    assert remove_corrupt(quick(), [ExpectedFile(empty)]) == [empty]
    assert not empty.exists()


def test_a_dangling_symlink_is_corrupt_and_repair_removes_the_link(tmp_path: Path) -> None:
    link = tmp_path / "snapshots" / "model.bin"
    link.parent.mkdir()
    link.symlink_to(tmp_path / "blobs" / "gone")
    error = refusal(quick(), ExpectedFile(link))
    assert (error.corrupt, error.message) == (True, f"{link} is a dangling symlink")
    assert remove_corrupt(quick(), [ExpectedFile(link)]) == [link]
    assert not os.path.lexists(link)


def test_a_directory_in_place_of_a_file_is_corrupt(tmp_path: Path) -> None:
    folder = tmp_path / "model.bin"
    folder.mkdir()
    error = refusal(quick(), ExpectedFile(folder))
    assert (error.corrupt, error.message) == (True, f"{folder} is a directory")


def test_repair_removes_a_directory_in_place_of_a_file(tmp_path: Path) -> None:
    folder = tmp_path / "model.bin"
    write(folder / "stray.txt", b"x")
    assert remove_corrupt(quick(), [ExpectedFile(folder)]) == [folder]
    assert not folder.exists()


def test_a_fifo_in_place_of_a_file_is_corrupt_and_repair_deletes_it(tmp_path: Path) -> None:
    fifo = tmp_path / "model.bin"
    os.mkfifo(fifo)
    error = refusal(quick(), ExpectedFile(fifo))
    assert (error.corrupt, error.message) == (True, f"{fifo} is not a regular file")
    assert remove_corrupt(quick(), [ExpectedFile(fifo)]) == [fifo]
    assert not os.path.lexists(fifo)


def test_a_blob_with_wrong_bytes_behind_a_link_is_deleted_with_its_link(tmp_path: Path) -> None:
    blob = write(tmp_path / "blobs" / "abc", DATA[:-1] + b"!")
    link = tmp_path / "snapshots" / "main" / "model.bin"
    link.parent.mkdir(parents=True)
    link.symlink_to(blob)
    expected = ExpectedFile(link, len(DATA), DIGEST)
    error = refusal(quick(store=tmp_path), expected)
    assert error.corrupt and "sha256 mismatch" in error.message
    assert remove_corrupt(quick(store=tmp_path), [expected]) == [link]
    assert not os.path.lexists(link) and not blob.exists()


def test_repair_keeps_good_files_and_has_nothing_to_delete_for_missing_ones(
    tmp_path: Path,
) -> None:
    good = write(tmp_path / "good.bin")
    missing = tmp_path / "missing.bin"
    error = refusal(quick(), ExpectedFile(missing, len(DATA), DIGEST))
    assert (error.corrupt, error.message, error.hint) == (False, f"{missing} is missing", "")
    files = [ExpectedFile(good, len(DATA), DIGEST), ExpectedFile(missing, len(DATA), DIGEST)]
    assert remove_corrupt(quick(), files) == []
    assert good.read_bytes() == DATA


def test_wrong_size_and_wrong_digest_name_both_values(tmp_path: Path) -> None:
    blob = write(tmp_path / "blob")
    error = refusal(quick(), ExpectedFile(blob, len(DATA) + 1, DIGEST))
    assert (error.corrupt, error.message) == (
        True,
        f"{blob} has {len(DATA)} bytes, expected {len(DATA) + 1}",
    )
    wrong = "0" * 64
    error = refusal(quick(), ExpectedFile(blob, len(DATA), wrong))
    assert (error.corrupt, error.message) == (
        True,
        f"{blob} sha256 mismatch (expected {wrong[:12]}..., got {DIGEST[:12]}...)",
    )


def test_a_digest_in_capitals_is_the_same_digest(tmp_path: Path) -> None:
    blob = write(tmp_path / "blob")
    [result] = quick().verify([ExpectedFile(blob, len(DATA), DIGEST.upper())])
    assert (result.path, result.size, result.sha256, result.cached) == (
        blob,
        len(DATA),
        DIGEST,
        False,
    )


# ------------------------------------------------------------------ a store's links
def test_a_store_refuses_links_that_leave_it(tmp_path: Path) -> None:
    store = tmp_path / "models--Systran--faster-whisper-small"
    outside = write(tmp_path / "elsewhere" / "model.bin")
    link = store / "snapshots" / "main" / "model.bin"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    expected = ExpectedFile(link, len(DATA), DIGEST)
    [fine] = quick().verify([expected])  # without a store any regular target will do
    assert fine.sha256 == DIGEST
    error = refusal(quick(store=store), expected)
    assert (error.corrupt, error.message) == (True, f"{link} links outside {store}")
    with pytest.raises(FileCheckError, match="links outside"):
        quick(store=store).verify_content(expected)
    write(outside, b"other bytes")  # refused for where it points, before its bytes are read
    error = refusal(quick(store=store), expected)
    assert (error.corrupt, error.message) == (True, f"{link} links outside {store}")


def test_a_store_accepts_links_to_its_own_blobs(tmp_path: Path) -> None:
    store = tmp_path / "store"
    blob = write(store / "blobs" / DIGEST)
    link = store / "snapshots" / "main" / "model.bin"
    link.parent.mkdir(parents=True)
    link.symlink_to(Path("..") / ".." / "blobs" / DIGEST)  # relative, as the HF cache links
    [result] = quick(store=store).verify([ExpectedFile(link, len(DATA), DIGEST)])
    assert (result.path, result.sha256) == (link, DIGEST)
    assert quick(store=store).verify_content(ExpectedFile(link)).size == blob.stat().st_size


def test_repair_never_deletes_a_file_outside_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    victim = write(tmp_path / "elsewhere" / "notes.txt", b"precious")
    link = store / "snapshots" / "main" / "model.bin"
    link.parent.mkdir(parents=True)
    link.symlink_to(victim)
    remove_corrupt(quick(store=store), [ExpectedFile(link)])
    assert victim.read_bytes() == b"precious"


def test_a_file_swapped_for_a_link_out_of_the_store_during_the_pause_is_refused(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    blob = write(store / "blobs" / DIGEST)
    outside = write(tmp_path / "elsewhere" / "model.bin")

    def swap(_: float) -> None:  # same bytes, same mtime: only the link gives it away
        info = blob.stat()
        os.utime(outside, ns=(info.st_atime_ns, info.st_mtime_ns))
        blob.unlink()
        blob.symlink_to(outside)

    check = Verifier(settle_seconds=5, store=store, sleep=swap)
    error = refusal(check, ExpectedFile(blob, len(DATA), DIGEST))
    assert (error.corrupt, error.message) == (True, f"{blob} links outside {store}")


def test_an_unreadable_file_is_not_corrupt_and_repair_leaves_it(reachable_tmp: Path) -> None:
    blob = write(reachable_tmp / "blob")
    [readable] = quick().verify([ExpectedFile(blob, len(DATA), DIGEST)])  # fine while readable
    assert readable.sha256 == DIGEST
    blob.chmod(0)

    def check() -> None:
        try:
            quick().verify([ExpectedFile(blob, len(DATA), DIGEST)])
        except FileCheckError as error:
            removed = remove_corrupt(quick(), [ExpectedFile(blob, len(DATA), DIGEST)])
            seen = [str(error.path), error.message, error.hint, error.corrupt, removed]
            raise RuntimeError(repr(seen)) from None

    assert unprivileged(check) == [
        "RuntimeError",
        repr([str(blob), f"{blob} is not readable", "check the volume's ownership", False, []]),
    ]
    assert blob.exists()


# ------------------------------------------------------------------ files still being written
def test_a_file_growing_during_the_pause_is_still_changing_not_corrupt(tmp_path: Path) -> None:
    blob = write(tmp_path / "blob", b"x" * 1000)
    cache = VerifyCache(tmp_path / "verified.json")
    check = Verifier(cache, settle_seconds=5, sleep=lambda _: write(blob, b"x" * 2000))
    error = refusal(check, ExpectedFile(blob))
    assert (error.corrupt, error.message) == (
        False,
        f"{blob} is still changing (1000 → 2000 bytes)",
    )
    assert error.hint == "another process is writing it; wait for it to finish and verify again"


def test_a_file_rewritten_in_place_during_the_pause_is_still_changing(tmp_path: Path) -> None:
    blob = write(tmp_path / "blob")

    def touch(_: float) -> None:
        info = blob.stat()
        os.utime(blob, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))

    error = refusal(Verifier(settle_seconds=5, sleep=touch), ExpectedFile(blob))
    assert "still changing" in error.message and not error.corrupt


def test_a_file_seen_changing_is_hashed_again_next_time(tmp_path: Path) -> None:
    blob = write(tmp_path / "blob", b"x" * 1000)
    cache = VerifyCache(tmp_path / "verified.json")
    grow = Verifier(cache, settle_seconds=5, sleep=lambda _: write(blob, b"x" * 2000))
    refusal(grow, ExpectedFile(blob))
    digest = hashlib.sha256(b"x" * 2000).hexdigest()
    [after] = Verifier(cache, settle_seconds=0).verify([ExpectedFile(blob, 2000, digest)])
    assert not after.cached


def test_a_wrong_digest_is_never_served_from_the_cache(tmp_path: Path) -> None:
    blob = write(tmp_path / "blob")
    cache = VerifyCache(tmp_path / "verified.json")
    check = Verifier(cache, settle_seconds=0)
    check.verify([ExpectedFile(blob, len(DATA), DIGEST)])
    refusal(check, ExpectedFile(blob, len(DATA), "f" * 64))
    [again] = check.verify([ExpectedFile(blob, len(DATA), DIGEST)])
    assert not again.cached  # the mismatch dropped the entry: the file was hashed again


def test_a_file_first_checked_without_a_digest_is_hashed_when_one_is_known(
    tmp_path: Path,
) -> None:
    blob = write(tmp_path / "config.json")
    cache = VerifyCache(tmp_path / "verified.json")
    check = Verifier(cache, settle_seconds=0)
    [first] = check.verify([ExpectedFile(blob)])
    [second] = check.verify([ExpectedFile(blob)])
    assert (first.path, first.size, first.sha256) == (blob, len(DATA), None)
    assert (first.cached, second.cached) == (False, True)
    [hashed] = check.verify([ExpectedFile(blob, None, DIGEST)])
    assert (hashed.cached, hashed.sha256) == (False, DIGEST)
    [cached] = check.verify([ExpectedFile(blob, None, DIGEST)])
    assert (cached.cached, cached.sha256) == (True, DIGEST)
    with pytest.raises(FileCheckError, match="sha256 mismatch"):
        check.verify([ExpectedFile(blob, None, "e" * 64)])


# ------------------------------------------------------------------ the settle pause
def test_the_pause_is_what_is_left_of_the_settle_time(tmp_path: Path) -> None:
    blob = write(tmp_path / "blob")
    pauses: list[float] = []
    Verifier(sleep=pauses.append).verify([ExpectedFile(blob, len(DATA), DIGEST)])
    assert len(pauses) == 1 and 0.5 < pauses[0] <= 1.0  # the default settle time is 1 s


def test_no_settle_time_means_no_pause(tmp_path: Path) -> None:
    blob = write(tmp_path / "blob")
    pauses: list[float] = []
    Verifier(settle_seconds=0, sleep=pauses.append).verify([ExpectedFile(blob)])
    assert pauses == []


def test_one_uncached_file_in_a_batch_brings_the_pause_back(tmp_path: Path) -> None:
    old, new = write(tmp_path / "old"), write(tmp_path / "new")
    cache = VerifyCache(tmp_path / "verified.json")
    pauses: list[float] = []
    check = Verifier(cache, settle_seconds=5, sleep=pauses.append)
    check.verify([ExpectedFile(old, len(DATA), DIGEST)])
    results = check.verify([ExpectedFile(old, len(DATA), DIGEST), ExpectedFile(new)])
    assert [r.cached for r in results] == [True, False] and len(pauses) == 2


def test_the_default_pause_is_real_time(tmp_path: Path) -> None:
    blob = write(tmp_path / "blob")
    [result] = Verifier(settle_seconds=0.01).verify([ExpectedFile(blob)])
    assert result.size == len(DATA)


def test_a_verifier_without_a_cache_still_verifies(tmp_path: Path) -> None:
    blob = write(tmp_path / "blob")
    check = Verifier(None, settle_seconds=0)
    assert [r.cached for r in check.verify([ExpectedFile(blob, len(DATA), DIGEST)])] == [False]
    assert [r.cached for r in check.verify([ExpectedFile(blob, len(DATA), DIGEST)])] == [True]


# ------------------------------------------------------------------ hashing
@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 5])
def test_hashing_matches_hashlib_at_every_buffer_boundary(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path = write(tmp_path / "f", data)
    assert sha256_file(path, buffer_bytes=4096) == hashlib.sha256(data).hexdigest()


def test_hashing_a_file_larger_than_the_default_buffer(tmp_path: Path) -> None:
    data = os.urandom(4 * 1024 * 1024 + 17)
    path = write(tmp_path / "big", data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
