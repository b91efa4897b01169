"""Ollama's load proof against a fake Ollama: every answer is one verdict, never a traceback."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import requests

from airig.provision import runner
from airig.provision.events import Emitter
from airig.provision.load_proof import SAID_LIMIT, load_proof

KERNEL = "llama runner process has terminated: CUDA error: device kernel image is invalid"
BIG, SMALL, EMBED = "qwen2.5:7b-instruct-q4_K_M", "llama3.2:1b", "nomic-embed-text"


class FakeResponse:
    def __init__(self, status: int, body: object = None, text: str | None = None) -> None:
        self.status_code = status
        self.text = text if text is not None else json.dumps(body)

    def json(self) -> Any:
        return json.loads(self.text)  # ValueError on a body that is not JSON, as requests


class FakeOllama:
    """/api/tags, /api/generate, /api/embed, /api/ps as scripted; records every call."""

    def __init__(self, sizes: dict[str, int], vram: float = 1.0, embed_only: tuple = ()) -> None:
        self.sizes = sizes
        self.vram = vram
        self.embed_only = embed_only
        self.loaded: dict[str, int] = {}
        self.calls: list[tuple[str, dict | None]] = []
        self.answers: dict[str, FakeResponse] = {}  # path → a scripted answer instead

    def get(self, url: str, **_: object) -> FakeResponse:
        return self.answer(url, None)

    def post(self, url: str, json: dict, **_: object) -> FakeResponse:
        return self.answer(url, json)

    def answer(self, url: str, body: dict | None) -> FakeResponse:
        path = url.removeprefix("http://o")
        self.calls.append((path, body))
        if body is not None and body.get("keep_alive") == 0 and "prompt" not in body:
            self.loaded.pop(body["model"], None)
            return FakeResponse(200, {"done": True, "done_reason": "unload"})
        if path in self.answers:
            return self.answers[path]
        if path == "/api/tags":
            rows = [{"name": n, "model": n, "size": s} for n, s in self.sizes.items()]
            return FakeResponse(200, {"models": rows})
        if path == "/api/ps":
            rows = [
                {"name": n, "model": n, "size": s, "size_vram": int(s * self.vram)}
                for n, s in self.loaded.items()
            ]
            return FakeResponse(200, {"models": rows})
        assert body is not None
        model = body["model"]
        if path == "/api/generate" and model in self.embed_only:
            return FakeResponse(400, {"error": f'"{model}" does not support generate'})
        self.loaded[model] = self.sizes[model]
        if path == "/api/embed":
            return FakeResponse(200, {"model": model, "embeddings": [[0.1]]})
        return FakeResponse(200, {"model": model, "response": "1", "done": True})


def prove(fake: FakeOllama, models: list[str]) -> dict:
    return load_proof("http://o", models, fake, timeout=1)


def test_the_smallest_model_answers_on_the_gpu_and_is_unloaded() -> None:
    fake = FakeOllama({BIG: 4_000, SMALL: 1_000, EMBED: 2_000})
    found = prove(fake, [BIG, SMALL, EMBED])
    assert found == {
        "status": "passed",
        "model": SMALL,
        "size_vram": 1_000,
        "said": f"{SMALL} answered one token; /api/ps size_vram 1000 of size 1000",
    }
    generate = {
        "model": SMALL,
        "prompt": "1",
        "stream": False,
        "options": {"num_predict": 1},
        "keep_alive": "60s",
    }
    assert fake.calls == [
        ("/api/tags", None),
        ("/api/generate", generate),
        ("/api/ps", None),
        ("/api/generate", {"model": SMALL, "keep_alive": 0}),
    ]
    assert fake.loaded == {}


def test_weights_on_the_cpu_fail_and_say_so() -> None:
    fake = FakeOllama({SMALL: 1_000}, vram=0)
    found = prove(fake, [SMALL])
    assert (found["status"], found["model"], found["size_vram"]) == ("failed", SMALL, 0)
    assert found["said"].startswith("weights not on the GPU: /api/ps size_vram 0 of size 1000")
    assert fake.loaded == {}


def test_a_load_that_fails_quotes_ollama_exactly_and_still_unloads() -> None:
    fake = FakeOllama({SMALL: 1_000})
    fake.answers["/api/generate"] = FakeResponse(500, {"error": KERNEL})
    found = prove(fake, [SMALL])
    assert found == {"status": "failed", "model": SMALL, "size_vram": None, "said": KERNEL}
    assert fake.calls[-1] == ("/api/generate", {"model": SMALL, "keep_alive": 0})


def test_an_embedding_only_model_is_loaded_through_embed() -> None:
    # /api/tags and /api/ps print nomic-embed-text:latest
    fake = FakeOllama(
        {"nomic-embed-text:latest": 300, BIG: 4_000}, embed_only=("nomic-embed-text:latest",)
    )
    found = prove(fake, [BIG, EMBED])
    assert (found["status"], found["model"], found["size_vram"]) == (
        "passed",
        "nomic-embed-text:latest",
        300,
    )
    assert "embedding only" in found["said"]
    embed = {"model": "nomic-embed-text:latest", "input": "1", "keep_alive": "60s"}
    assert ("/api/embed", embed) in fake.calls


def test_an_embedding_model_whose_embed_fails_quotes_that() -> None:
    fake = FakeOllama({"e:latest": 300}, embed_only=("e:latest",))
    fake.answers["/api/embed"] = FakeResponse(500, {"error": KERNEL})
    assert prove(fake, ["e"])["said"] == KERNEL


def test_no_models_is_skipped_without_a_call() -> None:
    fake = FakeOllama({})
    assert prove(fake, [])["status"] == "skipped"
    assert fake.calls == []


def test_a_configured_model_missing_from_tags_fails_naming_both() -> None:
    found = prove(FakeOllama({"other:latest": 5}), [SMALL])
    assert found["status"] == "failed"
    assert found["said"] == f"none of {SMALL} is in /api/tags (it lists other:latest)"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (FakeResponse(500, {"error": "x" * 100_000}), "x" * SAID_LIMIT),
        (FakeResponse(500, {"error": "CUDA\x00 error\x00"}), "CUDA error"),
        (FakeResponse(500, text="<html>bad gateway</html>"), "HTTP 500: <html>bad gateway</html>"),
        (FakeResponse(200, text="not json"), "/api/generate: HTTP 200, not JSON: 'not json'"),
        (FakeResponse(200, [1, 2]), "/api/generate: HTTP 200 but not a JSON object: [1, 2]"),
        (FakeResponse(200, {"error": "late refusal"}), "late refusal"),
    ],
)
def test_hostile_generate_answers_give_a_clear_failed_verdict(
    answer: FakeResponse, said: str
) -> None:
    fake = FakeOllama({SMALL: 1_000})
    fake.answers["/api/generate"] = answer
    found = prove(fake, [SMALL])
    assert (found["status"], found["model"], found["said"]) == ("failed", SMALL, said)
    assert len(found["said"]) <= SAID_LIMIT and "\x00" not in found["said"]


@pytest.mark.parametrize(
    ("path", "answer", "said"),
    [
        ("/api/ps", FakeResponse(200, {"models": []}), "does not list it loaded"),
        ("/api/ps", FakeResponse(200, text="\x00" * 10), "/api/ps: HTTP 200, not JSON"),
        ("/api/ps", FakeResponse(200, {"models": "no"}), "/api/ps: no models list"),
        ("/api/ps", FakeResponse(502, text=""), "/api/ps: HTTP 502"),
        ("/api/tags", FakeResponse(200, {"models": [{"name": SMALL}]}), "none of"),
        ("/api/tags", FakeResponse(404, {"error": "404 page not found"}), "404 page not found"),
    ],
)
def test_hostile_tags_and_ps_answers_give_a_clear_failed_verdict(
    path: str, answer: FakeResponse, said: str
) -> None:
    fake = FakeOllama({SMALL: 1_000})
    fake.answers[path] = answer
    found = prove(fake, [SMALL])
    assert found["status"] == "failed"
    assert said in found["said"], found["said"]


def test_size_vram_that_is_not_a_number_fails() -> None:
    fake = FakeOllama({SMALL: 1_000})
    row = {"name": SMALL, "size": 1_000, "size_vram": "lots"}
    fake.answers["/api/ps"] = FakeResponse(200, {"models": [row]})
    found = prove(fake, [SMALL])
    assert (found["status"], found["size_vram"]) == ("failed", None)
    assert "no size_vram" in found["said"]


def test_an_unreachable_ollama_is_a_verdict_not_a_traceback() -> None:
    class Down:
        def get(self, url: str, **_: object) -> None:
            raise requests.ConnectionError("refused")

        post = get

    found = load_proof("http://o", [SMALL], Down(), timeout=1)
    assert found["status"] == "failed"
    assert found["said"] == "no usable answer from Ollama at http://o: ConnectionError: refused"


# ---------------------------------------------------------------- the init's one line
def run_proof(monkeypatch: pytest.MonkeyPatch, fake: FakeOllama, models: list[str], **env: str):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out = io.StringIO()
    code = runner.prove_load("http://o", fake, models, Emitter("ollama", out))
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_init_prints_one_line_and_exits_3_on_a_failed_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeOllama({SMALL: 1_000})
    fake.answers["/api/generate"] = FakeResponse(500, {"error": KERNEL})
    code, [line] = run_proof(monkeypatch, fake, [SMALL], OLLAMA_IMAGE_PROVED="ollama/ollama:0.30.0")
    assert code == 3
    assert line == {
        "event": "load_proof",
        "service": "ollama",
        "model": SMALL,
        "status": "failed",
        "size_vram": None,
        "said": KERNEL,
        "image": "ollama/ollama:0.30.0",
    }


def test_the_init_passes_and_skips_with_exit_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_IMAGE_PROVED", raising=False)
    code, [line] = run_proof(monkeypatch, FakeOllama({SMALL: 1_000}), [SMALL])
    assert (code, line["status"], line["size_vram"], line["image"]) == (0, "passed", 1_000, "")
    code, [line] = run_proof(monkeypatch, FakeOllama({}), [])
    assert (code, line["status"], line["model"]) == (0, "skipped", None)


@pytest.mark.parametrize(("value", "wanted"), [(None, False), ("off", False), ("", False),
                                                ("gpu", True), (" GPU ", True)])  # fmt: skip
def test_load_proof_is_on_only_for_gpu(
    monkeypatch: pytest.MonkeyPatch, value: str | None, wanted: bool
) -> None:
    if value is None:
        monkeypatch.delenv("AIRIG_LOAD_PROOF", raising=False)
    else:
        monkeypatch.setenv("AIRIG_LOAD_PROOF", value)
    assert runner.load_proof_wanted() is wanted


def test_no_models_with_the_proof_on_skips_in_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRIG_LOAD_PROOF", "gpu")
    monkeypatch.setenv("AIRIG_OLLAMA_MODELS", "")
    out = io.StringIO()
    code = runner.run(runner.Service.ollama, runner.Mode.ensure, emitter=Emitter("ollama", out))
    [line] = [json.loads(x) for x in out.getvalue().splitlines()]
    assert (code, line["event"], line["status"]) == (0, "load_proof", "skipped")


def test_a_bad_load_proof_value_fails_as_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRIG_LOAD_PROOF", "yes")
    monkeypatch.setenv("AIRIG_OLLAMA_MODELS", "")
    out = io.StringIO()
    code = runner.run(runner.Service.ollama, runner.Mode.ensure, emitter=Emitter("ollama", out))
    [line] = [json.loads(x) for x in out.getvalue().splitlines()]
    assert (code, line["event"]) == (1, "failed")
    assert "AIRIG_LOAD_PROOF='yes'" in line["error"]


def test_verify_mode_never_runs_the_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRIG_LOAD_PROOF", "gpu")
    monkeypatch.setenv("AIRIG_OLLAMA_MODELS", "")
    out = io.StringIO()
    assert (
        runner.run(runner.Service.ollama, runner.Mode.verify, emitter=Emitter("ollama", out)) == 0
    )
    assert out.getvalue() == ""
