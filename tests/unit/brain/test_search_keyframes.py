"""The keyframe of a video search hit (issue 39 §4, ``GET /v1/search/keyframe``): found
upstream of the embed task that indexed the hit, served from the data volume only, as
what its bytes are; a path a run's output gives that leaves the volume, a link, a file
that is no image, a page locator or another's token get a 404/401/403 and never a byte."""

from __future__ import annotations

import os

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.api.routes.keyframes import pick, seconds
from tests import image_samples as samples

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
FRAMES = [{"path": "outputs/frames/talk/0001.png", "t": 0.0},
          {"path": "outputs/frames/talk/0002.gif", "t": 90.0}]  # fmt: skip


@pytest.fixture
def client(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        yield client


def indexed(client, frames: list[dict], files: dict[str, bytes]) -> str:
    """A plan whose embed task stands on a frames task that output ``frames``."""
    brain = client.app.state.brain
    for path, data in files.items():
        target = brain.settings.data_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    plan = h.submit(brain, [
        {"id": "keyframes", "type": "noop"},
        {"id": "index", "type": "noop", "depends_on": ["keyframes"]},
    ])  # fmt: skip
    # a frames task's row, as a worker's completion would leave it (its type, its output)
    brain.write(
        lambda c, o, _: c.execute("UPDATE tasks SET type = 'frames' WHERE key = 'keyframes'")
    )
    h.claim(brain, 1000)
    h.do(brain, plan, "keyframes", "complete", 1001, output={"frames": frames})
    return plan


def ask(client, plan: str, at: str, task: str = "index", headers=ADMIN):
    return client.get("/v1/search/keyframe", params={"plan": plan, "task": task, "at": at},
                      headers=headers)  # fmt: skip


def test_the_frame_at_or_after_the_hit_is_served_as_its_bytes_say(client):
    png, gif = samples.png(16, 9), samples.gif()
    plan = indexed(client, FRAMES, {FRAMES[0]["path"]: png, FRAMES[1]["path"]: gif})
    first = ask(client, plan, "00:00:00")
    assert first.status_code == 200 and first.content == png
    assert first.headers["content-type"] == "image/png"
    assert first.headers["x-content-type-options"] == "nosniff"
    later = ask(client, plan, "00:01:00")  # between the two: the next one
    assert later.content == gif and later.headers["content-type"] == "image/gif"
    assert ask(client, plan, "01:00:00").content == gif  # past the last: the last


def test_timestamps_and_picks():
    assert seconds("00:01:30") == 90 and seconds("1:30") == 90 and seconds("12.5") == 12.5
    assert seconds("p. 4") is None and seconds("-3") is None and seconds("nan") is None
    assert pick([], 3) is None and pick(FRAMES, 0.5) == FRAMES[1]


def test_a_page_locator_has_no_keyframe(client):
    plan = indexed(client, FRAMES, {FRAMES[0]["path"]: samples.png()})
    answer = ask(client, plan, "page 4")
    assert (
        answer.status_code == 404 and "only a video hit has a keyframe" in answer.json()["detail"]
    )


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/hostname", "outputs/\x00.png",
                                  "outputs/../../secret.png", "..\\secret.png"])  # fmt: skip
def test_a_path_leaving_the_volume_is_never_served(client, tmp_path, path):
    (tmp_path / "secret.png").write_bytes(samples.png())
    plan = indexed(client, [{"path": path, "t": 0}], {})
    answer = ask(client, plan, "0")
    assert answer.status_code == 404
    assert answer.json()["detail"].endswith("is not a path inside the data volume")


def test_a_link_out_of_the_volume_is_never_served(client, tmp_path):
    secret = tmp_path / "outside.png"
    secret.write_bytes(samples.png())
    plan = indexed(client, [{"path": "outputs/frames/link.png", "t": 0}], {})
    data_dir = client.app.state.brain.settings.data_dir
    (data_dir / "outputs" / "frames").mkdir(parents=True)
    os.symlink(secret, data_dir / "outputs" / "frames" / "link.png")
    answer = ask(client, plan, "0")
    assert answer.status_code == 404 and "leads outside the data volume" in answer.json()["detail"]


@pytest.mark.parametrize("data", [samples.TEXT, samples.zip_file(), b"", samples.bmp()])
def test_a_file_that_is_no_image_is_not_served(client, data):
    plan = indexed(client, [{"path": "outputs/frames/x.png", "t": 0}],
                   {"outputs/frames/x.png": data})  # fmt: skip
    answer = ask(client, plan, "0")
    assert answer.status_code == 404 and answer.headers["content-type"] == "application/json"
    assert "outputs/frames/x.png" in answer.json()["detail"]


def test_a_pixel_bomb_is_not_served(client):
    plan = indexed(client, [{"path": "outputs/frames/bomb.png", "t": 0}],
                   {"outputs/frames/bomb.png": samples.png(60000, 60000)})  # fmt: skip
    answer = ask(client, plan, "0")
    assert answer.status_code == 404 and "declares 60000 x 60000 pixels" in answer.json()["detail"]


def test_a_directory_or_a_fifo_is_not_served(client):
    plan = indexed(client, [{"path": "outputs/frames", "t": 0}, {"path": "outputs/p", "t": 1}],
                   {"outputs/frames/a.png": samples.png()})  # fmt: skip
    os.mkfifo(client.app.state.brain.settings.data_dir / "outputs" / "p")
    assert "not a regular file" in ask(client, plan, "0").json()["detail"]
    assert "not a regular file" in ask(client, plan, "1").json()["detail"]


def test_hostile_outputs_and_queries_are_404s_not_500s(client):
    plan = indexed(client, [{"path": 7, "t": "x"}, "junk", {"t": 1}], {})
    assert ask(client, plan, "0").json()["detail"] == "no keyframes upstream of that task"
    assert ask(client, "nope", "0").status_code == 404
    assert ask(client, plan, "0", task="x" * 600).status_code == 422
    assert ask(client, plan, "9" * 40).status_code == 422


def test_only_the_admin_token_gets_a_keyframe(client):
    plan = indexed(client, FRAMES, {FRAMES[0]["path"]: samples.png()})
    assert ask(client, plan, "0", headers={}).status_code == 401
    boot = {"Authorization": "Bearer bootstrap-secret-token"}
    assert ask(client, plan, "0", headers=boot).status_code in (401, 403)


def test_the_page_ships_the_search_view(client):
    page = client.get("/dashboard").text
    assert '<script src="/dashboard/search.js"' in page and 'href="#search"' in page
    script = client.get("/dashboard/search.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript"
    )
    # text from the brain goes in as text: the page has no way to write markup
    assert "innerHTML" not in script.text and "insertAdjacentHTML" not in script.text
