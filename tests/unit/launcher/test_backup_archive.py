"""The backup archive (airig/launcher/lifecycle/backup_archive.py): what it writes, and
every archive `backup --verify` and `restore` must refuse before touching anything."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import time
from pathlib import Path

import pytest

from airig.launcher.lifecycle.backup_archive import (
    ArchiveWriter,
    BackupError,
    Manifest,
    archive_name,
    prune,
    verify,
)


def volume_tar(files: dict[str, bytes], top: str = "results") -> list[bytes]:
    """What the engine's get_archive streams for a folder: a tar under its base name."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folder = tarfile.TarInfo(top)
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.uid = len(data), 10001
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo(f"{top}/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    data = buffer.getvalue()
    return [data[i : i + 1000] for i in range(0, len(data), 1000)]  # in chunks, as streamed


def write_archive(folder: Path, files: dict[str, bytes] | None = None) -> Path:
    path = folder / archive_name(time.time())
    writer = ArchiveWriter(path)
    writer.add_bytes("env/.env", b"BRAIN_ADMIN_TOKEN=secret\n")
    writer.add_tar(
        "volumes/results", volume_tar(files or {"p1/out.json": b'{"a": 1}', "p2/x.txt": b"x"}),
        lambda name: name.split("/", 1)[1] if "/" in name else "",
    )  # fmt: skip
    writer.finish(Manifest(created_at=time.time(), airig_version="0.1.0",
                           project_prefix="airig", files=[]))  # fmt: skip
    return path


def test_an_archive_is_private_complete_and_verifies(tmp_path):
    path = write_archive(tmp_path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob("*.part"))
    manifest = verify(path)
    assert sorted(e.path for e in manifest.files) == [
        "env/.env",
        "volumes/results/p1/out.json",
        "volumes/results/p2/x.txt",
    ]  # fmt: skip  (the symlink is left out)
    with tarfile.open(path, "r:gz") as tar:
        names = tar.getnames()
        assert names[-1] == "manifest.json"  # last: a cut-off archive has none
        assert tar.getmember("volumes/results/p1/out.json").uid == 10001


def test_restore_reads_each_file_as_it_verifies(tmp_path):
    path = write_archive(tmp_path)
    seen = {}
    verify(path, lambda name, reader: seen.__setitem__(name, reader.read()))
    assert seen["volumes/results/p1/out.json"] == b'{"a": 1}'
    assert seen["env/.env"].startswith(b"BRAIN_ADMIN_TOKEN")


def test_a_truncated_archive_is_refused(tmp_path):
    path = write_archive(tmp_path, {f"f{i}": bytes(range(256)) * 400 for i in range(20)})
    data = path.read_bytes()
    for cut in (len(data) // 3, len(data) - 200):
        path.write_bytes(data[:cut])
        with pytest.raises(BackupError, match="truncated"):
            verify(path)


def test_a_changed_byte_is_refused_as_corrupt(tmp_path):
    path = write_archive(tmp_path)
    with gzip.open(path) as handle:
        raw = bytearray(handle.read())
    at = raw.index(b'{"a": 1}')
    raw[at + 6] = ord("2")  # the member's bytes, not its header
    path.write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(BackupError, match=r"corrupt: volumes/results/p1/out.json"):
        verify(path)


# mtime=0: gzip's header carries the time, and xdist's workers must collect one id
@pytest.mark.parametrize(
    "content", [b"", b"not an archive at all", gzip.compress(b"plain text", mtime=0)],
    ids=["empty", "text", "gzip-of-text"],
)  # fmt: skip
def test_what_is_not_a_tar_gz_is_refused_as_foreign(tmp_path, content):
    path = tmp_path / "x.tar.gz"
    path.write_bytes(content)
    with pytest.raises(BackupError, match="not an airig backup|truncated"):
        verify(path)


def foreign(tmp_path: Path, members: dict[str, bytes]) -> Path:
    path = tmp_path / "foreign.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("members, why", [
    ({"etc/passwd": b"x"}, "outside env/, state/ and volumes/"),
    ({"volumes/../../etc/cron.d/x": b"x"}, "outside"),
    ({"/env/.env": b"x"}, "outside"),
    ({"env/.env": b"x", "manifest.json": b'{"format": "something-else"}'}, "manifest"),
    ({"env/.env": b"x"}, "truncated"),
])  # fmt: skip
def test_a_foreign_archive_is_refused(tmp_path, members, why):
    with pytest.raises(BackupError, match=why):
        verify(foreign(tmp_path, members))


def test_a_manifest_that_lists_a_missing_file_is_refused(tmp_path):
    manifest = {"format": "airig-backup", "version": 1, "created_at": 1.0,
                "airig_version": "0", "project_prefix": "airig",
                "files": [{"path": "env/.env", "size": 1, "sha256": "0" * 64}]}  # fmt: skip
    path = foreign(tmp_path, {"manifest.json": json.dumps(manifest).encode()})
    with pytest.raises(BackupError, match="corrupt: env/.env is missing"):
        verify(path)


def test_a_newer_format_version_says_which_airig_reads_it(tmp_path):
    manifest = {"format": "airig-backup", "version": 99, "created_at": 1.0,
                "airig_version": "9", "project_prefix": "airig", "files": []}  # fmt: skip
    with pytest.raises(BackupError, match="version 99"):
        verify(foreign(tmp_path, {"manifest.json": json.dumps(manifest).encode()}))


def test_no_archive_there_is_one_line(tmp_path):
    with pytest.raises(BackupError, match="no archive at"):
        verify(tmp_path / "missing.tar.gz")


def test_a_second_writer_to_the_same_name_is_refused(tmp_path):
    path = tmp_path / archive_name(0)
    first = ArchiveWriter(path)
    with pytest.raises(BackupError, match="another backup is writing there"):
        ArchiveWriter(path)
    first.abort()
    assert not list(tmp_path.iterdir())


def test_keep_deletes_only_the_oldest_of_ours(tmp_path):
    ours = [tmp_path / archive_name(t) for t in (1e9, 1.1e9, 1.2e9, 1.3e9)]
    for path in ours:
        path.write_bytes(b"x")
    other = tmp_path / "notes.tar.gz"
    other.write_bytes(b"x")
    gone = prune(tmp_path, keep=2)
    assert gone == ours[:2]
    assert sorted(tmp_path.iterdir()) == sorted([*ours[2:], other])


def test_an_older_kits_archive_says_it_holds_no_outputs(tmp_path):
    from airig.launcher.lifecycle.backup_archive import describe

    manifest = verify(write_archive(tmp_path))  # no data part, no data_included
    assert not manifest.data_included and not manifest.inputs_included
    held, left = describe(manifest)
    assert held.startswith("In it: results ") and ".env and launcher state" in held, held
    assert "outputs, search index and inputs (an older kit's archive)" in left, left
