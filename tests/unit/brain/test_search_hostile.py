"""The search index against what a careless disk, an untrusted rig or another submitter
brings (issue 36 §3): garbage at ``index/search.sqlite`` is a 503 ``index_unavailable``
with the fix (never a 500, never the loss of an exchange's other reports), a vector with
no direction is refused at completion and skipped at query time, an untrusted output
never creates an index or names its model, and a submitter sees only its own plans'
entries and writes only into its own indexes."""

from __future__ import annotations

import os
import sqlite3

import apsw
import brain_helpers as h
import pytest
import sqlite_vec
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.api.fastpath import ExchangeFastPath
from airig.brain.api.routes import search as search_route
from airig.brain.store import vectors

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
EMBED = "nomic-embed-text"
TRUSTED = vectors.Writer()
MOVE_ASIDE = "move index/search.sqlite"


def unit(*values: float) -> list[float]:
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


def entry(vector, text, source="a.txt", locator=None):
    return vectors.Entry(vector=vector, snippet=text, source=source, locator=locator)


def a_valid_index(path):
    vectors.replace_task(path, "talks", EMBED, "p0", "e", [entry(unit(1, 0), "x")], TRUSTED, 1.0)


def make_garbage(kind: str, data):
    """What an older kit, a crash or a user may leave at the index's path."""
    path = vectors.index_path(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "random bytes":
        path.write_bytes(os.urandom(8192))
    elif kind == "truncated":
        a_valid_index(path)
        for wal in path.parent.glob("search.sqlite-*"):
            wal.unlink()
        path.write_bytes(path.read_bytes()[:1500])
    elif kind == "other tables":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE notes (body TEXT)")
            conn.execute("INSERT INTO notes VALUES ('keep me')")
        conn.close()
    elif kind == "other columns":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE indexes (x)")
        conn.close()
    elif kind == "a directory":
        path.mkdir()
    elif kind == "a link":
        elsewhere = data.parent / "elsewhere.sqlite"
        a_valid_index(elsewhere)
        path.symlink_to(elsewhere)
    elif kind == "a dangling link":
        path.symlink_to(data.parent / "nothing-there")
    elif kind == "a linked folder":
        path.parent.rmdir()
        (data.parent / "elsewhere").mkdir()
        path.parent.symlink_to(data.parent / "elsewhere")
    return path


GARBAGE = ["random bytes", "truncated", "other tables", "other columns", "a directory",
           "a link", "a dangling link", "a linked folder"]  # fmt: skip


@pytest.mark.parametrize("kind", GARBAGE)
def test_garbage_at_the_index_path_is_one_line_with_the_fix(tmp_path, kind):
    path = make_garbage(kind, tmp_path / "data")
    before = path.read_bytes() if kind == "other tables" else None
    calls = [
        lambda: vectors.indexes(path),
        lambda: vectors.nearest(path, "talks", unit(1, 0), 3),
        lambda: vectors.tasks_with_entries(path, [("talks", "p0", "e")]),
        lambda: vectors.replace_task(path, "talks", EMBED, "p1", "e", [entry(unit(1, 0), "y")],
                                     TRUSTED, 2.0),
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(vectors.IndexUnavailable) as failed:
            call()
        assert MOVE_ASIDE in str(failed.value) and "\n" not in str(failed.value)
    if before is not None:  # another program's database is left as it was
        assert path.read_bytes() == before
    if kind == "a link":  # the file it points to is not written through the link
        assert vectors.indexes(tmp_path / "elsewhere.sqlite")[0].entries == 1


def test_a_busy_or_full_index_says_so_not_move_aside(tmp_path):
    from airig.brain.store import index_file

    assert "try again" in index_file.fix_for(apsw.BusyError("locked"))
    assert "full" in index_file.fix_for(apsw.FullError("full"))
    assert "read-only" in index_file.fix_for(OSError(30, "Read-only file system"))
    assert MOVE_ASIDE in index_file.fix_for(apsw.NotADBError("x"))


def test_an_index_of_an_older_kit_gains_its_owner_columns(tmp_path):
    path = tmp_path / "search.sqlite"
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.execute("""
        CREATE TABLE indexes (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
            model TEXT NOT NULL, dims INTEGER NOT NULL, created REAL NOT NULL);
        CREATE TABLE entries (id INTEGER PRIMARY KEY, index_id INTEGER NOT NULL,
            plan_id TEXT NOT NULL, task_key TEXT NOT NULL, source TEXT, locator TEXT,
            snippet TEXT NOT NULL, untrusted INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL);
        INSERT INTO indexes VALUES (1, 'talks', 'nomic-embed-text', 2, 1.0);
        CREATE VIRTUAL TABLE vec_1 USING vec0(embedding float[2] distance_metric=cosine);
        INSERT INTO entries VALUES (1, 1, 'old', 'e', 'a.txt', NULL, 'old words', 0, 1.0);
    """)
    conn.execute("INSERT INTO vec_1 (rowid, embedding) VALUES (1, ?)",
                 (sqlite_vec.serialize_float32([1.0, 0.0]),))  # fmt: skip
    conn.close()
    assert vectors.indexes(path) == [vectors.IndexInfo("talks", EMBED, 2, 1)]
    # rows of no owner are the admin's alone
    assert vectors.indexes(path, "token:alice", admin=False) == []
    assert [h["snippet"] for h in vectors.nearest(path, "talks", unit(1, 0), 3)] == ["old words"]
    assert vectors.nearest(path, "talks", unit(1, 0), 3, "token:alice", admin=False) == []


# Vectors with no direction.


@pytest.mark.parametrize(
    "bad", [[0.0, 0.0, 0.0], [float("nan"), 1.0, 0.0], [float("inf"), 1.0, 0.0], [10**400, 1, 0]]
)
def test_a_vector_with_no_direction_is_refused_naming_its_document(tmp_path, bad):
    path = tmp_path / "search.sqlite"
    documents = [{"text": "fine", "source": "a.pdf"}, {"text": "bad", "source": "b.pdf",
                                                        "locator": "page 7"}]  # fmt: skip
    entries = vectors.entries_of({"embeddings": [[1.0, 0.0, 0.0], bad], "documents": documents})
    with pytest.raises(vectors.IndexRefused) as refused:
        vectors.replace_task(path, "talks", EMBED, "p1", "e", entries, TRUSTED, 1.0)
    assert refused.value.error_type == "bad_output"
    assert "document 2 ('b.pdf', 'page 7')" in str(refused.value)
    assert "no direction" in str(refused.value)
    assert vectors.indexes(path) == []  # nothing of the task went in


def test_a_large_but_finite_vector_is_indexed(tmp_path):
    # 1e39 does not fit a float32: stored as its unit vector, it does
    path = tmp_path / "search.sqlite"
    rows = [entry([1e39, 0.0], "big"), entry([0.0, 3e-45], "tiny")]
    vectors.replace_task(path, "talks", EMBED, "p1", "e", rows, TRUSTED, 1.0)
    hits = vectors.nearest(path, "talks", [1.0, 0.0], 2)
    assert [hit["snippet"] for hit in hits] == ["big", "tiny"]
    assert hits[0]["distance"] == pytest.approx(0.0, abs=1e-6)


def store_raw(path, rows):
    """Vectors as an older kit stored them, unchecked."""
    a_valid_index(path)
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    for n, (vector, text) in enumerate(rows, start=100):
        conn.execute("""INSERT INTO entries (id, index_id, plan_id, task_key, snippet,
                        created) VALUES (?, 1, 'old', 'e', ?, 1.0)""", (n, text))  # fmt: skip
        conn.execute("INSERT INTO vec_1 (rowid, embedding) VALUES (?, ?)",
                     (n, sqlite_vec.serialize_float32(vector)))  # fmt: skip
    conn.close()


def test_rows_with_no_distance_are_skipped_and_k_still_filled(tmp_path):
    path = tmp_path / "search.sqlite"
    zeros = [([0.0, 0.0], f"zero {n}") for n in range(30)]
    store_raw(path, [*zeros, ([float("nan"), 1.0], "nan"), (unit(1, 1), "diagonal"),
                     (unit(0, 1), "north")])  # fmt: skip
    hits = vectors.nearest(path, "talks", unit(1, 0.1), 3)
    assert [hit["snippet"] for hit in hits] == ["x", "diagonal", "north"]
    assert all(isinstance(hit["distance"], float) for hit in hits)
    assert vectors.nearest(path, "talks", [0.0, 0.0], 3) == []  # a query with no direction


# Through the brain: completions, exchanges, the HTTP answers.


def embed_task(index="talks", key="embed"):
    payload = {"model": EMBED, "index": index, "documents": [{"text": "t", "source": "a.txt"}]}
    return {"id": key, "type": "embed", "payload": payload}


def embed_output(*vecs, model=EMBED, source="talk.mp4"):
    documents = [{"text": f"text {n}", "source": source, "locator": f"00:0{n}:00"}
                 for n, _ in enumerate(vecs)]  # fmt: skip
    return {"embeddings": [list(v) for v in vecs], "model": model, "index": "talks",
            "documents": documents}  # fmt: skip


@pytest.fixture(params=["fastapi-route", "fast-path"])
def client(tmp_path, request, monkeypatch):
    data = tmp_path / "data"
    settings = h.make_settings(tmp_path, BRAIN_DATA_DIR=str(data), BRAIN_CLAIM_WAIT_S=0)
    app = create_app(settings)
    monkeypatch.setattr(search_route, "embed_query", lambda url, model, text: unit(1, 0.2))
    served = ExchangeFastPath(app) if request.param == "fast-path" else app
    with TestClient(served) as made:
        made.data = data
        yield made


def register(client, name="w1"):
    answer = client.post("/v1/workers/register", headers=BOOT,
                         json={"name": name, "classes": ["script", "cpu"]})  # fmt: skip
    assert answer.status_code in (200, 201), answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def submit(client, tasks, token=ADMIN):
    answer = client.post("/v1/plans", headers=token, json={"name": "p", "tasks": tasks})
    assert answer.status_code in (200, 201), answer.text
    return answer.json()["id"]


def claim_all(client, worker, n):
    claim = {"wait_s": 0, "max_tasks": n, "resident_models": [f"{EMBED}:latest"]}
    answer = client.post("/v1/exchange", headers=worker, json={"reports": [], "claim": claim})
    assert answer.status_code == 200, answer.text
    return {a["key"]: a for a in answer.json()["assignments"]}


def complete(task, output):
    return {"action": "complete", "task_id": task["task_id"], "attempt": task["attempt"],
            "lease_id": task["lease_id"], "output": output}  # fmt: skip


def tasks_of(client, plan_id):
    view = client.get(f"/v1/plans/{plan_id}", headers=ADMIN).json()
    return {t["id"]: t for t in view["tasks"]}


def run_embed(client, worker, plan_id, output):
    task = claim_all(client, worker, 1)["embed"]
    answer = client.post("/v1/exchange", headers=worker,
                         json={"reports": [complete(task, output)]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return tasks_of(client, plan_id)["embed"]


@pytest.mark.parametrize("kind", ["random bytes", "truncated", "other tables", "a link"])
def test_a_garbage_index_never_sinks_the_other_reports_of_an_exchange(client, kind):
    make_garbage(kind, client.data)
    worker = register(client)
    plan_id = submit(client, [embed_task(), {"id": "other", "type": "noop", "payload": {}}])
    held = claim_all(client, worker, 2)
    assert set(held) == {"embed", "other"}
    reports = [complete(held["embed"], embed_output(unit(1, 0))),
               complete(held["other"], {"text": "done"})]  # fmt: skip
    answer = client.post("/v1/exchange", headers=worker, json={"reports": reports})
    assert answer.status_code == 200, answer.text
    assert [r["status"] for r in answer.json()["results"]] == [200, 200]
    tasks = tasks_of(client, plan_id)
    assert tasks["other"]["state"] == "SUCCEEDED"
    assert tasks["embed"]["state"] == "RETRY_WAIT"
    assert tasks["embed"]["error_type"] == "index_unavailable"
    assert MOVE_ASIDE in tasks["embed"]["error"]


@pytest.mark.parametrize("kind", GARBAGE)
def test_a_garbage_index_is_a_503_with_the_fix_for_search_and_the_list(client, kind):
    make_garbage(kind, client.data)
    for answer in (client.get("/v1/search/indexes", headers=ADMIN),
                   client.post("/v1/search", headers=ADMIN, json={"query": "x"})):  # fmt: skip
        assert answer.status_code == 503, answer.text
        body = answer.json()
        assert set(body) == {"detail", "retryable", "retry_after_s"}
        assert body["detail"].startswith("index_unavailable: ")
        assert MOVE_ASIDE in body["detail"]


def test_a_vector_with_no_direction_fails_its_task_for_good(client):
    worker = register(client)
    plan_id = submit(client, [embed_task()])
    task = run_embed(client, worker, plan_id, embed_output(unit(1, 0), (0.0, 0.0)))
    assert task["state"] == "FAILED" and task["error_type"] == "bad_output"
    assert "document 2 ('talk.mp4', '00:01:00')" in task["error"]
    assert vectors.indexes(vectors.index_path(client.data)) == []


def test_a_query_vector_with_no_direction_is_a_502(client, monkeypatch):
    a_valid_index(vectors.index_path(client.data))
    monkeypatch.setattr(search_route, "embed_query", lambda url, model, text: [0.0, 0.0])
    answer = client.post("/v1/search", headers=ADMIN, json={"query": "x"})
    assert answer.status_code == 502 and "no direction" in answer.json()["detail"]


# Trust: the payload names the model; untrusted output never creates an index.


def join_untrusted(client, name="rig2"):
    made = client.post("/v1/tokens", headers=ADMIN,
                       json={"scope": "join", "name": "rig2", "trust": "untrusted"})  # fmt: skip
    assert made.status_code == 201, made.text
    join = {"Authorization": f"Bearer {made.json()['token']}"}
    answer = client.post("/v1/workers/register", headers=join,
                         json={"name": name, "classes": ["script"]})  # fmt: skip
    assert answer.status_code in (200, 201), answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def test_an_untrusted_rig_never_creates_an_index(client):
    rig = join_untrusted(client)
    plan_id = submit(client, [embed_task()])
    task = run_embed(client, rig, plan_id, embed_output(unit(1, 0), model="evil-embed"))
    assert task["state"] == "FAILED"
    assert task["error_type"] in ("index_untrusted", "index_model_mismatch")
    path = vectors.index_path(client.data)
    assert vectors.indexes(path) == []
    plan_id = submit(client, [embed_task()])
    task = run_embed(client, rig, plan_id, embed_output(unit(1, 0)))
    assert task["state"] == "FAILED" and task["error_type"] == "index_untrusted"
    assert "untrusted output never creates an index" in task["error"]
    assert vectors.indexes(path) == []
    # once a trusted task made it, the rig's entries go in, marked untrusted
    local = register(client)
    plan_id = submit(client, [embed_task()])
    assert run_embed(client, local, plan_id, embed_output(unit(1, 0)))["state"] == "SUCCEEDED"
    plan_id = submit(client, [embed_task()])
    assert run_embed(client, rig, plan_id, embed_output(unit(0, 1)))["state"] == "SUCCEEDED"
    hits = vectors.nearest(path, "talks", unit(0, 1), 5)
    assert [hit["untrusted"] for hit in hits] == [True, False]


def test_the_index_model_comes_from_the_payload_not_the_output(client):
    worker = register(client)
    plan_id = submit(client, [embed_task()])
    task = run_embed(client, worker, plan_id, embed_output(unit(1, 0), model="evil-embed"))
    assert task["state"] == "FAILED" and task["error_type"] == "index_model_mismatch"
    assert "evil-embed" in task["error"] and EMBED in task["error"]
    path = vectors.index_path(client.data)
    assert vectors.indexes(path) == []
    output = embed_output(unit(1, 0))
    del output["model"]  # an output that does not say: the payload's model
    plan_id = submit(client, [embed_task()])
    assert run_embed(client, worker, plan_id, output)["state"] == "SUCCEEDED"
    assert [info.model for info in vectors.indexes(path)] == [EMBED]


# Ownership: a submitter's plans, entries and indexes.


def submit_token(client, name):
    answer = client.post("/v1/tokens", headers=ADMIN, json={"scope": "submit", "name": name})
    assert answer.status_code == 201, answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def search(client, token, **body):
    return client.post("/v1/search", headers=token, json={"query": "x", **body})


def test_a_submitter_sees_and_writes_only_its_own_entries_and_indexes(client):
    worker = register(client)
    alice, mallory = submit_token(client, "alice"), submit_token(client, "alice")
    plan_a = submit(client, [embed_task()], alice)
    assert run_embed(client, worker, plan_a, embed_output(unit(1, 0)))["state"] == "SUCCEEDED"
    # another owner cannot add to alice's index (nor replace her rows of a source)
    plan_m = submit(client, [embed_task()], mallory)
    task = run_embed(client, worker, plan_m, embed_output(unit(1, 0.2)))
    assert task["state"] == "FAILED" and task["error_type"] == "index_owner_mismatch"
    # mallory sees no index at all; alice sees hers
    assert client.get("/v1/search/indexes", headers=mallory).json() == {"indexes": []}
    assert search(client, mallory).status_code == 404
    assert search(client, mallory, index="talks").status_code == 404
    listed = client.get("/v1/search/indexes", headers=alice).json()["indexes"]
    assert [(i["name"], i["entries"]) for i in listed] == [("talks", 1)]
    # the admin's plan adds to alice's index: the admin sees both entries, alice hers
    plan_admin = submit(client, [embed_task()])
    done = run_embed(client, worker, plan_admin, embed_output(unit(1, 0.2), source="x.mp4"))
    assert done["state"] == "SUCCEEDED"
    mine = search(client, alice, k=5).json()["results"]
    assert [hit["plan_id"] for hit in mine] == [plan_a]
    every = search(client, ADMIN, k=5).json()["results"]
    assert [hit["plan_id"] for hit in every] == [plan_admin, plan_a]  # the nearer first
    listed = client.get("/v1/search/indexes", headers=alice).json()["indexes"]
    assert listed[0]["entries"] == 1
    assert client.get("/v1/search/indexes", headers=ADMIN).json()["indexes"][0]["entries"] == 2
    # mallory's own index of another name works, and alice does not see it
    plan_m = submit(client, [embed_task("mine")], mallory)
    assert run_embed(client, worker, plan_m, embed_output(unit(0, 1)))["state"] == "SUCCEEDED"
    assert [i["name"] for i in client.get("/v1/search/indexes", headers=alice).json()[
        "indexes"]] == ["talks"]  # fmt: skip
    assert search(client, mallory).json()["index"] == "mine"


def test_a_submitters_k_nearest_are_k_of_its_own(tmp_path):
    path = tmp_path / "search.sqlite"
    admin_rows = [entry(unit(1, n / 100), f"admin {n}", f"a{n}.txt") for n in range(20)]
    vectors.replace_task(path, "talks", EMBED, "p-admin", "e", admin_rows, TRUSTED, 1.0)
    alice = vectors.Writer("token:alice", admin=False)
    # alice cannot write there (the admin's index); her own index of the same vectors:
    with pytest.raises(vectors.IndexRefused) as refused:
        vectors.replace_task(path, "talks", EMBED, "p-a", "e", [entry(unit(0, 1), "a")], alice,
                             1.0)  # fmt: skip
    assert refused.value.error_type == "index_owner_mismatch"
    hers = [entry(unit(-1, 1), "far"), entry(unit(0, 1), "near")]
    vectors.replace_task(path, "hers", EMBED, "p-a", "e", hers, alice, 1.0)
    vectors.replace_task(path, "hers", EMBED, "p-admin", "e", admin_rows, TRUSTED, 1.0)
    hits = vectors.nearest(path, "hers", unit(1, 0), 2, "token:alice", admin=False)
    assert [hit["snippet"] for hit in hits] == ["near", "far"]
    assert len(vectors.nearest(path, "hers", unit(1, 0), 30)) == 22
