"""Search what was indexed, end to end: a real brain and worker, the Ollama stand-in (whose
vectors bring texts that share words together). Documents given as a list and as the JSON
text a template inserts are embedded by the worker, indexed by the brain, and a query built
from a known document's words finds it first, the query embedded by the brain itself."""

from __future__ import annotations

import pytest
import requests
from brain_procs import ADMIN_TOKEN, Cluster
from standins.conftest_helpers import start_standin

EMBED = "nomic-embed-text"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
DOCS = [
    {"text": "the cache is invalidated when a model is pulled", "source": "talks/a.mp4",
     "locator": "00:03:10"},
    {"text": "thermal limits of the graphics cards", "source": "talks/a.mp4",
     "locator": "00:07:45"},
    {"text": "budget of the external provider per month", "source": "docs/b.pdf",
     "locator": "p. 4"},
]  # fmt: skip


@pytest.fixture
def ollama_url(tmp_path):
    ollama = start_standin("ollama", tmp_path / "ollama", {"STANDIN_MODEL_BYTES": "4096"})
    try:
        body = {"model": EMBED, "stream": False}
        requests.post(f"{ollama.url}/api/pull", json=body, timeout=30).raise_for_status()
        yield ollama.url
    finally:
        ollama.stop()


def test_a_query_finds_what_an_embed_task_indexed(tmp_path, ollama_url):
    root = tmp_path / "cluster"
    cluster = Cluster(root, services={"OLLAMA_URL": ollama_url},
                      brain_env={"BRAIN_DATA_DIR": str(root / "data"),
                                 "BRAIN_OLLAMA_URL": ollama_url})  # fmt: skip
    root.mkdir()
    plan = {
        "name": "index talks",
        "tasks": [
            {"id": "embed", "type": "embed", "model": EMBED,
             "payload": {"index": "talks", "documents": DOCS[:2]}},
            {"id": "note", "type": "noop", "payload": {"echo": {"documents": DOCS[2:]}}},
            {"id": "more", "type": "embed", "model": EMBED, "depends_on": ["note"],
             "payload": {"index": "talks", "documents": "{{ tasks.note.output.echo }}"}},
        ],
    }  # fmt: skip
    try:
        cluster.start_brain()
        cluster.start_worker("gpu0", "script,cpu")
        submitted = cluster.submit(plan)
        view = cluster.wait_plan(submitted["id"], 60)
        assert view["status"] == "succeeded", [(t["id"], t["error"]) for t in view["tasks"]]
        indexes = cluster.get("/v1/search/indexes")["indexes"]
        assert indexes == [{"name": "talks", "model": EMBED, "dims": 64, "entries": 3}]
        for document in DOCS:
            query = " ".join(document["text"].split()[1:4])
            answer = requests.post(f"{cluster.url}/v1/search", headers=ADMIN, timeout=10,
                                   json={"query": query, "index": "talks", "k": 3})  # fmt: skip
            assert answer.status_code == 200, answer.text
            best = answer.json()["results"][0]
            assert best["snippet"] == document["text"], (query, answer.json())
            assert best["source"] == document["source"]
            assert best["locator"] == document["locator"]
        # a second plan over the same sources (a recipe run again) replaces their entries
        # instead of adding a copy of each (issue 35 §3)
        again = cluster.submit(plan)
        cluster.wait_plan(again["id"], 60)
        assert cluster.get("/v1/search/indexes")["indexes"][0]["entries"] == 3
    finally:
        cluster.stop()
