"""A plan using every executor runs to completion: real brain, workers and stand-ins."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import pytest
import requests
from brain_procs import Cluster
from standins.conftest_helpers import start_standin

CHAT, EMBED, WHISPER = "qwen2.5:0.5b", "nomic-embed-text", "Systran/faster-whisper-tiny"
CHECKPOINT = "sd15-tiny.safetensors"


@pytest.fixture
def services(tmp_path):
    ollama = start_standin("ollama", tmp_path / "ollama", {"STANDIN_MODEL_BYTES": "4096"})
    comfy_root = tmp_path / "comfyui"
    (comfy_root / "models" / "checkpoints").mkdir(parents=True)
    (comfy_root / "models" / "checkpoints" / CHECKPOINT).write_bytes(b"weights")
    comfyui = start_standin("comfyui", comfy_root, {"STANDIN_EXEC_SECONDS": "0.2"})
    whisper = start_standin("whisper", tmp_path / "hub", {"STANDIN_MODEL_BYTES": "1024"})
    started = [ollama, comfyui, whisper]
    try:
        for model in (CHAT, EMBED):
            body = {"model": model, "stream": False}
            requests.post(f"{ollama.url}/api/pull", json=body, timeout=30).raise_for_status()
        requests.post(f"{whisper.url}/v1/models/{WHISPER}", timeout=30).raise_for_status()
        yield {"OLLAMA_URL": ollama.url, "COMFYUI_URL": comfyui.url, "WHISPER_URL": whisper.url}
    finally:
        for standin in started:
            standin.stop()


def write_wav(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(16000)
        audio.writeframes(b"\0\0" * 8000)


PLAN = {
    "name": "every executor",
    "tasks": [
        {"id": "load", "type": "resource", "task_class": "resource",
         "payload": {"action": "load", "service": "ollama", "model": CHAT}},
        {"id": "transcribe", "type": "transcribe",
         "payload": {"audio": "audio/talk.wav", "model": WHISPER}},
        {"id": "summarise", "type": "llm", "model": CHAT, "depends_on": ["load", "transcribe"],
         "payload": {"prompt": "Summarise: {{ tasks.transcribe.output }}"}},
        {"id": "embed", "type": "embed", "model": EMBED, "depends_on": ["summarise"],
         "payload": {"input": "{{ tasks.summarise.output.text }}"}},
        {"id": "picture", "type": "image",
         "payload": {"prompt": "a red bicycle", "checkpoint": CHECKPOINT, "steps": 2}},
        {"id": "count", "type": "shell", "depends_on": ["embed"],
         "payload": {"command": "ls audio | wc -l"}},
        # the summary reaches the command as "${AIRIG_INPUT_1}", never as command text
        {"id": "measure", "type": "shell", "depends_on": ["summarise"],
         "payload": {"command": "printf '%s' {{ tasks.summarise.output.text }} | wc -c"}},
        {"id": "done", "type": "noop", "depends_on": ["count", "picture"],
         "payload": {"echo": "{{ tasks.count.output.stdout_tail }}"}},
        {"id": "unload", "type": "resource", "task_class": "resource", "depends_on": ["done"],
         "payload": {"action": "unload", "service": "ollama", "model": CHAT}},
    ],
}  # fmt: skip


def test_a_plan_using_every_executor_runs_to_completion(tmp_path, services):
    cluster = Cluster(tmp_path / "cluster", services=services)
    cluster.root.mkdir()
    write_wav(cluster.root / "data" / "audio" / "talk.wav")
    try:
        cluster.start_brain()
        cluster.start_worker("gpu0", "llm,script,cpu")
        cluster.start_worker("cpu0", "cpu")
        plan = cluster.submit(PLAN)
        view = cluster.wait_plan(plan["id"], 90)
        states = {t["id"]: (t["state"], t["error"]) for t in view["tasks"]}
        assert view["status"] == "succeeded", states
        assert cluster.completions(plan["id"]) == {t["id"]: 1 for t in PLAN["tasks"]}
        tasks = {t["id"]: t for t in view["tasks"]}
        assert tasks["count"]["worker_id"] in {"gpu0", "cpu0"}
        assert {tasks[k]["worker_id"] for k in ("load", "summarise", "embed", "picture")} == {
            "gpu0"
        }
        image = tasks["picture"]["files"][0]
        assert (cluster.root / "results" / image).read_bytes().startswith(b"\x89PNG")
        summary = cluster.get(f"/v1/plans/{plan['id']}/tasks/summarise/result")["output"]
        assert summary["text"] and tasks["summarise"]["metrics"]
        measured = cluster.get(f"/v1/plans/{plan['id']}/tasks/measure/result")["output"]
        assert int(measured["stdout_tail"]) == len(summary["text"].encode())
        done = cluster.get(f"/v1/plans/{plan['id']}/tasks/done/result")["output"]
        assert done["echo"].strip() == "1"
        samples = (cluster.root / "state" / "training_samples.jsonl").read_text().splitlines()
        assert json.loads(samples[0])["task_id"] == "summarise"
    finally:
        cluster.stop()
