"""Ollama provisioning without a server: names, pull streams, on-disk verification."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from airig.common.errors import ConfigError, ProvisionError
from airig.common.ollama_names import OllamaName
from airig.provision.events import Emitter
from airig.provision.ollama import OllamaProvisioner, read_pull_stream
from airig.provision.verify import FileCheckError, Verifier


def lines(*objects: dict) -> list[bytes]:
    return [json.dumps(o).encode() for o in objects]


def client(handler) -> ollama.Client:
    """The real ollama client, its HTTP answered in-process by ``handler``."""
    return ollama.Client("http://o", transport=httpx.MockTransport(handler))


def pulled(stream: list[bytes]) -> Iterator[ollama.ProgressResponse]:
    """What ``Client.pull(stream=True)`` yields for a 200 carrying these NDJSON lines."""
    answer = b"".join(line + b"\n" for line in stream)
    return client(lambda _: httpx.Response(200, content=answer)).pull("m", stream=True)


@pytest.mark.parametrize(
    ("text", "manifest"),
    [
        ("nomic-embed-text", "registry.ollama.ai/library/nomic-embed-text/latest"),
        ("qwen2.5:7b-instruct-q4_K_M", "registry.ollama.ai/library/qwen2.5/7b-instruct-q4_K_M"),
        ("jmorgan/tiny:1b", "registry.ollama.ai/jmorgan/tiny/1b"),
        ("hf.co/org/repo:Q4", "hf.co/org/repo/Q4"),
        ("localhost:5000/ns/m:t", "localhost:5000/ns/m/t"),
        ("ns/skill/m:t", "registry.ollama.ai/ns/skill/m/t"),
    ],
)
def test_manifest_paths_follow_upstream(text: str, manifest: str) -> None:
    root = Path("/models")
    assert OllamaName.parse(text).manifest_path(root) == root / "manifests" / manifest


@pytest.mark.parametrize("bad", ["", "a/b/c/d", "bad name", "x:", "../etc:passwd", "-x"])
def test_invalid_names_fail_naming_them(bad: str) -> None:
    with pytest.raises(ConfigError, match="invalid Ollama model name"):
        OllamaName.parse(bad)


def test_display_is_the_shortest_form() -> None:
    assert OllamaName.parse("nomic-embed-text").display == "nomic-embed-text:latest"
    assert OllamaName.parse("hf.co/org/repo:Q4").display == "hf.co/org/repo:Q4"


def test_stream_ending_in_success_returns_and_reports_progress() -> None:
    seen: list[tuple[int, int]] = []
    stream = lines(
        {"status": "pulling manifest"},
        {"status": "pulling aaa", "digest": "sha256:aaa", "total": 100, "completed": 40},
        {"status": "pulling bbb", "digest": "sha256:bbb", "total": 50},
        {"status": "pulling aaa", "digest": "sha256:aaa", "total": 100, "completed": 100},
        {"status": "verifying sha256 digest"},
        {"status": "success"},
    )
    read_pull_stream("m", pulled(stream), lambda done, total: seen.append((done, total)))
    assert seen == [(40, 100), (40, 150), (100, 150)]


def test_error_line_inside_200_fails_naming_model() -> None:
    stream = lines(
        {"status": "pulling aaa", "digest": "sha256:aaa", "total": 100, "completed": 50},
        {"error": "max retries exceeded: unexpected EOF"},
        {"status": "success"},
    )
    with pytest.raises(ProvisionError, match="'qwen': max retries exceeded: unexpected EOF"):
        read_pull_stream("qwen", pulled(stream), lambda *_: None)


def test_stream_cut_before_success_fails() -> None:
    stream = lines({"status": "pulling manifest"}, {"status": "writing manifest"})
    with pytest.raises(ProvisionError, match="ended before success"):
        read_pull_stream("m", pulled(stream), lambda *_: None)


def test_garbage_line_fails() -> None:
    with pytest.raises(ProvisionError, match="unreadable pull line"):
        read_pull_stream("m", pulled([b"<html>"]), lambda *_: None)


def test_refused_pull_fails_naming_model_and_status() -> None:
    refused = {"error": "pull model manifest: file does not exist"}
    parts = client(lambda _: httpx.Response(500, json=refused)).pull("m", stream=True)
    with pytest.raises(ProvisionError, match="'m': HTTP 500: pull model manifest: file does"):
        read_pull_stream("m", parts, lambda *_: None)


class Dropped(httpx.SyncByteStream):
    """A pull stream whose connection drops after the first line."""

    def __iter__(self) -> Iterator[bytes]:
        yield lines({"status": "pulling aaa", "digest": "sha256:aaa", "total": 9})[0] + b"\n"
        raise httpx.RemoteProtocolError("peer closed connection")


def test_connection_dropped_mid_pull_fails_naming_model(tmp_path: Path) -> None:
    dropped = client(lambda _: httpx.Response(200, stream=Dropped()))
    ollama_, out = provisioner(tmp_path, FakeSession([]), dropped)
    with pytest.raises(ProvisionError, match="'m': connection lost during pull"):
        ollama_.pull("m")
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(e["completed"], e["total"]) for e in events if e["event"] == "progress"] == [(0, 9)]


class FakeResponse:
    def __init__(self, status: int, body: object = None):
        self.status_code = status
        self._body = body
        self.text = json.dumps(body) if body is not None else ""

    def json(self) -> object:
        return self._body


class FakeSession:
    """Answers /api/show (requests) and /api/pull (the ollama client, ``client()``) as
    scripted; the disk is whatever the test wrote."""

    def __init__(self, pull_stream: list[bytes], known: bool = True) -> None:
        self.pull_stream = pull_stream
        self.known = known
        self.pulls = 0

    def post(self, url: str, json: dict, **_: object) -> FakeResponse:
        assert url.endswith("/api/show")
        return FakeResponse(200 if self.known else 404, {"error": "model not found"})

    def client(self) -> ollama.Client:
        def pull(_: httpx.Request) -> httpx.Response:
            self.pulls += 1
            return httpx.Response(200, content=b"".join(x + b"\n" for x in self.pull_stream))

        return client(pull)


def write_model(models: Path, name: str, blobs: dict[str, bytes]) -> dict[str, Path]:
    """A manifest for ``name`` whose config is the first blob and layers the rest."""
    descriptors, paths = [], {}
    for label, data in blobs.items():
        digest = hashlib.sha256(data).hexdigest()
        path = models / "blobs" / f"sha256-{digest}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        descriptors.append({"digest": f"sha256:{digest}", "size": len(data)})
        paths[label] = path
    manifest = OllamaName.parse(name).manifest_path(models)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"config": descriptors[0], "layers": descriptors[1:]}))
    return paths


def provisioner(
    models: Path, session: FakeSession, pulls: ollama.Client | None = None
) -> tuple[OllamaProvisioner, io.StringIO]:
    out = io.StringIO()
    emitter = Emitter("ollama", out)
    verifier = Verifier(settle_seconds=0)
    pulls = pulls or session.client()
    return OllamaProvisioner("http://o", models, ["m"], verifier, emitter, session, pulls), out


def test_success_without_files_on_disk_is_not_counted(tmp_path: Path) -> None:
    session = FakeSession(lines({"status": "success"}))
    ollama, _ = provisioner(tmp_path, session)
    with pytest.raises(ProvisionError, match="no manifest"):
        ollama.ensure("m")
    assert session.pulls == 1


def test_success_with_a_missing_blob_is_not_counted(tmp_path: Path) -> None:
    paths = write_model(tmp_path, "m", {"config": b"{}", "weights": b"w" * 1000})
    paths["weights"].unlink()
    ollama, _ = provisioner(tmp_path, FakeSession(lines({"status": "success"})))
    with pytest.raises(FileCheckError, match="'m': .*is missing"):
        ollama.ensure("m")


def test_server_that_does_not_know_the_model_fails(tmp_path: Path) -> None:
    write_model(tmp_path, "m", {"config": b"{}", "weights": b"w" * 1000})
    ollama, _ = provisioner(tmp_path, FakeSession([], known=False))
    with pytest.raises(ProvisionError, match="/api/show HTTP 404"):
        ollama.verify("m")


def test_verified_model_is_not_pulled_again(tmp_path: Path) -> None:
    write_model(tmp_path, "m", {"config": b"{}", "weights": b"w" * 1000})
    session = FakeSession(lines({"status": "success"}))
    ollama, _ = provisioner(tmp_path, session)
    report = ollama.ensure("m")
    assert (report.files, report.size, session.pulls) == (2, 1002, 0)


def test_corrupt_blob_is_deleted_before_the_pull(tmp_path: Path) -> None:
    """Ollama skips a blob that exists; repairing means removing the bad one first."""
    paths = write_model(tmp_path, "m", {"config": b"{}", "weights": b"w" * 1000})
    paths["weights"].write_bytes(b"W" + b"w" * 999)
    session = FakeSession(lines({"error": "offline"}))
    ollama, _ = provisioner(tmp_path, session)
    with pytest.raises(ProvisionError, match="'m': offline"):
        ollama.ensure("m")
    assert not paths["weights"].exists() and paths["config"].exists()
