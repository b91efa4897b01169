"""``index/`` of the data volume is the brain's alone (issue 36 §2, last item): the file
service takes no upload there, however the path is spelled, and the index is left as it
was; uploads elsewhere are as before."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from airig.services import infra

AUTH = {"Authorization": "Bearer t0ken"}
INDEX = b"SQLite format 3\x00 the brain's search index"


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("FILES_ROOT", str(tmp_path))
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", "t0ken")
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "search.sqlite").write_bytes(INDEX)
    return TestClient(infra.create_app(), raise_server_exceptions=False), tmp_path


@pytest.mark.parametrize(
    "rel",
    ["index/search.sqlite", "index/new.sqlite", "./index/search.sqlite", "index//x",
     "index/sub/deeper.bin", "%2E/index/search.sqlite"],
)  # fmt: skip
def test_no_upload_lands_in_the_brains_index(files, rel):
    client, root = files
    answer = client.put(f"/files/{rel}", content=b"garbage", headers=AUTH)
    assert answer.status_code == 403, answer.text
    detail = answer.json()["detail"]
    assert "index/, the brain's search index, which only the brain writes" in detail
    assert "\n" not in detail
    assert sorted(p.name for p in (root / "index").iterdir()) == ["search.sqlite"]
    assert (root / "index" / "search.sqlite").read_bytes() == INDEX


def test_uploads_elsewhere_still_land(files):
    client, root = files
    for rel in ("inputs/talk.wav", "inputs/index/talk.wav", "indexes/x.bin"):
        assert client.put(f"/files/{rel}", content=b"x", headers=AUTH).status_code == 201
        assert (root / rel).read_bytes() == b"x"
    # the index may still be read (backup reads it through the brain; an admin may look)
    assert client.get("/files/index/search.sqlite", headers=AUTH).content == INDEX
