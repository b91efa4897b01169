"""The two ZIM recipes end to end on an archive made here with libzim's own writer: a real
brain and worker, the Ollama and Whisper stand-ins, the real ffmpeg. The recipes as
`submit --inputs-dir` sends them (folders and models filled, YAML); `search` answers from
the indexes with the entry's title and path in the archive as each hit's source."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from brain_procs import ADMIN_TOKEN, Cluster
from standins.conftest_helpers import start_standin
from support_media import need
from support_zim import ARTICLES, make_zim, video_entries

from airig.launcher import plan_inputs
from airig.launcher.brain_client import CONTENT_TYPES

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
MODELS = {"llm": "qwen2.5:7b-instruct-q4_K_M", "vision": "qwen2.5vl:7b",
          "embed": "nomic-embed-text", "whisper": "Systran/faster-whisper-tiny"}  # fmt: skip
RECIPES = Path(__file__).resolve().parents[2] / "recipes"
ARCHIVE = "inputs/zims/library.zim"


@pytest.fixture
def services(tmp_path):
    ollama = start_standin("ollama", tmp_path / "ollama", {"STANDIN_MODEL_BYTES": "4096"})
    whisper = start_standin("whisper", tmp_path / "hub", {"STANDIN_MODEL_BYTES": "1024"})
    try:
        for model in ("llm", "vision", "embed"):
            body = {"model": MODELS[model], "stream": False}
            requests.post(f"{ollama.url}/api/pull", json=body, timeout=30).raise_for_status()
        requests.post(f"{whisper.url}/v1/models/{MODELS['whisper']}",
                      timeout=30).raise_for_status()  # fmt: skip
        yield {"OLLAMA_URL": ollama.url, "WHISPER_URL": whisper.url}
    finally:
        ollama.stop()
        whisper.stop()


def as_submitted(recipe: str) -> bytes:
    """The recipe as `submit recipes/<recipe>.yaml --inputs-dir ~/zims` sends it."""
    body = plan_inputs.fill((RECIPES / f"{recipe}.yaml").read_bytes(), "inputs/zims",
                            f"outputs/{recipe}/zims")  # fmt: skip
    return plan_inputs.MODEL.sub(lambda m: MODELS[m.group(1)], body.decode()).encode()


def submit(cluster: Cluster, recipe: str) -> dict:
    headers = {**ADMIN, "Content-Type": CONTENT_TYPES[".yaml"]}
    answer = requests.post(f"{cluster.url}/v1/plans", headers=headers,
                           data=as_submitted(recipe), timeout=60)  # fmt: skip
    assert answer.status_code == 201, answer.text
    return answer.json()


def search(cluster: Cluster, query: str, index: str) -> list[dict]:
    answer = requests.post(f"{cluster.url}/v1/search", headers=ADMIN, timeout=10,
                           json={"query": query, "index": index, "k": 3})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return answer.json()["results"]


def test_zim_videos_and_zim_articles_run_end_to_end_and_search_answers(tmp_path, services):
    need("ffmpeg")
    root = tmp_path / "cluster"
    data = root / "data"
    cluster = Cluster(root, services=services, brain_env={
        "BRAIN_DATA_DIR": str(data), "BRAIN_OLLAMA_URL": services["OLLAMA_URL"]})  # fmt: skip
    make_zim(data / ARCHIVE, [*ARTICLES, *video_entries(tmp_path)],
             redirects=[("Ice", "Ice", "Glacier")])  # fmt: skip
    try:
        cluster.start_brain()
        cluster.start_worker("w0", "llm,script,cpu")
        articles, videos = submit(cluster, "zim-articles"), submit(cluster, "zim-videos")
        for plan in (articles, videos):
            view = cluster.wait_plan(plan["id"], 180)
            states = {t["id"]: (t["state"], t["error"]) for t in view["tasks"]}
            assert view["status"] == "succeeded", states

        # zim-articles: one text per article (the redirect left out), indexed by title+path
        texts = sorted(p.name for p in (data / "outputs" / "zim-articles" / "zims").iterdir())
        assert texts == ["Glacier.txt", "Volcano.txt", "Water_purification.txt"]
        water = (data / "outputs" / "zim-articles" / "zims" / "Water_purification.txt").read_text()
        assert water.startswith("Water purification\n") and "chlorine tablets" in water
        assert "script words" not in water
        best = search(cluster, "boiling water kills pathogens chlorine", "zim-articles")[0]
        assert best["source"] == f"Water purification ({ARCHIVE}/Water_purification)"
        assert "Boiling water for one minute" in best["snippet"]

        # zim-videos: a note per video, titled with the entry's title, keyframes beside it
        folder = data / "outputs" / "zim-videos" / "zims"
        note = (folder / "videos_talk1.md").read_text()
        assert note.startswith("# How glaciers move\n") and "Stand-in transcript" in note
        assert sorted(p.name for p in (folder / "videos_talk2").iterdir())
        hits = search(cluster, "Stand-in transcript", "zim-videos")
        assert {h["source"] for h in hits} <= {f"{ARCHIVE}/videos/talk1.mp4",
                                                f"{ARCHIVE}/videos/talk2.mp4"}  # fmt: skip
        assert hits

        # submitted again: the entries are not extracted again (same content, same file),
        # and the articles, unchanged, are not run again (PLANS.md, "Unchanged items")
        extracted = sorted((data / "inputs" / "zims" / ".library.zim.entries").rglob("*.*"))
        before = {p: p.stat().st_mtime_ns for p in extracted}
        again = submit(cluster, "zim-articles")
        view = cluster.wait_plan(again["id"], 120)
        assert view["status"] == "succeeded"
        assert {p: p.stat().st_mtime_ns for p in extracted} == before
        (group,) = view["fanouts"]
        assert group["reused"] == 3 and group["reused_from"] == {articles["id"]: 3}
        ran = [key for key in cluster.completions(again["id"]) if key != "articles"]
        assert ran == []  # no worker ran any of them (the group's row is ended by the brain)
        best = search(cluster, "boiling water kills pathogens chlorine", "zim-articles")[0]
        assert best["source"] == f"Water purification ({ARCHIVE}/Water_purification)"
    finally:
        cluster.stop()
