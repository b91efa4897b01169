"""01-infra's volume preparation and file service."""

from __future__ import annotations

import os

import pytest
from fastapi.testclient import TestClient

from airig import infra


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("FILES_ROOT", str(tmp_path))
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", "t0ken")
    return TestClient(infra.create_app()), tmp_path


def test_upload_list_download(files):
    client, root = files
    auth = {"Authorization": "Bearer t0ken"}
    put = client.put("/files/inputs/talk.wav", content=b"RIFF1234", headers=auth)
    assert put.status_code == 201 and put.json() == {"path": "inputs/talk.wav", "size": 8}
    assert (root / "inputs" / "talk.wav").read_bytes() == b"RIFF1234"
    assert not list(root.rglob("*.partial"))
    listing = client.get("/files/inputs", headers=auth).json()
    assert listing["entries"] == [["talk.wav", 8]]
    assert client.get("/files/inputs/talk.wav", headers=auth).content == b"RIFF1234"
    assert client.get("/health").json()["status"] == "ok"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
def test_needs_the_token(files, headers):
    client, _ = files
    assert client.put("/files/x", content=b"x", headers=headers).status_code in (401, 403)


def test_paths_cannot_escape_the_volume(files):
    client, _ = files
    r = client.get("/files/%2e%2e/%2e%2e/etc/passwd", headers={"Authorization": "Bearer t0ken"})
    assert r.status_code in (400, 404)


def test_placeholder_token_refuses_to_start(monkeypatch):
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", "change-me")
    with pytest.raises(SystemExit):
        infra.create_app()


def test_prepare_sets_owners_and_layout(tmp_path, monkeypatch):
    for name in ("data", "whisper", "ollama"):
        (tmp_path / name).mkdir()
    chowned = []
    monkeypatch.setattr(os, "chown", lambda path, uid, gid: chowned.append((path.name, uid)))
    done = infra.prepare(tmp_path)
    assert (tmp_path / "data" / "inputs").is_dir() and (tmp_path / "ollama" / "models").is_dir()
    assert ("data", infra.AIRIG_UID) in chowned and ("whisper", infra.WHISPER_UID) in chowned
    assert len(done) == len(chowned)
