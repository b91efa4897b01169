"""``POST /v1/search`` and ``GET /v1/search/indexes``: the query embedded with the index's
model (here the Ollama stand-in's own embedding function: words shared with a document
bring it near), the nearest first, and every refusal in the one error body."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import brain_helpers as h
import ollama
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.api.routes import search as search_route
from airig.brain.store import vectors

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
EMBED = "nomic-embed-text"
RUNTIME = Path(__file__).resolve().parents[2] / "standins" / "ollama" / "runtime.py"


def standin_embedding():
    spec = importlib.util.spec_from_file_location("standin_ollama_runtime", RUNTIME)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.embedding


embedding = standin_embedding()
TALK = [
    ("Welcome to the talk about GPU scheduling", "00:00:05"),
    ("We measured the thermal limits of the cards", "00:04:10"),
    ("Questions about the budget of the external tier", "00:31:00"),
]


@pytest.fixture
def data(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def client(tmp_path, data, monkeypatch):
    asked: list[tuple[str, str]] = []

    def fake(url: str, model: str, text: str) -> list[float]:
        asked.append((model, text))
        return embedding(model, text)

    monkeypatch.setattr(search_route, "embed_query", fake)
    settings = h.make_settings(tmp_path, BRAIN_DATA_DIR=str(data))
    with TestClient(create_app(settings)) as test_client:
        test_client.asked = asked  # type: ignore[attr-defined]
        yield test_client


def build(data, name="talks", model=EMBED, texts=TALK, untrusted=False):
    entries = [
        vectors.Entry(embedding(model, text), text, "talks/gpu.mp4", locator)
        for text, locator in texts
    ]
    vectors.replace_task(vectors.index_path(data), name, model, "p1", "embed", entries,
                         vectors.Writer(untrusted=untrusted), 1.0)  # fmt: skip


def refusal(answer, status):
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"detail", "retryable", "retry_after_s"}
    return body["detail"]


def test_a_query_finds_the_document_that_shares_its_words(client, data):
    build(data)
    answer = client.post("/v1/search", headers=ADMIN, json={"query": "thermal limits", "k": 2})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["index"] == "talks" and body["model"] == EMBED
    assert len(body["results"]) == 2
    best = body["results"][0]
    assert best["snippet"] == TALK[1][0] and best["locator"] == "00:04:10"
    assert best["source"] == "talks/gpu.mp4" and best["plan_id"] == "p1"
    assert best["task"] == "embed" and best["untrusted"] is False
    assert best["score"] >= body["results"][1]["score"]
    assert client.asked == [(EMBED, "thermal limits")]  # the index's model embeds the query


def test_indexes_are_listed_with_model_and_entries(client, data):
    assert client.get("/v1/search/indexes", headers=ADMIN).json() == {"indexes": []}
    build(data)
    answer = client.get("/v1/search/indexes", headers=ADMIN).json()
    assert answer == {"indexes": [{"name": "talks", "model": EMBED, "dims": 64, "entries": 3}]}


def test_untrusted_entries_say_so(client, data):
    build(data, texts=[("a trusted first entry", "00:00:01")])  # untrusted never creates
    build(data, untrusted=True)
    hits = client.post("/v1/search", headers=ADMIN, json={"query": "budget"}).json()["results"]
    assert hits and all(hit["untrusted"] for hit in hits)


def test_no_index_yet_says_how_one_is_built(client):
    detail = refusal(client.post("/v1/search", headers=ADMIN, json={"query": "x"}), 404)
    assert "embed task" in detail and "index" in detail


def test_an_unknown_index_lists_the_known_ones(client, data):
    build(data)
    build(data, name="papers")
    body = {"query": "x", "index": "nope"}
    detail = refusal(client.post("/v1/search", headers=ADMIN, json=body), 404)
    assert "nope" in detail and "papers, talks" in detail


def test_another_model_than_the_index_is_refused(client, data):
    build(data)
    body = {"query": "x", "model": "mxbai-embed-large"}
    detail = refusal(client.post("/v1/search", headers=ADMIN, json=body), 422)
    assert EMBED in detail and "mxbai-embed-large" in detail
    assert client.asked == []
    same = client.post("/v1/search", headers=ADMIN, json={"query": "x", "model": f"{EMBED}:latest"})
    assert same.status_code == 200
    build(data, name="more")  # two indexes of one model, none named: still checked
    detail = refusal(client.post("/v1/search", headers=ADMIN, json=body), 422)
    assert "the indexes were built with" in detail


def test_indexes_of_two_models_need_a_name(client, data):
    build(data)
    build(data, name="big", model="mxbai-embed-large")
    detail = refusal(client.post("/v1/search", headers=ADMIN, json={"query": "x"}), 422)
    assert "big, talks" in detail
    named = client.post("/v1/search", headers=ADMIN, json={"query": "x", "index": "big"})
    assert named.json()["model"] == "mxbai-embed-large"


def test_one_model_searches_every_index(client, data):
    build(data, texts=TALK[:1])
    build(data, name="more", texts=TALK[1:])
    body = client.post("/v1/search", headers=ADMIN, json={"query": "thermal", "k": 3}).json()
    assert body["index"] == "more,talks" and len(body["results"]) == 3
    assert body["results"][0]["snippet"] == TALK[1][0]


@pytest.mark.parametrize(
    "body",
    [{"query": ""}, {"query": "x", "k": 0}, {"query": "x", "k": 101}, {"query": "x", "index": "A!"},
     {"query": "x", "extra": 1}, {}],
)  # fmt: skip
def test_bad_queries_are_refused(client, data, body):
    build(data)
    refusal(client.post("/v1/search", headers=ADMIN, json=body), 422)
    assert client.asked == []


def test_search_needs_a_submitters_token(client, data):
    build(data)
    assert client.post("/v1/search", json={"query": "x"}).status_code == 401
    boot = {"Authorization": "Bearer bootstrap-secret-token"}
    assert client.post("/v1/search", headers=boot, json={"query": "x"}).status_code == 403
    assert client.get("/v1/search/indexes", headers=boot).status_code == 403


def test_ollama_down_or_refusing_is_one_line(client, data, monkeypatch):
    build(data)

    def down(url, model, text):
        raise ConnectionError("refused")

    monkeypatch.setattr(search_route, "embed_query", down)
    detail = refusal(client.post("/v1/search", headers=ADMIN, json={"query": "x"}), 503)
    assert "unreachable" in detail

    def missing(url, model, text):
        raise ollama.ResponseError(f"model '{model}' not found", 404)

    monkeypatch.setattr(search_route, "embed_query", missing)
    detail = refusal(client.post("/v1/search", headers=ADMIN, json={"query": "x"}), 502)
    assert EMBED in detail
