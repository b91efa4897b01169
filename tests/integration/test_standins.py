"""Contract tests of the stand-ins: they must speak the upstream APIs the kit relies on."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import ollama
import pytest
import requests
from standins import conftest_helpers as helpers

standins = helpers.standins  # the factory fixture, used by name below
StandIn = helpers.StandIn

FAST_OLLAMA = {"STANDIN_MODEL_BYTES": "600000", "STANDIN_LOAD_SECONDS": "0.05"}


def pull_lines(base: StandIn, model: str) -> list[dict]:
    resp = requests.post(f"{base.url}/api/pull", json={"model": model}, stream=True, timeout=30)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"] == "application/x-ndjson"
    return [json.loads(line) for line in resp.iter_lines() if line]


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------- ollama
def test_ollama_pull_streams_and_writes_a_verifiable_store(standins):
    server = standins("ollama", env=FAST_OLLAMA)
    lines = pull_lines(server, "qwen2.5:0.5b")

    statuses = [line["status"] for line in lines]
    assert statuses[0] == "pulling manifest"
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    progress = [line for line in lines if "digest" in line]
    assert progress and all(
        line["status"] == f"pulling {line['digest'][7:19]}" for line in progress
    )
    assert any(line["completed"] < line["total"] for line in progress)  # real progress
    manifest_path = server.root / "manifests/registry.ollama.ai/library/qwen2.5/0.5b"
    manifest = json.loads(manifest_path.read_text())
    for layer in [manifest["config"], *manifest["layers"]]:
        blob = server.root / "blobs" / layer["digest"].replace(":", "-")
        assert blob.stat().st_size == layer["size"]
        assert "sha256:" + sha256_file(blob) == layer["digest"]
    assert manifest["layers"][0]["size"] == 600000
    assert not list((server.root / "blobs").glob("*-partial*"))

    tags = requests.get(f"{server.url}/api/tags", timeout=5).json()["models"]
    assert [(m["name"], m["digest"]) for m in tags] == [
        ("qwen2.5:0.5b", sha256_file(manifest_path))
    ]


def test_ollama_repull_skips_verified_blobs_and_digests_are_stable(standins, tmp_path):
    server = standins("ollama", env=FAST_OLLAMA)
    first = pull_lines(server, "tinyllama")
    blobs = {p: p.stat().st_mtime_ns for p in (server.root / "blobs").iterdir()}
    again = pull_lines(server, "tinyllama")
    layer_lines = [line for line in again if "digest" in line]
    assert all(line["completed"] == line["total"] for line in layer_lines)  # cache hits
    assert {p: p.stat().st_mtime_ns for p in blobs} == blobs
    other = standins("ollama", env=FAST_OLLAMA, root=tmp_path / "second")
    digests = {line["digest"] for line in first if "digest" in line}
    assert digests == {
        line["digest"] for line in pull_lines(other, "tinyllama") if "digest" in line
    }


def test_ollama_unknown_model_is_an_error_line_inside_200(standins):
    """server/images.go PullModel: the registry's 404 for the manifest becomes
    "pull model manifest: file does not exist" after "pulling manifest" (so inside the 200);
    the stand-in's registry has only its catalogue (names.py DEFAULT_CATALOGUE + knob)."""
    server = standins("ollama", env={**FAST_OLLAMA, "STANDIN_UNKNOWN_MODELS": "tinyllama"})
    for model in ("ghost", "qwen2.5:99b", "someone/private:v1", "tinyllama"):
        lines = pull_lines(server, model)
        assert lines == [
            {"status": "pulling manifest"},
            {"error": "pull model manifest: file does not exist"},
        ], model
    resp = requests.post(f"{server.url}/api/pull", json={"model": "ghost", "stream": False})
    assert resp.status_code == 500 and "file does not exist" in resp.json()["error"]
    assert not (server.root / "manifests").exists()
    with pytest.raises(ollama.ResponseError, match="file does not exist"):
        list(ollama.Client(host=server.url).pull("ghost", stream=True))


def test_ollama_registry_knob_adds_models(standins):
    server = standins("ollama", env={**FAST_OLLAMA, "STANDIN_REGISTRY_MODELS": "ghost,me/m:v1"})
    assert pull_lines(server, "ghost")[-1] == {"status": "success"}
    assert pull_lines(server, "me/m:v1")[-1] == {"status": "success"}
    assert (server.root / "manifests/registry.ollama.ai/me/m/v1").is_file()


# server/routes.go (v0.20.6) per handler: parseAndValidateModelRef / parseNormalizePullModelRef,
# then writeModelRefParseError(err, fallback status, fallback message).
INVALID_NAMES = ("bad name", "a$b:!!", "x" * 300, "ns.dot/model", "m:local:cloud")


def test_ollama_invalid_names_are_refused_as_upstream(standins):
    server = standins("ollama", env=FAST_OLLAMA)
    for name in INVALID_NAMES:
        expected = {"error": "invalid model name"}
        if name == "m:local:cloud":  # errConflictingModelSource keeps its own text
            expected = {"error": f'use either :local or :cloud, not both: "{name}"'}
        for path, body in [
            ("/api/pull", {"model": name}),
            ("/api/show", {"model": name}),
            ("/api/generate", {"model": name, "prompt": "x"}),
            ("/api/chat", {"model": name, "messages": []}),
            ("/api/embed", {"model": name, "input": "x"}),
        ]:
            resp = requests.post(f"{server.url}{path}", json=body, timeout=5)
            assert (resp.status_code, resp.json()) == (400, expected), (name, path)
    assert not (server.root / "manifests").exists()


def test_ollama_empty_model_is_refused_per_handler(standins):
    server = standins("ollama", env=FAST_OLLAMA)
    expected = {
        "/api/pull": (400, "invalid model name"),  # PullHandler fallback
        "/api/show": (400, "model is required"),  # ShowHandler's own check
        "/api/generate": (404, "model '' not found"),  # GenerateHandler fallback
        "/api/embed": (404, "model '' not found"),  # EmbedHandler fallback
        "/api/chat": (400, "model is required"),  # ChatHandler fallback
        "/api/embeddings": (400, "model is required"),  # EmbeddingsHandler fallback
    }
    for path, (status, error) in expected.items():
        resp = requests.post(f"{server.url}{path}", json={"model": "", "prompt": "x"}, timeout=5)
        assert (resp.status_code, resp.json()) == (status, {"error": error}), path


def test_ollama_failure_midstream_leaves_a_partial_blob(standins):
    server = standins("ollama", env={**FAST_OLLAMA, "STANDIN_FAIL_MIDSTREAM": "tinyllama"})
    lines = pull_lines(server, "tinyllama")
    assert "error" in lines[-1] and any("completed" in line for line in lines[:-1])
    assert list((server.root / "blobs").glob("sha256-*-partial"))
    assert not (server.root / "manifests").exists()


def test_ollama_client_disconnect_cancels_and_next_pull_resumes(standins):
    chunk, size = 256 * 1024, 4 * 1024 * 1024  # the stand-in writes 256 KiB per progress line
    env = {"STANDIN_MODEL_BYTES": str(size), "STANDIN_PULL_CHUNK_SECONDS": "0.1"}
    server = standins("ollama", env=env)
    with requests.post(f"{server.url}/api/pull", json={"model": "tinyllama"}, stream=True) as resp:
        lines = resp.iter_lines()
        next(lines), next(lines)  # the manifest line and the first chunk, then hang up
    # One writer per blob, as upstream: the next pull starts on the model blob only once the
    # first has let go of it. Had the first carried on without its client, the next would
    # find the blob complete (completed == total at once); it resumes the partial instead.
    again = pull_lines(server, "tinyllama")
    model = [line for line in again if line.get("total") == size]
    assert chunk < model[0]["completed"] < size, model[0]
    assert again[-1] == {"status": "success"}
    assert not list((server.root / "blobs").glob("*-partial"))
    manifest = json.loads(
        (server.root / "manifests/registry.ollama.ai/library/tinyllama/latest").read_text()
    )
    model_blob = server.root / "blobs" / manifest["layers"][0]["digest"].replace(":", "-")
    assert "sha256:" + sha256_file(model_blob) == manifest["layers"][0]["digest"]


def test_ollama_show_missing_model_is_404(standins):
    server = standins("ollama", env=FAST_OLLAMA)
    resp = requests.post(f"{server.url}/api/show", json={"model": "absent:1b"}, timeout=5)
    assert resp.status_code == 404
    assert resp.json() == {"error": "model 'absent:1b' not found"}
    resp = requests.post(f"{server.url}/api/generate", json={"model": "absent", "prompt": "x"})
    assert resp.status_code == 404


def test_ollama_generate_ps_and_unload(standins):
    server = standins("ollama", env=FAST_OLLAMA)
    client = ollama.Client(host=server.url)
    client.pull("qwen2.5:0.5b")
    first = client.generate(model="qwen2.5:0.5b", prompt="say hello to the rig")
    assert first.done_reason == "stop" and first.load_duration >= 50_000_000
    assert first.eval_count > 0 and first.eval_duration > 0
    assert "5 words: say hello to the rig" in first.response
    streamed = "".join(
        c.response for c in client.generate("qwen2.5:0.5b", "say hello to the rig", stream=True)
    )
    assert streamed == first.response
    second = client.generate(model="qwen2.5:0.5b", prompt="again")
    assert not second.load_duration  # already loaded
    running = client.ps().models
    assert [m.model for m in running] == ["qwen2.5:0.5b"]
    assert running[0].size > 0 and running[0].expires_at is not None
    unload = client.generate(model="qwen2.5:0.5b", prompt="", keep_alive=0)
    assert unload.done_reason == "unload"
    assert client.ps().models == []
    chat = client.chat("qwen2.5:0.5b", messages=[{"role": "user", "content": "hi there"}])
    assert "2 words: hi there" in chat.message.content


def test_ollama_embed_is_deterministic(standins):
    server = standins("ollama", env=FAST_OLLAMA)
    client = ollama.Client(host=server.url)
    client.pull("nomic-embed-text")
    one = client.embed(model="nomic-embed-text", input="hello").embeddings
    two = client.embed(model="nomic-embed-text", input=["hello", "world"]).embeddings
    assert len(one) == 1 and len(one[0]) == 64
    assert two[0] == one[0] and two[1] != one[0]


def test_ollama_unloads_an_embedding_model_through_generate_but_runs_nothing_on_it(standins):
    """A worker swapping models unloads an embedding model with generate + keep_alive 0:
    upstream expires the runner before it checks the completion capability."""
    server = standins("ollama", env=FAST_OLLAMA)
    client = ollama.Client(host=server.url)
    client.pull("nomic-embed-text")
    client.embed(model="nomic-embed-text", input="load it")
    assert [m.model for m in client.ps().models] == ["nomic-embed-text:latest"]
    unload = client.generate(model="nomic-embed-text", prompt="", keep_alive=0)
    assert unload.done_reason == "unload" and client.ps().models == []
    for prompt in ("", "write a poem"):  # a preload, and a prompt: both need completion
        refused = requests.post(
            f"{server.url}/api/generate",
            json={"model": "nomic-embed-text", "prompt": prompt},
            timeout=5,
        )
        assert refused.status_code == 400
        assert refused.json() == {"error": '"nomic-embed-text" does not support generate'}


def test_ollama_answers_json_under_a_format_and_the_schema_s_shape(standins):
    """Upstream constrains sampling to the format's grammar: the answer always parses."""
    server = standins("ollama", env=FAST_OLLAMA)
    client = ollama.Client(host=server.url)
    client.pull("qwen2.5:0.5b")
    free = client.generate(model="qwen2.5:0.5b", prompt="caption this").response
    with pytest.raises(ValueError):
        json.loads(free)
    loose = json.loads(client.generate(model="qwen2.5:0.5b", prompt="x", format="json").response)
    assert isinstance(loose, dict)
    schema = {"type": "object", "required": ["caption", "tags"], "properties": {
        "caption": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        "topics": {"type": "array", "items": {"type": "object", "properties": {
            "title": {"type": "string"}, "start": {"type": "number"}}}}}}  # fmt: skip
    answer = client.chat("qwen2.5:0.5b", messages=[{"role": "user", "content": "caption it"}],
                         format=schema).message.content  # fmt: skip
    shaped = json.loads(answer)
    assert isinstance(shaped["caption"], str) and shaped["caption"]
    assert shaped["tags"] and all(isinstance(tag, str) for tag in shaped["tags"])
    assert all(isinstance(t["start"], int | float) for t in shaped["topics"])


def test_ollama_cli_list_is_a_healthcheck(standins):
    server = standins("ollama", env=FAST_OLLAMA)
    pull_lines(server, "tinyllama")
    cli = [sys.executable, str(helpers.STANDINS_DIR / "ollama" / "ollama_cli.py"), "list"]
    env = {"OLLAMA_HOST": f"127.0.0.1:{server.port}", "PATH": "/usr/bin:/bin"}
    listed = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=10)
    assert listed.returncode == 0 and "tinyllama:latest" in listed.stdout
    server.stop()
    down = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=10)
    assert down.returncode == 1 and "could not connect" in down.stderr


# ---------------------------------------------------------------------------- filehost
def test_filehost_range_and_resume(standins):
    server = standins("filehost", env={"STANDIN_DROP_AFTER_BYTES": "1000"})
    url = f"{server.url}/files/model.safetensors?size=5000"
    expected = requests.get(f"{server.url}/files/model.safetensors.sha256?size=5000").text.strip()
    head = requests.head(url, timeout=5)
    assert head.headers["Content-Length"] == "5000" and head.headers["Accept-Ranges"] == "bytes"
    with pytest.raises(requests.exceptions.RequestException):
        requests.get(url, timeout=5).raise_for_status()  # dropped after 1000 bytes
    first = requests.get(url, headers={"Range": "bytes=0-999"}, timeout=5)
    rest = requests.get(url, headers={"Range": "bytes=1000-"}, timeout=5)
    assert (first.status_code, rest.status_code) == (206, 206)
    assert rest.headers["Content-Range"] == "bytes 1000-4999/5000"
    assert hashlib.sha256(first.content + rest.content).hexdigest() == expected
    assert requests.get(url, timeout=5).content == first.content + rest.content
    assert requests.get(url, headers={"Range": "bytes=9000-"}, timeout=5).status_code == 416
