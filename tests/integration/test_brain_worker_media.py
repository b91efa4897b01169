"""Video and document plans run end to end: real brain and worker, the Ollama and Whisper
stand-ins, the real ffmpeg / poppler / tesseract, upstream outputs reaching the media
tasks as the JSON text templates insert."""

from __future__ import annotations

import pytest
import requests
from brain_procs import Cluster
from standins.conftest_helpers import start_standin
from support_media import make_pdf, make_video, need

VISION, WHISPER = "qwen2.5vl:7b", "Systran/faster-whisper-tiny"


@pytest.fixture
def services(tmp_path):
    ollama = start_standin("ollama", tmp_path / "ollama", {"STANDIN_MODEL_BYTES": "4096"})
    whisper = start_standin("whisper", tmp_path / "hub", {"STANDIN_MODEL_BYTES": "1024"})
    try:
        body = {"model": VISION, "stream": False}
        requests.post(f"{ollama.url}/api/pull", json=body, timeout=30).raise_for_status()
        requests.post(f"{whisper.url}/v1/models/{WHISPER}", timeout=30).raise_for_status()
        yield {"OLLAMA_URL": ollama.url, "WHISPER_URL": whisper.url}
    finally:
        ollama.stop()
        whisper.stop()


PLAN = {
    "name": "video and document notes",
    "tasks": [
        {"id": "frames", "type": "frames", "payload": {"video": "in/clip.mp4", "width": 160}},
        {"id": "hear", "type": "transcribe", "payload": {"audio": "in/clip.mp4", "model": WHISPER}},
        {"id": "describe", "type": "llm", "model": VISION, "depends_on": ["frames"],
         "payload": {"prompt": "Describe this keyframe.", "per_image": True,
                     "images": "{{ tasks.frames.output.frames }}"}},
        {"id": "video_note", "type": "note", "depends_on": ["frames", "hear", "describe"],
         "payload": {"path": "outputs/notes/clip.md", "kind": "video", "title": "Clip",
                     "source": "in/clip.mp4", "transcript": "{{ tasks.hear.output }}",
                     "frames": "{{ tasks.frames.output }}",
                     "descriptions": "{{ tasks.describe.output.images }}"}},
        {"id": "pages", "type": "pages", "payload": {"pdf": "in/doc.pdf", "dpi": 100}},
        {"id": "read", "type": "ocr", "depends_on": ["pages"],
         "payload": {"images": "{{ tasks.pages.output.pages }}", "engine": "tesseract"}},
        {"id": "doc_note", "type": "note", "depends_on": ["read"],
         "payload": {"path": "outputs/notes/doc.txt", "kind": "pages", "source": "in/doc.pdf",
                     "pages": "{{ tasks.read.output.pages }}"}},
        {"id": "table", "type": "note", "depends_on": ["read"],
         "payload": {"path": "outputs/notes/pages.csv", "kind": "csv",
                     "rows": "{{ tasks.read.output.pages }}", "columns": ["path", "text"]}},
    ],
}  # fmt: skip


def test_video_and_document_notes(tmp_path, services):
    need("ffmpeg", "pdftoppm", "tesseract")
    cluster = Cluster(tmp_path / "cluster", services=services)
    cluster.root.mkdir()
    data = cluster.root / "data"
    (data / "in").mkdir(parents=True)
    make_video(data / "in" / "clip.mp4")
    make_pdf(data / "in" / "doc.pdf", [["CHAPTER ONE", "Lamps"], ["CHAPTER TWO", "Ropes"]])
    try:
        cluster.start_brain()
        cluster.start_worker("w0", "llm,script,cpu")
        plan = cluster.submit(PLAN)
        view = cluster.wait_plan(plan["id"], 120)
        states = {t["id"]: (t["state"], t["error"]) for t in view["tasks"]}
        assert view["status"] == "succeeded", states

        def output(task):
            return cluster.get(f"/v1/plans/{plan['id']}/tasks/{task}/result")["output"]

        frames = output("frames")["frames"]
        assert [frame["t"] for frame in frames] == pytest.approx([0, 2, 4])
        described = output("describe")["images"]
        assert [item["path"] for item in described] == [frame["path"] for frame in frames]
        assert all("image1: 160x120 png" in item["text"] for item in described)
        note = (data / "outputs" / "notes" / "clip.md").read_text()
        assert note.startswith("# Clip\n") and "Stand-in transcript" in note
        for frame, item in zip(frames, described, strict=True):
            # the note in outputs/notes/, the keyframes in outputs/frames/clip/
            link = frame["path"].removeprefix("outputs/")
            assert f"](../{link})" in note and item["text"] in note
        assert output("video_note")["documents"][0]["source"] == "in/clip.mp4"
        text = (data / "outputs" / "notes" / "doc.txt").read_text()
        assert text.index("--- page 1 ---") < text.index("CHAPTER ONE") < text.index("page 2")
        assert "CHAPTER TWO" in text
        sheet = (data / "outputs" / "notes" / "pages.csv").read_text(encoding="utf-8-sig")
        table = sheet.splitlines()
        assert table[0] == "path,text" and table[1].startswith("outputs/pages/doc/page-1.png,")
    finally:
        cluster.stop()
