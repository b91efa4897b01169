"""`restore` of an archive made to hurt (issue 36 §4): everything the restore needs is
checked before anything is touched. `restore --yes` of an archive without ``env/.env``
passed ``--verify`` and ended in a KeyError traceback; a manifest's fields were taken as
whatever type they had, and read whole whatever their size; any ``state/`` name was
written into ``.airig/``; the volumes removed were named by the archive's prefix; the
``.part`` files followed a link planted in their place.

Each archive here is built with tarfile, its manifest computed so that it verifies but
for the one thing wrong with it. Each is refused in one line, and the fake engine saw no
volume removed, ``.env`` is as it was and nothing was written beside it."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from support import one_error, run_cli
from test_restore_prepare import ENV, FakeDocker

from airig.launcher.envfile import read_env
from airig.launcher.lifecycle import backup, restore
from airig.launcher.lifecycle.backup import DATA_VOLUMES, MODEL_VOLUMES, STORE_MEMBER
from airig.launcher.lifecycle.backup_archive import (
    DATA_VOLUME,
    STATE_FILES,
    STORE_VOLUME,
    VOLUMES,
    BackupError,
    archive_name,
    verify,
)
from airig.launcher.lifecycle.restore import PENDING, prepare

OLD_ENV = b"AIRIG_PROJECT_PREFIX=airig\nBRAIN_ADMIN_TOKEN=the-old-one-0123456789abcdef\n"
STORE = b"SQLite format 3\x00" + b"\x00" * 100
GOOD = {
    "env/.env": ENV,
    "state/tuning.log": b'{"knob": "x"}\n',
    STORE_MEMBER: STORE,
    "volumes/results/p/out.json": b"{}",
}
MEGABYTE = 1 << 20


def regular(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
    return info, data


def craft(
    folder: Path,
    change: dict[str, bytes | None] | None = None,
    extra: list[tuple[tarfile.TarInfo, bytes]] = (),  # type: ignore[assignment]
    manifest: bytes | None = None,
    **fields: Any,
) -> Path:
    """An archive of GOOD with ``change`` made (None: left out) and ``extra`` members
    added, its manifest right for what it holds unless ``fields`` or ``manifest`` (raw
    bytes) say otherwise."""
    wanted = {**GOOD, **(change or {})}
    members = [regular(n, d) for n, d in wanted.items() if d is not None] + list(extra)
    listed = [{"path": i.name, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
              for i, d in members if i.isfile()]  # fmt: skip
    body = {"format": "airig-backup", "version": 1, "created_at": time.time(),
            "airig_version": "0.1.0", "project_prefix": "airig", "files": listed,
            "models": {}, "models_included": False, "store": {"plans": 1, "tasks": 2},
            "data_included": False, "inputs_included": False, "index": {}}  # fmt: skip
    body.update(fields)
    raw = manifest if manifest is not None else json.dumps(body).encode()
    path = folder / archive_name(time.time())
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in [*members, regular("manifest.json", raw)]:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def over_a_kit(tmp_path: Path) -> tuple[Path, FakeDocker]:
    """A stopped kit with data: its .env (prefix airig) and its volumes."""
    root = tmp_path / "clone"
    root.mkdir()
    (root / ".env").write_bytes(OLD_ENV)
    return root, FakeDocker(volumes=["airig-brain-state", "airig-results", "airig-data"])


def refused(tmp_path: Path, archive: Path, *words: str) -> str:
    """``restore --yes`` over a kit with data: one line naming ``words``, nothing touched."""
    root, engine = over_a_kit(tmp_path)
    with pytest.raises(BackupError) as caught:
        prepare(root, archive, True, engine, lambda _line: None)
    message = caught.value.message
    assert "\n" not in message and len(message) < 400, message
    for word in words:
        assert word in message, message
    assert engine.removed == []
    assert (root / ".env").read_bytes() == OLD_ENV
    assert sorted(p.name for p in root.iterdir()) == [".env"]  # no .airig/, no .part
    return message


# ------------------------------------------------------------------ what the restore needs
def test_an_archive_without_env_is_refused_before_anything(tmp_path: Path) -> None:
    archive = craft(tmp_path, {"env/.env": None})
    assert verify(archive)  # it verifies: only the restore cannot do without it
    refused(tmp_path, archive, "cannot be restored", "holds no env/.env")


def test_restore_yes_without_env_is_one_line_at_the_command(
    launcher_kit: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import airig.launcher.compose.docker as docker_module

    engine = FakeDocker(volumes=["airig-brain-state", "airig-results"])
    monkeypatch.setattr(docker_module, "Docker", lambda: engine)
    (launcher_kit / ".env").write_bytes(OLD_ENV)
    archive = craft(launcher_kit, {"env/.env": None})
    code, _out, err = run_cli(monkeypatch, capsys, None, "restore", str(archive), "--yes")
    one_error(code, err, "holds no env/.env")
    assert engine.removed == [] and (launcher_kit / ".env").read_bytes() == OLD_ENV
    assert not (launcher_kit / ".env.before-restore").exists()


@pytest.mark.parametrize(
    "store, why",
    [(None, "holds no volumes/brain-state/brain.db"), (b"", "is not an SQLite database"),
     (b"#!/bin/sh\nrm -rf /\n", "is not an SQLite database")],
    ids=["no store", "empty store", "not sqlite"],
)  # fmt: skip
def test_an_archive_without_a_store_is_refused(
    tmp_path: Path, store: bytes | None, why: str
) -> None:
    refused(tmp_path, craft(tmp_path, {STORE_MEMBER: store}), why)


@pytest.mark.parametrize(
    "env",
    [b"AIRIG_PROJECT_PREFIX=../../etc\n", b"AIRIG_MIN_FREE_DISK_GB=lots\n",
     b"\xff\xfe not utf-8 \x00\n"],
    ids=["prefix", "not a number", "not utf-8"],
)  # fmt: skip
def test_an_env_this_kit_would_refuse_at_up_is_refused_now(tmp_path: Path, env: bytes) -> None:
    refused(tmp_path, craft(tmp_path, {"env/.env": env}), "its .env is not one this kit runs")


def test_a_megabyte_env_is_refused_without_being_kept(tmp_path: Path) -> None:
    env = b"# " + b"x" * (2 * MEGABYTE) + b"\n" + ENV
    refused(tmp_path, craft(tmp_path, {"env/.env": env}), "env/.env is over 1.0 MB")


def test_an_oversized_state_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(restore, "STATE_MAX", 1024)
    archive = craft(tmp_path, {"state/update.log": b"{}\n" * 1000})
    refused(tmp_path, archive, "state/update.log is over 1.0 KB")


# ------------------------------------------------------------------ member names
def symlink(name: str, target: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, b""


@pytest.mark.parametrize(
    "extra, why",
    [
        (regular("volumes/x/../../etc/passwd", b"root::0:0"), "outside env/, state/"),
        (regular("volumes/results/../../../etc/cron.d/x", b"x"), "outside env/, state/"),
        (regular("volumes/results/./p/x", b"x"), "outside env/, state/"),
        (regular("volumes//results/x", b"x"), "outside env/, state/"),
        (regular("./env/.env", b"x"), "outside env/, state/"),
        (symlink("volumes/results/link", "/etc/passwd"), "not a regular file"),
        (symlink("state/tuning.log.lnk", "../../.ssh/authorized_keys"), "launcher state file"),
        (regular("state/host.env", b"OLLAMA_IMAGE=evil/image\n"), "launcher state file other"),
        (regular("state/restore.json", b"{}"), "launcher state file other"),
        (regular("state/proofs.json", b"{}"), "launcher state file other"),
        (regular("state/sub/tuning.log", b"x"), "launcher state file other"),
        (regular("env/.env.before-restore", b"x"), "settings file other than env/.env"),
        (regular("env/x/.env", b"x"), "settings file other than env/.env"),
        (regular("volumes/other-kit-volume/x", b"x"), "a volume the kit does not have"),
        (regular("volumes/brain-state/events.jsonl", b"x"), "store file other than"),
        (regular("volumes/data/.bashrc", b"x"), "data volume file outside"),
        (regular("volumes/results", b"x"), "outside its volume's folder"),
        (regular("volumes/results/p/out.json", b"a second copy"), "twice"),
    ],
    ids=lambda v: v if isinstance(v, str) else v[0].name,
)  # fmt: skip
def test_a_member_the_layout_does_not_allow_is_refused(
    tmp_path: Path, extra: tuple[tarfile.TarInfo, bytes], why: str
) -> None:
    refused(tmp_path, craft(tmp_path, extra=[extra]), "is not an airig backup", why)


def test_the_known_names_are_backups_own() -> None:
    """The layout's names and those `backup` writes are the same lists."""
    assert backup.STATE_FILES == STATE_FILES
    assert {STORE_VOLUME, DATA_VOLUME, *DATA_VOLUMES, *MODEL_VOLUMES} == set(VOLUMES)
    assert f"volumes/{STORE_VOLUME}/brain.db" == STORE_MEMBER


# ------------------------------------------------------------------ the manifest
@pytest.mark.parametrize(
    "fields, name",
    [
        ({"version": True}, "version"),
        ({"version": "1"}, "version"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"created_at": float("nan")}, "created_at"),
        ({"created_at": 1e400}, "created_at"),
        ({"created_at": 10**400}, "created_at"),
        ({"created_at": -5}, "created_at"),
        ({"created_at": False}, "created_at"),
        ({"airig_version": ["0.1"]}, "airig_version"),
        ({"project_prefix": {"a": 1}}, "project_prefix"),
        ({"project_prefix": "\x1b[2J\x1b[31mairig"}, "project_prefix"),
        ({"project_prefix": "x" * 5000}, "project_prefix"),
        ({"models_included": "false"}, "models_included"),
        ({"data_included": 1}, "data_included"),
        ({"inputs_included": None}, "inputs_included"),
        ({"models": {"ollama": "abc"}}, "models"),
        ({"models": ["llama3"]}, "models"),
        ({"store": [["plans", 1]]}, "store"),
        ({"store": {"plans": {"nested": 1}}}, "store"),
        ({"index": {"indexes": [{"x": 1}]}}, "index"),
        ({"index": {"indexes": ["\x1b]0;pwned\x07"]}}, "index"),
        ({"files": "everything"}, "files"),
    ],
    ids=lambda v: json.dumps(v, default=str)[:40] if isinstance(v, dict) else v,
)  # fmt: skip
def test_a_manifest_field_of_the_wrong_type_is_refused(
    tmp_path: Path, fields: dict[str, Any], name: str
) -> None:
    archive = craft(tmp_path, **fields)
    message = refused(tmp_path, archive, f"its manifest's {name} is not")
    assert "\x1b" not in message


@pytest.mark.parametrize(
    "change",
    [lambda e: e.update(size="2"), lambda e: e.update(size=True), lambda e: e.update(size=-1),
     lambda e: e.update(sha256=e["sha256"].upper()), lambda e: e.update(path=7),
     lambda e: e.update(extra=1), lambda e: e.pop("sha256")],
    ids=["size text", "size bool", "size negative", "sha upper", "path int", "extra key",
         "no sha"],
)  # fmt: skip
def test_a_files_entry_of_the_wrong_shape_is_refused(tmp_path: Path, change: Any) -> None:
    archive = craft(tmp_path)
    good = verify(archive).as_dict()
    entries = good["files"]
    change(entries[-1])
    refused(tmp_path, craft(tmp_path, files=entries), "its manifest's files is not")


def test_a_manifest_listing_a_path_twice_is_refused(tmp_path: Path) -> None:
    listed = verify(craft(tmp_path)).as_dict()["files"]
    refused(tmp_path, craft(tmp_path, files=listed + listed[-1:]), "distinct paths")


def test_a_ten_megabyte_manifest_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = json.loads(json.dumps(verify(craft(tmp_path)).as_dict()))
    padded = json.dumps(body).encode()[:-1] + b" " * (10 * MEGABYTE) + b"}"
    archive = craft(tmp_path, manifest=padded)
    read: list[int] = []
    real = tarfile.ExFileObject.read

    def watched(self: Any, size: int | None = -1) -> bytes:
        data = real(self, size)
        read.append(len(data))
        return data

    monkeypatch.setattr(tarfile.ExFileObject, "read", watched)
    refused(tmp_path, archive, "its manifest is 10.0 MB, more than its 4 files can need")
    assert max(read, default=0) < MEGABYTE  # never read whole


def test_a_deeply_nested_manifest_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    refused(tmp_path, craft(tmp_path, manifest=b"[" * 30000 + b"]" * 30000), "not JSON")


def test_a_big_legit_manifest_is_read(tmp_path: Path) -> None:
    """The cap grows with the files: 3000 members with long names still verify."""
    many = {f"volumes/results/{'d' * 200}/{n:05d}.json": b"{}" for n in range(3000)}
    manifest = verify(craft(tmp_path, many))  # type: ignore[arg-type]
    assert len(manifest.files) == 3004


# ------------------------------------------------------------------ whose volumes
def test_the_volumes_removed_are_this_checkouts_not_the_archives(tmp_path: Path) -> None:
    """An archive that says it is kit ``victim`` (its manifest and its .env) restored into
    this checkout (prefix airig): airig-* volumes are replaced, victim-* never looked at,
    and the restored .env keeps this checkout's prefix, so `up` fills the same volumes."""
    env = ENV.replace(b"AIRIG_PROJECT_PREFIX=airig", b"AIRIG_PROJECT_PREFIX=victim")
    archive = craft(tmp_path, {"env/.env": env}, project_prefix="victim")
    root, engine = over_a_kit(tmp_path)
    engine.volumes |= {"victim-brain-state", "victim-results", "victim-data"}
    engine.running = ["victim-agents-brain-1"]  # another kit runs: not this checkout's
    said: list[str] = []
    prepare(root, archive, True, engine, said.append)
    assert engine.removed == ["airig-brain-state", "airig-results"]
    assert {"victim-brain-state", "victim-results", "victim-data"} <= engine.volumes
    assert read_env(root / ".env")["AIRIG_PROJECT_PREFIX"] == "airig"
    assert read_env(root / ".env")["BRAIN_ADMIN_TOKEN"] == read_env_bytes(env)["BRAIN_ADMIN_TOKEN"]
    assert any("AIRIG_PROJECT_PREFIX stays this checkout's airig" in line for line in said)
    assert (root / ".env").stat().st_mode & 0o777 == 0o600


def read_env_bytes(data: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)


def test_this_checkouts_running_kit_is_what_refuses(tmp_path: Path) -> None:
    archive = craft(tmp_path, project_prefix="victim")
    root, engine = over_a_kit(tmp_path)
    engine.running = ["airig-agents-brain-1"]
    with pytest.raises(BackupError, match="the kit is running"):
        prepare(root, archive, True, engine, lambda _line: None)
    assert engine.removed == []


# ------------------------------------------------------------------ the .part files
def test_a_link_planted_as_a_part_file_is_replaced_not_followed(tmp_path: Path) -> None:
    root, engine = over_a_kit(tmp_path)
    (root / ".airig").mkdir()
    outside = tmp_path / "outside"
    outside.write_text("not yours")
    for part in (root / ".env.part", root / ".airig" / f"{PENDING}.part",
                 root / ".airig" / "tuning.log.part"):  # fmt: skip
        part.symlink_to(outside)
    prepare(root, craft(tmp_path), True, engine, lambda _line: None)
    assert outside.read_text() == "not yours"
    assert (root / ".env").read_bytes() == ENV and not (root / ".env").is_symlink()
    for written in (root / ".env", root / ".airig" / PENDING, root / ".airig" / "tuning.log"):
        assert written.stat().st_mode & 0o777 == 0o600 and not written.is_symlink()
    assert not list(root.glob("*.part")) and not list((root / ".airig").glob("*.part"))


def test_a_good_archive_still_restores(tmp_path: Path) -> None:
    root, engine = over_a_kit(tmp_path)
    manifest = prepare(root, craft(tmp_path), True, engine, lambda _line: None)
    assert manifest.store == {"plans": 1, "tasks": 2}
    assert engine.removed == ["airig-brain-state", "airig-results"]
    assert (root / ".env").read_bytes() == ENV
    assert (root / ".env.before-restore").read_bytes() == OLD_ENV
    assert json.loads((root / ".airig" / PENDING).read_text())["volumes"] == [
        "brain-state", "results"]  # fmt: skip
