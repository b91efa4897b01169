"""`backup` holds what the user made (issue 35 §1): the data volume's outputs and its search
index always, its inputs with ``--inputs``; the summary says what is in the archive.

The engine is a fake whose volumes are folders here; the brain's container runs the real
index snapshot script (``backup.INDEX_SNAPSHOT_PY``) with this Python, which has the
brain's apsw and sqlite-vec, against a real index written by ``store/vectors.py``.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import apsw
import docker.errors
import pytest

from airig.brain.store import vectors
from airig.launcher.lifecycle import backup as backup_module
from airig.launcher.lifecycle.backup import INDEX_SNAPSHOT_PY, take
from airig.launcher.lifecycle.backup_archive import BackupError, describe, verify

PREFIX = "airig"


def tar_chunks(path: Path) -> list[bytes]:
    """What the engine's get_archive streams: the file or folder under its base name."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(path, arcname=path.name)
    data = buffer.getvalue()
    return [data[i : i + 4096] for i in range(0, len(data), 4096)]


class Engine:
    """Docker as `backup` uses it: the brain's container and containers of the kit's image
    that mount volumes (each volume a folder under ``root/volumes``)."""

    def __init__(self, root: Path) -> None:
        self.volumes = root / "volumes"
        for name in ("brain-state", "results", "comfyui-user", "data"):
            (self.volumes / f"{PREFIX}-{name}").mkdir(parents=True)
        self.brain = Brain(self)
        self.readers: list[dict] = []

    def volume(self, name: str) -> Path:
        return self.volumes / f"{PREFIX}-{name}"

    def containers(self, **filters: str) -> list:
        return [self.brain]

    def sdk(self):
        def create(image, command, volumes, **kwargs):
            self.readers.append(volumes)
            return Reader(self, volumes)

        return SimpleNamespace(containers=SimpleNamespace(create=create))


class Brain:
    name = "airig-agents-brain-1"
    labels = {"com.docker.compose.service": "brain"}

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def host(self, path: str) -> Path:
        for mount, volume in (("/state", "brain-state"), ("/data", "data")):
            if path.startswith(mount + "/"):
                return self.engine.volume(volume) / path[len(mount) + 1 :]
        raise AssertionError(f"the brain has no {path}")

    def exec_run(self, command: list[str]) -> tuple[int, bytes]:
        if command[:4] == ["python", "-m", "airig.brain", "--snapshot"]:
            self.host(command[4]).write_bytes(b"SQLite format 3\x00 the store")
            return 0, json.dumps({"plans": 6, "tasks": 31, "tokens": 2, "workers": 1}).encode()
        if command[:2] == ["python", "-c"]:  # the index snapshot, run for real
            done = subprocess.run(
                [sys.executable, "-c", command[2], str(self.host(command[3])),
                 str(self.engine.volume("data"))],
                capture_output=True,
            )  # fmt: skip
            return done.returncode, done.stdout + done.stderr
        if command[:2] == ["rm", "-f"]:
            for path in command[2:]:
                self.host(path).unlink(missing_ok=True)
            return 0, b""
        raise AssertionError(command)

    def get_archive(self, path: str):
        return tar_chunks(self.host(path)), {}


class Reader:
    def __init__(self, engine: Engine, mounts: dict) -> None:
        self.engine, self.mounts = engine, mounts

    def get_archive(self, path: str):
        for volume, mount in self.mounts.items():
            assert mount["mode"] == "ro"
            if path == mount["bind"] or path.startswith(mount["bind"] + "/"):
                host = self.engine.volumes / volume / path[len(mount["bind"]) + 1 :]
                if not host.exists():
                    raise docker.errors.NotFound(f"Could not find the file {path}")
                return tar_chunks(host), {}
        raise AssertionError(f"{path} is not mounted")

    def remove(self, force: bool) -> None:
        pass


def settings_for(root: Path) -> SimpleNamespace:
    env = root / ".env"
    env.write_text("BRAIN_ADMIN_TOKEN=secret-0123456789\n")
    return SimpleNamespace(
        project_prefix=PREFIX, image="airig:test", env_file=env, state_dir=root / ".airig",
        ollama_models=["nomic-embed-text"], whisper_models=[], root=root,
    )  # fmt: skip


def index(data: Path, texts: dict[str, list[float]], hold: bool = False):
    """A real search index on the data volume; ``hold``: a connection left open, so the
    entries stay in the WAL (what a file copy of search.sqlite alone would miss)."""
    path = vectors.index_path(data)
    held = vectors.connect(path) if hold else None
    entries = [vectors.Entry(v, snippet, source=f"inputs/talks/{snippet}.mp4")
               for snippet, v in texts.items()]  # fmt: skip
    vectors.replace_task(path, "video-notes", "nomic-embed-text", "p1", "embed", entries,
                         vectors.Writer(), time.time())  # fmt: skip
    return held


@pytest.fixture
def rig(tmp_path):
    engine = Engine(tmp_path)
    data = engine.volume("data")
    (data / "outputs" / "video-notes" / "talks" / "volcanoes").mkdir(parents=True)
    (data / "outputs" / "video-notes" / "talks" / "volcanoes.md").write_text("# volcanoes\n")
    (data / "outputs" / "video-notes" / "talks" / "volcanoes" / "f1.png").write_bytes(b"png")
    (data / "inputs" / "talks").mkdir(parents=True)
    (data / "inputs" / "talks" / "volcanoes.mp4").write_bytes(b"video" * 1000)
    (data / "inputs" / "talks" / ".upload-1234").write_bytes(b"half an upload")
    (engine.volume("results") / "p1").mkdir()
    (engine.volume("results") / "p1" / "out.json").write_text("{}")
    return SimpleNamespace(engine=engine, data=data, settings=settings_for(tmp_path),
                           backups=tmp_path / "backups")  # fmt: skip


def backup(rig, **options):
    said: list[str] = []
    result = take(rig.settings, rig.engine, rig.backups, False, None, lambda body: None,
                  said.append, **options)  # fmt: skip
    return result, said


def members(path: Path) -> dict[str, bytes]:
    found = {}
    verify(path, lambda name, reader: found.__setitem__(name, reader.read()))
    return found


def test_outputs_and_the_search_index_are_in_every_archive(rig):
    held = index(rig.data, {"volcanoes": [1.0, 0.0, 0.0], "bread": [0.0, 1.0, 0.0]})
    assert held is None
    result, said = backup(rig)
    files = members(result.path)
    assert files["volumes/data/outputs/video-notes/talks/volcanoes.md"] == b"# volcanoes\n"
    assert files["volumes/data/outputs/video-notes/talks/volcanoes/f1.png"] == b"png"
    assert "volumes/results/p1/out.json" in files
    # without --inputs: no inputs, and the summary says so
    assert not [name for name in files if name.startswith("volumes/data/inputs/")]
    assert result.manifest.data_included and not result.manifest.inputs_included
    held_line, left_line = describe(result.manifest)
    assert "outputs " in held_line and "search index" in held_line, held_line
    assert "(1 index, 2 entries)" in held_line, held_line
    assert "store" in held_line and "(6 plans, 31 tasks)" in held_line, held_line
    assert left_line.startswith("Not in it: inputs (--inputs adds them"), left_line
    # the index's copy is a working index: the same nearest hit as the live one
    copy = rig.backups / "restored" / vectors.INDEX_FILE
    copy.parent.mkdir(parents=True)
    copy.write_bytes(files["volumes/data/index/search.sqlite"])
    hits = vectors.nearest(copy, "video-notes", [0.9, 0.1, 0.0], 1)
    assert hits[0]["source"] == "inputs/talks/volcanoes.mp4", hits
    # the snapshots left the brain's state volume as they were
    assert sorted(p.name for p in rig.engine.volume("brain-state").iterdir()) == []
    assert any("data (outputs)" in line for line in said), said


def test_inputs_are_in_it_with_inputs_and_uploads_in_flight_are_not(rig):
    result, _ = backup(rig, inputs=True)
    files = members(result.path)
    assert files["volumes/data/inputs/talks/volcanoes.mp4"] == b"video" * 1000
    assert not [name for name in files if ".upload-" in name]
    assert result.manifest.inputs_included
    held_line, left_line = describe(result.manifest)
    assert "inputs 4.9 KB (1 file)" in held_line, held_line
    # no embed task has run: there is no index, and the summary says that
    assert "volumes/data/index/search.sqlite" not in files
    assert "search index (none yet)" in left_line and "inputs" not in left_line, left_line


def test_the_index_is_copied_with_what_is_still_in_its_wal(rig):
    """A file copy of search.sqlite alone misses entries still in the WAL (the brain's
    connections keep it open); the online backup has every committed entry."""
    held = index(rig.data, {"volcanoes": [1.0, 0.0, 0.0], "bread": [0.0, 1.0, 0.0]}, hold=True)
    try:
        live = vectors.index_path(rig.data)
        assert Path(f"{live}-wal").stat().st_size > 0
        plain = rig.backups.parent / "plain.sqlite"
        shutil.copyfile(live, plain)  # what a volume read of the file alone would give
        try:
            conn = apsw.Connection(str(plain))
            count = conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
        except apsw.Error:
            count = 0
        assert count < 2  # the premise: the copy of the main file lacks them
        result, _ = backup(rig)
        assert result.manifest.index["entries"] == 2
        copy = rig.backups / "copy" / vectors.INDEX_FILE
        copy.parent.mkdir(parents=True)
        copy.write_bytes(members(result.path)["volumes/data/index/search.sqlite"])
        assert [i.entries for i in vectors.indexes(copy)] == [2]
    finally:
        held.close()


def test_the_snapshot_script_answers_no_index_without_one(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", INDEX_SNAPSHOT_PY, str(tmp_path / "copy.sqlite"), str(tmp_path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout) == {"present": False}
    assert not (tmp_path / "copy.sqlite").exists()


def test_a_failed_index_snapshot_writes_no_archive(rig, monkeypatch):
    monkeypatch.setattr(backup_module, "INDEX_SNAPSHOT_PY", "raise SystemExit('disk I/O error')")
    with pytest.raises(BackupError, match="could not snapshot its search index: disk I/O"):
        backup(rig)
    assert list(rig.backups.iterdir()) == []


def test_a_full_disk_while_writing_leaves_no_archive(rig, monkeypatch):
    from airig.launcher.lifecycle import backup_archive

    def full(self, info, source):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(backup_archive.ArchiveWriter, "add_stream", full)
    with pytest.raises(BackupError, match="No space left on device"):
        backup(rig)
    assert list(rig.backups.iterdir()) == []


def test_the_cli_summary_says_what_is_in_the_archive(launcher_kit, rig, monkeypatch, capsys):
    from support import run_cli, write_env

    import airig.launcher.cli.backup as cli_backup
    import airig.launcher.compose.docker

    write_env(launcher_kit)
    index(rig.data, {"volcanoes": [1.0, 0.0, 0.0]})
    monkeypatch.setattr(airig.launcher.compose.docker, "Docker", lambda: rig.engine)
    monkeypatch.setattr(cli_backup, "_record", lambda client, body: None)
    code, out, err = run_cli(monkeypatch, capsys, None, "backup", "--to", str(rig.backups))
    assert code == 0, out + err
    assert "In it: store" in out and "outputs" in out and "search index" in out, out
    assert "(1 index, 1 entry)" in out, out
    assert "Not in it: inputs (--inputs adds them" in out and "models (--models" in out, out
    [archive] = rig.backups.glob("airig-backup-*.tar.gz")
    code, out, err = run_cli(monkeypatch, capsys, None, "backup", "--verify", str(archive))
    assert code == 0 and "every sha256 matches" in out and "In it: store" in out, out + err
    code, out, err = run_cli(monkeypatch, capsys, None, "backup", "--to", str(rig.backups),
                             "--inputs")  # fmt: skip
    assert code == 0, out + err
    assert "inputs 4.9 KB (1 file)" in out and "Not in it: models" in out, out
