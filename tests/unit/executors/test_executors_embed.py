"""The embed executor with an ``index``: the payload's ``documents`` (a list, or the JSON
text a template inserts) are embedded in order, in batches, and come back beside their
vectors for the brain to index."""

from __future__ import annotations

import json

import ollama
import pytest
from pydantic import ValidationError

from airig.common.task_schemas import EmbedPayload
from airig.executors import embed, ollama_common
from airig.executors.base import run_task

DOCS = [
    {"text": "first", "source": "talks/a.mp4", "locator": "00:00:05"},
    {"text": "second", "source": "docs/b.pdf", "locator": 7},
    {"text": "third"},
]


class FakeEmbed:
    def __init__(self):
        self.inputs: list = []

    def embed(self, **kwargs):
        self.inputs.append(kwargs["input"])
        texts = [kwargs["input"]] if isinstance(kwargs["input"], str) else kwargs["input"]
        vectors = [[float(len(text)), 1.0] for text in texts]
        return ollama.EmbedResponse(model="nomic-embed-text:latest", embeddings=vectors,
                                    total_duration=2_000_000, load_duration=1_000_000)  # fmt: skip

    def close(self):
        pass


@pytest.fixture
def fake(monkeypatch):
    client = FakeEmbed()
    monkeypatch.setattr(ollama_common, "make_client", lambda ctx: client)
    return client


@pytest.mark.parametrize(
    "documents",
    [DOCS, json.dumps(DOCS), json.dumps({"documents": DOCS}), {"documents": DOCS}],
    ids=["list", "json-list", "json-object", "object"],
)
def test_documents_are_embedded_in_order_and_returned(make_ctx, fake, documents):
    payload = {"model": "nomic-embed-text", "index": "talks", "documents": documents}
    result = run_task("embed", payload, make_ctx())
    assert fake.inputs == [["first", "second", "third"]]
    assert result.output["embeddings"] == [[5.0, 1.0], [6.0, 1.0], [5.0, 1.0]]
    assert result.output["index"] == "talks"
    assert result.output["model"] == "nomic-embed-text:latest"
    assert result.output["documents"] == DOCS
    assert result.metrics["vectors"] == 3


def test_many_documents_go_in_batches(make_ctx, fake, monkeypatch):
    monkeypatch.setattr(embed, "BATCH", 2)
    payload = {"model": "e", "index": "talks", "documents": DOCS}
    result = run_task("embed", payload, make_ctx())
    assert fake.inputs == [["first", "second"], ["third"]]
    assert len(result.output["embeddings"]) == 3
    assert result.metrics["run_ms"] == 4.0  # summed over the calls


def test_plain_input_is_unchanged(make_ctx, fake):
    result = run_task("embed", {"model": "e", "input": "hello"}, make_ctx())
    assert fake.inputs == ["hello"]
    assert set(result.output) == {"embeddings", "model"}


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ({"model": "e", "index": "talks"}, "give 'documents'"),
        ({"model": "e", "index": "talks", "input": "x", "documents": DOCS}, "not 'input'"),
        ({"model": "e", "documents": DOCS}, "give 'index' too"),
        ({"model": "e", "index": "Talks!", "documents": DOCS}, "pattern"),
        ({"model": "e", "index": "talks", "documents": "[not json"}, "not the JSON"),
        ({"model": "e", "index": "talks", "documents": "plain words"}, "documents"),
        ({"model": "e", "index": "talks", "documents": [{"source": "a"}]}, "text"),
        ({"model": "e", "index": "talks", "documents": [{"text": "a", "x": 1}]}, "extra"),
        ({"model": "e"}, "give 'input'"),
    ],
)
def test_bad_documents_name_the_problem(payload, says):
    with pytest.raises(ValidationError) as error:
        EmbedPayload.model_validate(payload)
    assert says in str(error.value)


def test_no_documents_embed_nothing(make_ctx, fake):
    payload = {"model": "e", "index": "talks", "documents": "[]"}
    result = run_task("embed", payload, make_ctx())
    assert fake.inputs == []
    assert result.output == {"embeddings": [], "model": "e", "index": "talks", "documents": []}


def test_a_template_not_yet_filled_passes_submission():
    payload = {"model": "e", "index": "talks", "documents": "{{ tasks.note.output.documents }}"}
    assert EmbedPayload.model_validate(payload).documents == payload["documents"]
