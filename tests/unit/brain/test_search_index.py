"""The search index (airig/brain/store/vectors.py): what an embed task with an ``index``
leaves there when it succeeds (leases.complete), replaced on a re-run, refused for another
model, marked untrusted from an untrusted rig; and the nearest-first order of a search."""

from __future__ import annotations

import brain_helpers as h
import pytest

from airig.brain.store import vectors

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

EMBED = "nomic-embed-text"
TRUSTED = vectors.Writer()  # an admin's plan (no owner recorded), a trusted rig
UNTRUSTED = vectors.Writer(untrusted=True)


def unit(*values: float) -> list[float]:
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


def entry(vector: list[float], text: str, source: str = "a.txt", locator: str | None = None):
    return vectors.Entry(vector=vector, snippet=text, source=source, locator=locator)


def test_nearest_comes_first_and_k_bounds_the_answer(tmp_path):
    path = tmp_path / "index" / "search.sqlite"
    entries = [
        entry(unit(1, 0, 0), "east", locator="00:00:01"),
        entry(unit(0, 1, 0), "north", locator="00:00:02"),
        entry(unit(1, 1, 0), "north-east", locator="00:00:03"),
        entry(unit(-1, 0, 0), "west", locator="00:00:04"),
    ]
    assert vectors.replace_task(path, "talks", EMBED, "p1", "embed", entries, TRUSTED, 1.0) == 4
    hits = vectors.nearest(path, "talks", unit(1, 0.1, 0), k=3)
    assert [hit["snippet"] for hit in hits] == ["east", "north-east", "north"]
    assert hits[0]["score"] > hits[1]["score"] > hits[2]["score"]
    assert hits[0]["locator"] == "00:00:01" and hits[0]["plan_id"] == "p1"
    assert hits[0]["task"] == "embed" and hits[0]["untrusted"] is False
    assert hits[0]["score"] == pytest.approx(1 - hits[0]["distance"])
    assert [hit["snippet"] for hit in vectors.nearest(path, "talks", unit(-1, 0, 0), 1)] == ["west"]
    assert vectors.nearest(path, "other", unit(1, 0, 0), 3) == []


def test_a_rerun_of_the_same_task_replaces_its_rows(tmp_path):
    path = tmp_path / "search.sqlite"
    old = [entry(unit(1, 0), "old a"), entry(unit(0, 1), "old b")]
    vectors.replace_task(path, "talks", EMBED, "p1", "embed", old, TRUSTED, 1.0)
    other = [entry(unit(1, 1), "other plan", source="b.txt")]
    vectors.replace_task(path, "talks", EMBED, "p2", "embed", other, TRUSTED, 1.0)
    vectors.replace_task(path, "talks", f"{EMBED}:latest", "p1", "embed",
                         [entry(unit(1, 0), "new")], TRUSTED, 2.0)  # fmt: skip
    snippets = sorted(hit["snippet"] for hit in vectors.nearest(path, "talks", unit(1, 0), 10))
    assert snippets == ["new", "other plan"]
    assert vectors.indexes(path) == [vectors.IndexInfo("talks", EMBED, 2, 2)]


def test_a_rerun_of_a_source_in_another_plan_replaces_its_rows(tmp_path):
    # a recipe run again on the same folder: the same pages, a new plan
    path = tmp_path / "search.sqlite"
    pages = [entry(unit(1, 0), f"page {n}", "in/a.pdf", f"page {n}") for n in (1, 2)]
    for plan in ("p1", "p2"):
        vectors.replace_task(path, "pdf", EMBED, plan, "pdfs__0__index", pages, TRUSTED, 1.0)
        vectors.replace_task(path, "pdf", EMBED, plan, "pdfs__1__index",
                             [entry(unit(0, 1), "b", "in/b.pdf")], TRUSTED, 1.0)  # fmt: skip
    hits = vectors.nearest(path, "pdf", unit(1, 0), 10)
    assert sorted(h["snippet"] for h in hits) == ["b", "page 1", "page 2"]
    assert {h["plan_id"] for h in hits} == {"p2"}
    assert vectors.indexes(path)[0].entries == 3
    # tasks of one plan that embed one file in parts keep each other's rows
    vectors.replace_task(path, "pdf", EMBED, "p2", "more", [entry(unit(1, 1), "page 3",
                         "in/a.pdf")], TRUSTED, 1.0)  # fmt: skip
    assert vectors.indexes(path)[0].entries == 4
    # an untrusted writer replaces only untrusted rows of the source
    vectors.replace_task(path, "pdf", EMBED, "p3", "x", [entry(unit(1, 0), "bad", "in/b.pdf")],
                         UNTRUSTED, 1.0)  # fmt: skip
    vectors.replace_task(path, "pdf", EMBED, "p4", "x", [entry(unit(1, 0), "bad 2", "in/b.pdf")],
                         UNTRUSTED, 1.0)  # fmt: skip
    snippets = sorted(h["snippet"] for h in vectors.nearest(path, "pdf", unit(1, 0), 10))
    assert snippets == ["b", "bad 2", "page 1", "page 2", "page 3"]


def test_another_model_or_other_dimensions_are_refused(tmp_path):
    path = tmp_path / "search.sqlite"
    vectors.replace_task(path, "talks", EMBED, "p1", "a", [entry(unit(1, 0), "x")], TRUSTED, 1.0)
    with pytest.raises(vectors.IndexRefused) as refused:
        vectors.replace_task(path, "talks", "mxbai-embed-large", "p1", "b",
                             [entry(unit(1, 0), "y")], TRUSTED, 1.0)  # fmt: skip
    assert refused.value.error_type == "index_model_mismatch"
    message = str(refused.value)
    assert EMBED in message and "mxbai-embed-large" in message and "index name" in message
    with pytest.raises(vectors.IndexRefused, match="2-dimension"):
        vectors.replace_task(path, "talks", EMBED, "p1", "b", [entry(unit(1, 0, 0), "y")],
                             vectors.Writer(), 1.0)  # fmt: skip
    # nothing of the refused tasks went in; another index takes the other model
    assert vectors.indexes(path) == [vectors.IndexInfo("talks", EMBED, 2, 1)]
    vectors.replace_task(path, "big", "mxbai-embed-large", "p1", "b",
                         [entry(unit(1, 0, 0), "y")], TRUSTED, 1.0)  # fmt: skip
    assert [i.name for i in vectors.indexes(path)] == ["big", "talks"]


def test_a_task_with_no_entries_removes_its_old_ones_and_creates_nothing(tmp_path):
    path = tmp_path / "search.sqlite"
    assert vectors.replace_task(path, "talks", EMBED, "p1", "a", [], TRUSTED, 1.0) == 0
    assert vectors.indexes(path) == []
    vectors.replace_task(path, "talks", EMBED, "p1", "a", [entry(unit(1, 0), "x")], TRUSTED, 1.0)
    vectors.replace_task(path, "talks", EMBED, "p1", "a", [], TRUSTED, 2.0)
    assert vectors.indexes(path) == [vectors.IndexInfo("talks", EMBED, 2, 0)]


def test_no_file_means_no_index(tmp_path):
    assert vectors.indexes(tmp_path / "index" / "search.sqlite") == []
    assert not (tmp_path / "index").exists()


@pytest.mark.parametrize(
    ("output", "why"),
    [
        ({"embeddings": [[1.0]]}, "no 'embeddings' and 'documents'"),
        ({"embeddings": [[1.0]], "documents": []}, "1 embeddings for 0 documents"),
        ({"embeddings": [["x"]], "documents": [{"text": "a"}]}, "not a list of numbers"),
        ({"embeddings": [[1.0]], "documents": [{"source": "a"}]}, "no 'text'"),
    ],
)
def test_an_output_that_does_not_pair_texts_with_vectors_is_refused(output, why):
    with pytest.raises(vectors.IndexRefused, match=why) as refused:
        vectors.entries_of(output)
    assert refused.value.error_type == "bad_output"


def embed_task(index="talks", **fields):
    payload = {"model": EMBED, "index": index, "documents": [{"text": "t", "source": "a.txt"}]}
    return {"id": "embed", "type": "embed", "payload": payload, **fields}


def output(*texts: str, model: str = EMBED, dims: int = 3) -> dict:
    vecs = [unit(*[1.0 + i + j for j in range(dims)]) for i, _ in enumerate(texts)]
    documents = [{"text": text, "source": "talk.mp4", "locator": f"00:0{i}:00"}
                 for i, text in enumerate(texts)]  # fmt: skip
    return {"embeddings": vecs, "model": model, "index": "talks", "documents": documents}


def trusted_worker(brain, name="w1"):
    def change(conn, outbox, now):
        conn.execute(
            """INSERT INTO workers (id, token_hash, classes_json, gpus_json, registered_at,
                   last_heartbeat) VALUES (?, 'x', '["script"]', '[]', 1, 1)""",
            (name,),
        )

    brain.write(change)


def run_embed(brain, plan_id, out, now=1001.0):
    assert h.claim(brain, now, classes=("script",), models=(f"{EMBED}:latest",)) is not None
    h.do(brain, plan_id, "embed", "complete", now, output=out)
    return h.row(brain, plan_id, "embed")


def test_a_succeeding_embed_task_fills_its_index(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_DATA_DIR=str(tmp_path / "data"))
    trusted_worker(brain)
    plan_id = h.submit(brain, [embed_task()])
    task = run_embed(brain, plan_id, output("first words", "second words"))
    assert task["state"] == "SUCCEEDED"
    path = tmp_path / "data" / "index" / "search.sqlite"
    assert vectors.indexes(path) == [vectors.IndexInfo("talks", EMBED, 3, 2)]
    hits = vectors.nearest(path, "talks", unit(1, 2, 3), 5)
    assert hits[0]["snippet"] == "first words" and hits[0]["source"] == "talk.mp4"
    assert hits[0]["plan_id"] == plan_id and hits[0]["untrusted"] is False


def test_an_embed_task_without_an_index_leaves_no_file(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_DATA_DIR=str(tmp_path / "data"))
    task = {"id": "embed", "type": "embed", "payload": {"model": EMBED, "input": "x"}}
    plan_id = h.submit(brain, [task])
    done = run_embed(brain, plan_id, {"embeddings": [[1.0, 0.0]], "model": EMBED})
    assert done["state"] == "SUCCEEDED"
    assert not (tmp_path / "data" / "index").exists()


def test_another_model_than_the_index_fails_the_task_for_good(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_DATA_DIR=str(tmp_path / "data"))
    path = tmp_path / "data" / "index" / "search.sqlite"
    vectors.replace_task(path, "talks", "mxbai-embed-large", "old", "e",
                         [entry(unit(1, 0, 0), "x")], TRUSTED, 1.0)  # fmt: skip
    plan_id = h.submit(brain, [embed_task(), h.noop("after", ["embed"])])
    task = run_embed(brain, plan_id, output("words"))
    assert task["state"] == "FAILED"
    assert task["error_type"] == "index_model_mismatch"
    assert "mxbai-embed-large" in task["error"] and EMBED in task["error"]
    assert h.state_of(brain, plan_id)["after"] == "UPSTREAM_FAILED"
    assert vectors.indexes(path)[0].entries == 1


def test_an_untrusted_rigs_vectors_are_indexed_marked_untrusted(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_DATA_DIR=str(tmp_path / "data"))
    path = tmp_path / "data" / "index" / "search.sqlite"
    plan_id = h.submit(brain, [embed_task()])  # w1 never registered: not trusted
    task = run_embed(brain, plan_id, output("words"))
    assert task["state"] == "FAILED" and task["error_type"] == "index_untrusted"
    assert vectors.indexes(path) == []  # an untrusted output never creates an index
    vectors.replace_task(path, "talks", EMBED, "p0", "e", [entry(unit(-1, 0, 0), "first")],
                         TRUSTED, 1.0)  # fmt: skip
    plan_id = h.submit(brain, [embed_task()])
    task = run_embed(brain, plan_id, output("words"))
    assert task["state"] == "SUCCEEDED" and task["tainted_output"] == 1
    hits = vectors.nearest(path, "talks", unit(1, 2, 3), 5)
    assert [(hit["snippet"], hit["untrusted"]) for hit in hits] == [
        ("words", True),
        ("first", False),
    ]


def test_an_unwritable_index_is_retried(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "index").write_text("a file where the folder should be")
    brain = h.make_brain(tmp_path, BRAIN_DATA_DIR=str(data))
    trusted_worker(brain)
    plan_id = h.submit(brain, [embed_task()])
    task = run_embed(brain, plan_id, output("words"))
    assert task["state"] == "RETRY_WAIT" and task["error_type"] == "index_unavailable"
