"""01-infra's volume preparation and file service."""

from __future__ import annotations

import asyncio
import hashlib
import json
import mimetypes
import os

import pytest
from fastapi.testclient import TestClient

from airig.services import infra


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("FILES_ROOT", str(tmp_path))
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", "t0ken")
    # Server errors come back as 500s so a test asserts the status a user would get.
    return TestClient(infra.create_app(), raise_server_exceptions=False), tmp_path


AUTH = {"Authorization": "Bearer t0ken"}


def test_upload_list_download(files):
    client, root = files
    auth = {"Authorization": "Bearer t0ken"}
    put = client.put("/files/inputs/talk.wav", content=b"RIFF1234", headers=auth)
    assert put.status_code == 201 and put.json() == {"path": "inputs/talk.wav", "size": 8}
    assert (root / "inputs" / "talk.wav").read_bytes() == b"RIFF1234"
    assert not list(root.rglob("*.partial")) and not list(root.rglob(".upload-*"))
    listing = client.get("/files/inputs", headers=auth).json()
    assert listing["entries"] == [["talk.wav", 8]]
    assert client.get("/files/inputs/talk.wav", headers=auth).content == b"RIFF1234"
    assert client.get("/health").json()["status"] == "ok"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
def test_needs_the_token(files, headers):
    client, _ = files
    assert client.put("/files/x", content=b"x", headers=headers).status_code in (401, 403)


def test_paths_cannot_escape_the_volume(files, outside):
    client, root = files
    # A real file beside the volume, named by a path that climbs out of it: served (200)
    # if the path checks were gone, so only the refusal itself passes.
    escape = os.path.relpath(outside, root).replace("..", "%2e%2e")
    assert escape.startswith("%2e%2e/")
    r = client.get(f"/files/{escape}", headers=AUTH)
    assert r.status_code == 400, r.text
    assert r.json() == {
        "detail": "path must not contain '..'; give a path inside the data volume",
        "retryable": False, "retry_after_s": None,
    }  # fmt: skip


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


# --- uploads never write through links (issue 9) ---


@pytest.fixture
def outside(tmp_path_factory):
    """A file outside the data volume that no request may touch."""
    target = tmp_path_factory.mktemp("outside") / "precious"
    target.write_bytes(b"keep")
    return target


def test_a_planted_partial_link_is_not_written_through(files, outside):
    client, root = files
    (root / "inputs").mkdir()
    (root / "inputs" / "talk.wav.partial").symlink_to(outside)
    assert client.put("/files/inputs/talk.wav", content=b"RIFF", headers=AUTH).status_code == 201
    assert outside.read_bytes() == b"keep"
    assert (root / "inputs" / "talk.wav").read_bytes() == b"RIFF"


def test_a_link_in_the_target_place_is_replaced_not_followed(files, outside):
    client, root = files
    (root / "inputs").mkdir()
    link = root / "inputs" / "talk.wav"
    link.symlink_to(outside)
    assert client.put("/files/inputs/talk.wav", content=b"RIFF", headers=AUTH).status_code == 201
    assert outside.read_bytes() == b"keep"
    assert not link.is_symlink() and link.read_bytes() == b"RIFF"


@pytest.mark.parametrize("rel", ["evil/x.wav", "evil/new/deeper/x.wav"])
def test_a_linked_folder_leading_outside_is_refused(files, outside, rel):
    client, root = files
    (root / "evil").symlink_to(outside.parent)
    r = client.put(f"/files/{rel}", content=b"RIFF", headers=AUTH)
    assert r.status_code == 400 and r.json()["detail"] == infra.through_link("evil")
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious"]


@pytest.mark.parametrize("make,last", [(True, False), (False, True), (False, False)])
def test_the_walk_never_opens_a_link(tmp_path, outside, make, last):
    # The only lookup of a path is this walk: a link it meets is refused, whatever it is.
    (tmp_path / "inputs").symlink_to(outside.parent)
    with pytest.raises(infra.ThroughLink):
        infra._walk(tmp_path, ("inputs",), make=make, last=last)
    with pytest.raises(infra.ThroughLink):
        infra._walk(tmp_path, ("inputs", "precious"), make=make, last=last)


def _asgi(app, method: str, path: str, messages: list[dict], auth: bytes = b"Bearer t0ken"):
    """Drive the app with exactly these messages and header bytes: TestClient can neither
    disconnect mid-body nor send a header byte that is not UTF-8."""
    pending = iter(messages)
    sent: list[dict] = []

    async def receive() -> dict:
        return next(pending, {"type": "http.disconnect"})

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": b"", "client": ("127.0.0.1", 1), "server": ("testserver", 80),
        "headers": [(b"host", b"testserver"), (b"authorization", auth)],
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    return sent


def test_a_client_disconnect_leaves_nothing_behind(files):
    client, root = files
    (root / "inputs").mkdir()
    (root / "inputs" / "talk.wav").write_bytes(b"old")
    sent = _asgi(
        client.app,
        "PUT",
        "/files/inputs/talk.wav",
        [{"type": "http.request", "body": b"RIFF", "more_body": True}, {"type": "http.disconnect"}],
    )
    assert sent[0]["status"] == 400
    assert os.listdir(root / "inputs") == ["talk.wav"]
    assert (root / "inputs" / "talk.wav").read_bytes() == b"old"


# --- upload size limit ---


@pytest.fixture
def small(tmp_path, monkeypatch):
    monkeypatch.setenv("FILES_MAX_UPLOAD_BYTES", "10")
    monkeypatch.setenv("FILES_ROOT", str(tmp_path))
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", "t0ken")
    return TestClient(infra.create_app(), raise_server_exceptions=False), tmp_path


def test_a_streamed_upload_over_the_limit_is_413_and_leaves_the_old_file(small):
    client, root = small
    assert client.put("/files/inputs/a.bin", content=b"x" * 10, headers=AUTH).status_code == 201

    def body():  # chunked: no Content-Length, so the limit is met while streaming
        yield b"y" * 6
        yield b"y" * 6

    r = client.put("/files/inputs/a.bin", content=body(), headers=AUTH)
    assert r.status_code == 413 and "FILES_MAX_UPLOAD_BYTES" in r.json()["detail"]
    assert os.listdir(root / "inputs") == ["a.bin"]
    assert (root / "inputs" / "a.bin").read_bytes() == b"x" * 10


def test_a_declared_length_over_the_limit_is_refused_before_anything_is_made(small):
    client, root = small
    r = client.put("/files/new/a.bin", content=b"x" * 11, headers=AUTH)
    assert r.status_code == 413
    assert not (root / "new").exists()


def test_the_413_says_the_file_its_size_the_limit_and_the_knob_and_is_logged(small, capsys):
    """The upload-limit error named a log with nothing in it (issue 35 §5): the answer is
    whole by itself, the limit in a header for the client's own line, and `logs files`
    has one line for it."""
    client, _root = small
    assert client.get("/health").json()["max_upload_bytes"] == 10
    r = client.put("/files/inputs/東京 talk.mp4", content=b"x" * 11, headers=AUTH)
    assert r.status_code == 413 and r.headers["X-Upload-Limit"] == "10"
    detail = r.json()["detail"]
    assert detail.startswith(
        "東京 talk.mp4 is 11 bytes, over the file service's upload limit of 10"
    )
    assert "FILES_MAX_UPLOAD_BYTES" in detail and "log" not in detail

    def body():  # chunked: the size is not known, only that it passed the limit
        yield b"y" * 6
        yield b"y" * 6

    r = client.put("/files/inputs/b.bin", content=body(), headers=AUTH)
    assert r.json()["detail"].startswith("b.bin is more than 10 bytes, over")
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["event"], e["path"], e["status"]) for e in logged] == [
        ("upload.refused", "inputs/東京 talk.mp4", 413),
        ("upload.refused", "inputs/b.bin", 413),
    ]
    assert logged[0]["detail"] == detail


def test_an_interrupted_upload_is_not_logged_as_a_refusal(files, capsys):
    client, root = files
    (root / "inputs").mkdir()
    sent = _asgi(
        client.app,
        "PUT",
        "/files/inputs/talk.wav",
        [{"type": "http.request", "body": b"RIFF", "more_body": True}, {"type": "http.disconnect"}],
    )
    assert sent[0]["status"] == 400
    assert "upload.refused" not in capsys.readouterr().out


@pytest.mark.parametrize("value", ["0", "-5", "8GB", "１０"])
def test_a_bad_upload_limit_refuses_to_start(monkeypatch, tmp_path, value):
    monkeypatch.setenv("FILES_ROOT", str(tmp_path))
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", "t0ken")
    monkeypatch.setenv("FILES_MAX_UPLOAD_BYTES", value)
    with pytest.raises(SystemExit, match="FILES_MAX_UPLOAD_BYTES must be a positive number"):
        infra.create_app()


# --- tokens are compared as bytes ---


def test_a_non_ascii_bearer_is_401(files):
    client, _ = files
    r = client.put("/files/x", content=b"x", headers={"Authorization": b"Bearer t\xe9k\xff"})
    assert r.status_code == 401


def test_a_token_with_undecodable_bytes_answers_401_and_200_not_500(tmp_path, monkeypatch):
    monkeypatch.setenv("FILES_ROOT", str(tmp_path))
    # os.environ holds the byte 0xff as a lone surrogate; encoding it strictly raised.
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", "t0k\udcff")
    client = TestClient(infra.create_app(), raise_server_exceptions=False)
    assert client.get("/files/", headers=AUTH).status_code == 401
    sent = _asgi(client.app, "GET", "/files/", [], auth=b"Bearer t0k\xff")
    assert sent[0]["status"] == 200


# --- paths ---


@pytest.mark.parametrize(
    "url",
    [
        "/files/%2e%2e/%2e%2e/etc/passwd",
        "/files/..%2fetc/passwd",
        "/files/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/files/inputs/%2e%2e/inputs/a.wav",  # stays inside, still refused: no `..` at all
        "/files/%252e%252e/etc/passwd",  # what a twice-decoding proxy would turn into `..`
        "/files/inputs/a%00.wav",
        "/files//etc/passwd",
    ],
)
@pytest.mark.parametrize("method", ["GET", "PUT"])
def test_traversal_nul_and_absolute_paths_are_400(files, url, method):
    client, root = files
    (root / "inputs").mkdir()
    (root / "inputs" / "a.wav").write_bytes(b"RIFF")
    r = client.request(method, url, content=b"x" if method == "PUT" else None, headers=AUTH)
    assert r.status_code == 400, r.text
    assert "data volume" in r.json()["detail"]
    assert (root / "inputs" / "a.wav").read_bytes() == b"RIFF"


@pytest.mark.parametrize(
    "rel,detail", [("inputs", "is a folder"), ("inputs/a.wav/b.wav", "is a file")]
)
def test_put_on_a_folder_or_under_a_file_is_409(files, rel, detail):
    client, root = files
    (root / "inputs").mkdir()
    (root / "inputs" / "a.wav").write_bytes(b"RIFF")
    r = client.put(f"/files/{rel}", content=b"x", headers=AUTH)
    assert r.status_code == 409 and detail in r.json()["detail"]
    assert not list(root.rglob(".upload-*"))


def test_a_listing_never_stats_outside_the_volume(files, outside):
    client, root = files
    (root / "inputs").mkdir()
    (root / "inputs" / "a.wav").write_bytes(b"RIFF")
    (root / "inputs" / "leak").symlink_to(outside)
    (root / "inputs" / "dangling").symlink_to(root / "gone")
    (root / "inputs" / "alias.wav").symlink_to(root / "inputs" / "a.wav")
    (root / "inputs" / f"{infra.UPLOAD_PREFIX}abc").write_bytes(b"half")
    r = client.get("/files/inputs", headers=AUTH)
    assert r.status_code == 200
    # Not even a link inside the volume: GET refuses it, so the listing leaves it out.
    assert r.json()["entries"] == [["a.wav", 4]]


# --- downloads and listings never go through links (issue 36 §4) ---
#
# A task can make links anywhere on the data volume. Each case below names a path through
# one; before, a link that stayed inside the volume was followed, so `index/` (the brain's
# search index) was served, listed and overwritten by path.

SECRET = b"SQLite format 3\x00 the brain's index"


@pytest.fixture
def planted(files, outside):
    """A volume with the brain's index, a real output, and a task's links beside them."""
    client, root = files
    (root / "index").mkdir()
    (root / "index" / "search.sqlite").write_bytes(SECRET)
    (root / "outputs" / "plan").mkdir(parents=True)
    (root / "outputs" / "plan" / "notes.md").write_bytes(b"# notes")
    links = {
        "outputs/idx": "../index",  # a folder inside the volume
        "outputs/db": "../index/search.sqlite",  # a file inside the volume
        "outputs/plan/up": "../..",  # the volume's root, from deeper down
        "outputs/etc": str(outside.parent),  # a folder outside
        "outputs/leak": str(outside),  # a file outside
    }
    for link, target in links.items():
        (root / link).symlink_to(target)
    return client, root


def _refused(r, link: str) -> None:
    assert r.status_code == 400, r.text
    assert r.json()["detail"] == infra.through_link(link)
    assert SECRET not in r.content and b"keep" not in r.content


@pytest.mark.parametrize(
    "rel,link",
    [
        ("outputs/db", "outputs/db"),
        ("outputs/idx/search.sqlite", "outputs/idx"),
        ("outputs/plan/up/index/search.sqlite", "outputs/plan/up"),
        ("outputs/./idx//search.sqlite", "outputs/idx"),
        ("outputs/leak", "outputs/leak"),
        ("outputs/etc/precious", "outputs/etc"),
    ],
)
def test_a_download_through_a_link_is_refused(planted, rel, link):
    client, _root = planted
    _refused(client.get(f"/files/{rel}", headers=AUTH), link)


@pytest.mark.parametrize(
    "rel,link",
    [("outputs/idx", "outputs/idx"), ("outputs/plan/up", "outputs/plan/up"),
     ("outputs/plan/up/index", "outputs/plan/up"), ("outputs/etc", "outputs/etc")],
)  # fmt: skip
@pytest.mark.parametrize("sha256", ["false", "true"])
def test_a_listing_through_a_link_is_refused(planted, rel, link, sha256):
    client, _root = planted
    r = client.get(f"/files/{rel}?sha256={sha256}", headers=AUTH)
    _refused(r, link)
    assert b"search.sqlite" not in r.content and b"precious" not in r.content


@pytest.mark.parametrize("sha256", ["false", "true"])
def test_a_listing_leaves_links_out_and_hashes_none(planted, sha256):
    client, root = planted
    os.mkfifo(root / "outputs" / "pipe")  # nothing a GET serves: left out too
    r = client.get(f"/files/outputs?sha256={sha256}", headers=AUTH)
    assert r.status_code == 200
    assert [e[0] for e in r.json()["entries"]] == ["plan/"]
    r = client.get(f"/files/outputs/plan?sha256={sha256}", headers=AUTH)
    want = ["notes.md", 7] + ([hashlib.sha256(b"# notes").hexdigest()] if sha256 == "true" else [])
    assert r.json()["entries"] == [want]  # not `up`, the link to the volume's root


@pytest.mark.parametrize(
    "url",
    [
        "/files/outputs/idx/%2e%2e/index/search.sqlite",
        "/files/outputs/%2e%2e/index/search.sqlite",
        "/files/outputs/idx%2f..%2findex/search.sqlite",
        "/files/outputs/%252e%252e/index/search.sqlite",
        "/files/outputs/idx/search.sqlite%00",
        "/files/outputs/idx%00/search.sqlite",
        "/files/outputs/idx/%2e%2e",
    ],
)
def test_traversal_and_nul_beside_a_link_are_400(planted, url):
    client, _root = planted
    r = client.get(url, headers=AUTH)
    assert r.status_code == 400 and "data volume" in r.json()["detail"]
    assert SECRET not in r.content and b"search.sqlite" not in r.content


def _body(sent: list[dict]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.mark.parametrize("tail", ["search.sqlite", ""])
def test_a_path_over_4096_chars_through_a_link_is_refused(planted, tail):
    # `.` components cost nothing to resolve, so a long path still reached the link's target.
    client, _root = planted
    path = "/files/outputs/idx/" + "./" * 2100 + tail
    assert len(path) > 4096
    sent = _asgi(client.app, "GET", path, [])
    assert sent[0]["status"] == 400
    body = json.loads(_body(sent))
    assert body["detail"] == infra.through_link("outputs/idx")  # one short line


@pytest.mark.parametrize(
    "rel,status", [("outputs/" + "a" * 4100, 400), ("outputs/" + "a/" * 2100 + "x", 404)]
)
def test_a_path_over_4096_chars_is_a_clean_refusal(planted, rel, status):
    client, _root = planted
    sent = _asgi(client.app, "GET", f"/files/{rel}", [])
    assert sent[0]["status"] == status, _body(sent)


@pytest.mark.parametrize(
    "rel,link",
    [
        ("outputs/idx/search.sqlite", "outputs/idx"),
        ("outputs/plan/up/index/x.db", "outputs/plan/up"),
    ],
)
def test_an_upload_through_a_link_inside_the_volume_is_refused(planted, rel, link):
    # Before, only a link leading out was refused: this one overwrote the brain's index.
    client, root = planted
    r = client.put(f"/files/{rel}", content=b"RIFF", headers=AUTH)
    _refused(r, link)
    assert (root / "index" / "search.sqlite").read_bytes() == SECRET
    assert sorted(p.name for p in (root / "index").iterdir()) == ["search.sqlite"]


def test_downloads_and_listings_without_links_are_unchanged(planted):
    client, _root = planted
    for rel in ("outputs/plan/notes.md", "outputs/./plan//notes.md"):
        r = client.get(f"/files/{rel}", headers=AUTH)
        assert r.status_code == 200 and r.content == b"# notes"
        assert r.headers["content-length"] == "7"
        assert r.headers["content-type"].startswith(
            mimetypes.guess_type("notes.md")[0] or "application/octet-stream"
        )
    assert client.get("/files/outputs/plan/gone.md", headers=AUTH).status_code == 404
    assert client.get("/files/outputs/plan/notes.md/x", headers=AUTH).status_code == 404
    listing = client.get("/files/", headers=AUTH).json()
    assert [e[0] for e in listing["entries"]] == ["index/", "outputs/"]


# --- bind address ---


@pytest.mark.parametrize("env,host", [(None, "127.0.0.1"), ("0.0.0.0", "0.0.0.0")])
def test_serve_binds_loopback_unless_told(monkeypatch, tmp_path, env, host):
    import uvicorn

    monkeypatch.setenv("FILES_ROOT", str(tmp_path))
    monkeypatch.setenv("BRAIN_ADMIN_TOKEN", "t0ken")
    if env is None:
        monkeypatch.delenv("FILES_LISTEN_HOST", raising=False)
    else:
        monkeypatch.setenv("FILES_LISTEN_HOST", env)
    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(kw))
    assert infra.main(["serve"]) == 0
    assert calls[0]["host"] == host and calls[0]["port"] == infra.PORT
