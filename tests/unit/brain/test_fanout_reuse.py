"""A recipe run again on an unchanged folder runs nothing again (issue 35 §3): glob items
whose input file and rendered template are unchanged since an earlier plan, and whose
outputs are still there, are stored SUCCEEDED with that plan's outputs; a changed file, a
deleted or rewritten output, a changed template, a failed item or ``rerun`` run again."""

from __future__ import annotations

import json
import os
import time

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.plans import reuse
from airig.brain.plans.fanout import validate_with_fanout
from airig.brain.plans.validate import Limits, PlanInvalid
from airig.brain.store import reuse as reuse_store
from airig.common.protocol import CompleteRequest

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}


def recipe(dpi=200, **plan):
    """pdf-text's shape: per PDF its pages (images written) and a text file; a CSV over all."""
    return {"name": "pdf-text", **plan, "tasks": [
        {"id": "pdfs", "for_each": {"glob": "inputs/*.pdf"}, "output": "text", "tasks": [
            {"id": "pages", "type": "pages", "task_class": "cpu",
             "payload": {"pdf": "{{ item.path }}", "dpi": dpi,
                         "out_dir": "outputs/pdf/{{ item.stem }}-pages"}},
            {"id": "text", "type": "note", "task_class": "cpu", "depends_on": ["pages"],
             "payload": {"kind": "pages", "path": "outputs/pdf/{{ item.stem }}.txt",
                         "pages": "{{ tasks.pages.output.pages }}"}},
        ]},
        {"id": "csv", "type": "note", "task_class": "cpu", "depends_on": ["pdfs"],
         "payload": {"kind": "csv", "path": "outputs/all.csv",
                     "rows": "{{ tasks.pdfs.output }}", "columns": ["item.name", "path"]}},
    ]}  # fmt: skip


@pytest.fixture
def rig(tmp_path):
    data = tmp_path / "data"
    (data / "inputs").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (data / "inputs" / f"{name}.pdf").write_bytes(f"%PDF {name}".encode())
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0, BRAIN_DATA_DIR=str(data))
    with TestClient(create_app(settings)) as client:
        client.data = data
        client.brain = client.app.state.brain
        yield client


def send(client, body, headers=ADMIN, **params):
    answer = client.post("/v1/plans", headers=headers, json=body, params=params)
    assert answer.status_code == 201, answer.text
    return answer.json()


def work(client, plan_id):
    """A fake worker: claims until nothing is offered, writes what each task says it wrote
    on the data volume, and completes it. The keys it ran, in order. On the clock: the
    app's reaper runs on it, and would take back a lease given at a made-up time."""
    ran = []
    while (got := h.claim(client.brain, now := time.time())) is not None:
        task, payload = got
        key = task["key"]
        output = {"text": "csv"}
        if task["type"] == "pages":
            folder = client.data / payload["out_dir"]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "page-1.png").write_bytes(b"png of " + payload["pdf"].encode())
            output = {"pages": [{"page": 1, "path": f"{payload['out_dir']}/page-1.png",
                                 "text": f"text of {payload['pdf']}"}],
                      "out_dir": payload["out_dir"], "count": 1}  # fmt: skip
        elif task["type"] == "note" and payload["kind"] == "pages":
            (client.data / payload["path"]).write_text(f"{payload['pages']}")
            output = {"path": payload["path"], "bytes": 10}
        elif task["type"] == "note":
            output = {"path": payload["path"], "rows": json.loads(payload["rows"])}
        h.do(client.brain, plan_id, key, "start", now)
        h.do(client.brain, plan_id, key, "complete", now, output=output)
        ran.append(key)
    return ran


def view(client, plan_id):
    return client.get(f"/v1/plans/{plan_id}", headers=ADMIN).json()


def first_run(client, body=None):
    plan = send(client, body or recipe())
    ran = work(client, plan["id"])
    assert len(ran) == 7 and view(client, plan["id"])["status"] == "succeeded"
    return plan["id"]


def item_runs(ran):
    """The items whose tasks a worker was offered."""
    return sorted({key.split("__")[1] for key in ran if key.startswith("pdfs__")})


# ---- the unchanged folder --------------------------------------------------------------


def test_an_unchanged_folder_runs_nothing_again_and_its_outputs_are_carried(rig):
    first = first_run(rig)
    plan = send(rig, recipe())
    (fan,) = plan["fanouts"]
    assert (fan["reused"], fan["reused_from"], fan["state"]) == (3, {first: 3}, "SUCCEEDED")
    assert {i["reused_from"] for i in fan["items"]} == {first}
    tasks = {t["id"]: t for t in plan["tasks"]}
    assert tasks["pdfs__1__text"]["reused_from"] == f"{first}/pdfs__1__text"
    assert tasks["pdfs__1__text"]["state"] == "SUCCEEDED"
    assert tasks["csv"]["state"] == "READY"  # the group ended at submission
    # no item task offered to a worker; the CSV over all items reads the carried outputs
    got = h.claim(rig.brain, time.time())
    assert got[0]["key"] == "csv"
    rows = json.loads(got[1]["rows"])
    assert [r["output"]["path"] for r in rows["items"]] == [
        "outputs/pdf/a.txt", "outputs/pdf/b.txt", "outputs/pdf/c.txt"]  # fmt: skip
    h.do(rig.brain, plan["id"], "csv", "start", time.time())
    h.do(rig.brain, plan["id"], "csv", "complete", time.time(), output={"path": "outputs/all.csv"})
    assert view(rig, plan["id"])["status"] == "succeeded"
    earlier = rig.get(f"/v1/plans/{first}/tasks/pdfs__0__pages/result", headers=ADMIN).json()
    now = rig.get(f"/v1/plans/{plan['id']}/tasks/pdfs__0__pages/result", headers=ADMIN).json()
    assert now["output"] == earlier["output"] and now["output"]["count"] == 1
    events = rig.get(f"/v1/plans/{plan['id']}/events", headers=ADMIN).json()["events"]
    (reused,) = [e for e in events if e["event_type"] == "items_reused"]
    assert reused["task_id"] == "pdfs" and reused["items"] == 3


def test_a_changed_file_runs_alone(rig):
    first_run(rig)
    (rig.data / "inputs" / "b.pdf").write_bytes(b"%PDF b, scanned again")
    plan = send(rig, recipe())
    assert plan["fanouts"][0]["reused"] == 2
    ran = work(rig, plan["id"])
    assert item_runs(ran) == ["1"] and ran[-1] == "csv"
    assert view(rig, plan["id"])["status"] == "succeeded"


def test_a_file_added_runs_alone_and_the_others_keep_their_fingerprint(rig):
    """A file sorting first moves every other item's index: their task keys change, their
    fingerprints must not."""
    first_run(rig)
    (rig.data / "inputs" / "0.pdf").write_bytes(b"%PDF new")
    plan = send(rig, recipe())
    assert plan["fanouts"][0]["reused"] == 3
    assert item_runs(work(rig, plan["id"])) == ["0"]


def test_a_deleted_output_runs_that_item(rig):
    first_run(rig)
    (rig.data / "outputs" / "pdf" / "a.txt").unlink()
    (rig.data / "outputs" / "pdf" / "c-pages" / "page-1.png").unlink()
    plan = send(rig, recipe())
    assert plan["fanouts"][0]["reused"] == 1
    assert item_runs(work(rig, plan["id"])) == ["0", "2"]
    assert (rig.data / "outputs" / "pdf" / "a.txt").exists()


def test_an_output_rewritten_since_runs_that_item(rig):
    """Another recipe's run (or a hand) wrote over an output: what the earlier run's output
    says is no longer what is on the volume."""
    first_run(rig)
    path = rig.data / "outputs" / "pdf" / "b.txt"
    stat = path.stat()
    path.write_text("written by another run")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    plan = send(rig, recipe())
    assert item_runs(work(rig, plan["id"])) == ["1"]


def test_a_changed_template_runs_every_item(rig):
    first_run(rig)
    plan = send(rig, recipe(dpi=300))
    assert plan["fanouts"][0]["reused"] == 0
    assert item_runs(work(rig, plan["id"])) == ["0", "1", "2"]


def test_rerun_runs_every_item_and_the_next_submit_reuses_that_run(rig):
    first_run(rig)
    by_flag = send(rig, recipe(), rerun="true")
    assert by_flag["fanouts"][0]["reused"] == 0
    assert item_runs(work(rig, by_flag["id"])) == ["0", "1", "2"]
    by_field = send(rig, recipe(rerun=True))
    assert by_field["fanouts"][0]["reused"] == 0
    assert item_runs(work(rig, by_field["id"])) == ["0", "1", "2"]
    again = send(rig, recipe())
    assert again["fanouts"][0]["reused_from"] == {by_field["id"]: 3}


def test_a_failed_item_runs_again(rig):
    plan = send(rig, recipe())
    got = h.claim(rig.brain, time.time())
    assert got[0]["key"] == "pdfs__0__pages"
    h.do(rig.brain, plan["id"], "pdfs__0__pages", "start", time.time())
    h.do(rig.brain, plan["id"], "pdfs__0__pages", "fail", time.time(), error_type="bad_input",
         message="not a PDF", retryable=False)  # fmt: skip
    work(rig, plan["id"])
    assert view(rig, plan["id"])["status"] == "partial"
    again = send(rig, recipe())
    assert again["fanouts"][0]["reused"] == 2
    assert item_runs(work(rig, again["id"])) == ["0"]


def test_a_chain_of_reuses_names_the_run_that_made_the_outputs(rig):
    first = first_run(rig)
    second = send(rig, recipe())
    work(rig, second["id"])
    third = send(rig, recipe())
    assert third["fanouts"][0]["reused_from"] == {first: 3}
    assert {t["reused_from"] for t in third["tasks"] if t["group"]} == {
        f"{first}/pdfs__{i}__{t}" for i in range(3) for t in ("pages", "text")}  # fmt: skip


# ---- adversarial ----------------------------------------------------------------------


def test_a_file_replaced_with_the_same_size_and_mtime_is_hashed_again(rig, monkeypatch):
    """The stat cache is keyed by (path, size, mtime_ns, ctime_ns, inode): a file put in
    place with the old size and mtime is a new inode, and is read again."""
    monkeypatch.setattr(reuse, "RACY_NS", 0)  # the files here are fresh: cache them anyway
    reads = []
    real = reuse.file_sha256
    monkeypatch.setattr(reuse, "file_sha256", lambda fd: reads.append(fd) or real(fd))
    first_run(rig)
    assert len(reads) == 3
    target = rig.data / "inputs" / "a.pdf"
    before = target.stat()
    forged = rig.data / "inputs" / ".a.tmp"
    forged.write_bytes(b"%PDF X")  # same size as "%PDF a"
    os.utime(forged, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(forged, target)
    assert (target.stat().st_size, target.stat().st_mtime_ns) == (
        before.st_size, before.st_mtime_ns)  # fmt: skip
    plan = send(rig, recipe())
    assert len(reads) == 4, "b and c came from the cache, a was read again"
    assert plan["fanouts"][0]["reused"] == 2
    assert item_runs(work(rig, plan["id"])) == ["0"]


def test_a_fresh_file_is_not_cached(rig, monkeypatch):
    """A file whose times are within RACY_NS of the hash is read again next time: a rewrite
    within the same clock tick could leave its stat as it was (git's racy-clean rule)."""
    reads = []
    real = reuse.file_sha256
    monkeypatch.setattr(reuse, "file_sha256", lambda fd: reads.append(fd) or real(fd))
    monkeypatch.setattr(reuse, "RACY_NS", 10**18)
    send(rig, recipe())
    send(rig, recipe())
    assert len(reads) == 6
    with rig.brain.db.read() as conn:
        assert reuse_store.cached_hashes(conn, ["inputs/a.pdf"]) == {}


def test_another_submitters_run_is_not_reused(rig):
    first_run(rig)
    token = rig.post("/v1/tokens", headers=ADMIN, json={"scope": "submit", "name": "bob"})
    bob = {"Authorization": f"Bearer {token.json()['token']}"}
    plan = send(rig, recipe(), headers=bob)
    assert plan["fanouts"][0]["reused"] == 0


def test_a_vanished_a_fifo_or_an_escaping_input_gets_no_fingerprint(rig, tmp_path):
    """Between the glob and the hash a file can go, or be replaced by a FIFO (which must not
    hang the submit) or a link out of the volume: that item gets no fingerprint and runs
    as it would have, failing there if its file is gone."""
    body = recipe()
    plan, _ = validate_with_fanout(body, Limits(), rig.data)
    (rig.data / "inputs" / "a.pdf").unlink()
    (rig.data / "inputs" / "b.pdf").unlink()
    os.mkfifo(rig.data / "inputs" / "b.pdf")
    outside = tmp_path / "secret.pdf"
    outside.write_bytes(b"%PDF secret")
    (rig.data / "inputs" / "c.pdf").unlink()
    (rig.data / "inputs" / "c.pdf").symlink_to(outside)
    settings = rig.brain.settings
    found = reuse.plan_reuse(
        rig.brain.db, plan, data_dir=settings.data_dir, results_dir=settings.results_dir,
        owner=None, plan_id="0123456789ab",
    )  # fmt: skip
    assert found.fingerprints == {} and found.carried == {}


def test_a_file_gone_from_the_folder_is_no_item_and_the_rest_are_reused(rig):
    first_run(rig)
    (rig.data / "inputs" / "b.pdf").unlink()
    plan = send(rig, recipe())  # the glob no longer sees it: two items, both unchanged
    assert plan["fanouts"][0]["total"] == 2 and plan["fanouts"][0]["reused"] == 2


def test_rerun_must_be_true_or_false(rig):
    answer = rig.post("/v1/plans", headers=ADMIN, json=recipe(rerun="yes please"))
    assert answer.status_code == 422
    assert any(e["field"] == "rerun" for e in answer.json()["detail"]["errors"])
    with pytest.raises(PlanInvalid):
        validate_with_fanout(recipe(rerun=1), Limits(), rig.data)
    for value in ("maybe", "null", ""):
        answer = rig.post("/v1/plans", headers=ADMIN, json=recipe(), params={"rerun": value})
        assert answer.status_code == 422, value
        assert answer.json()["detail"]["errors"][0]["field"] == "rerun"  # the plan error body
    spec = rig.get("/openapi.json").json()["paths"]["/v1/plans"]["post"]["parameters"]
    assert {"name": "rerun", "in": "query"}.items() <= next(
        p for p in spec if p["name"] == "rerun").items()  # fmt: skip


def test_templates_with_shell_and_other_groups_are_never_reused(rig):
    shell = {
        "name": "s",
        "tasks": [
            {
                "id": "g",
                "for_each": {"glob": "inputs/*.pdf"},
                "tasks": [{"id": "s", "type": "shell", "payload": {"command": "wc {{ item }}"}}],
            }
        ],
    }
    items = {"name": "i", "tasks": [{"id": "g", "for_each": {"items": ["inputs/a.pdf"]},
             "tasks": [{"id": "n", "type": "noop"}]}]}  # fmt: skip
    for body in (shell, items):
        plan = send(rig, body)
        with rig.brain.db.read() as conn:
            rows = conn.execute(
                "SELECT fingerprint FROM tasks WHERE plan_id = ? AND fanout_group IS NOT NULL",
                (plan["id"],),
            ).fetchall()
        assert rows and {r["fingerprint"] for r in rows} == {None}


# ---- results files and the search index ----------------------------------------------


def complete_with_file(brain, plan_id, key, name, content, now):
    task = h.row(brain, plan_id, key)
    folder = brain.settings.results_dir / plan_id / key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(content)
    lease = h.ref(task)
    body = CompleteRequest(**lease.model_dump(), output={"text": "t"},
                           files=[f"{plan_id}/{key}/{name}"])  # fmt: skip

    def change(conn, outbox, _):
        current = h.leases.states.get_task(conn, task["id"])
        return h.leases.complete(conn, outbox, current, "w1", body, now, brain.settings)

    return brain.write(change)


def test_a_reused_tasks_results_files_are_its_own(rig):
    body = {
        "name": "t",
        "tasks": [
            {
                "id": "g",
                "for_each": {"glob": "inputs/*.pdf"},
                "tasks": [{"id": "t", "type": "noop", "payload": {"echo": "{{ item }}"}}],
            }
        ],
    }
    first = send(rig, body)["id"]
    for i in range(3):
        assert h.claim(rig.brain, time.time())[0]["key"] == f"g__{i}__t"
        h.do(rig.brain, first, f"g__{i}__t", "start", time.time())
        complete_with_file(rig.brain, first, f"g__{i}__t", "out.txt", b"made %d" % i, time.time())
    plan = send(rig, body)
    assert plan["fanouts"][0]["reused"] == 3 and plan["status"] == "succeeded"
    reused = {t["id"]: t for t in plan["tasks"]}["g__1__t"]
    assert reused["files"] == [f"{plan['id']}/g__1__t/out.txt"]
    import shutil

    shutil.rmtree(rig.brain.settings.results_dir / first)  # the earlier plan pruned
    got = rig.get(f"/v1/plans/{plan['id']}/tasks/g__1__t/files/out.txt", headers=ADMIN)
    assert got.status_code == 200 and got.content == b"made 1"
    # a results file gone: that item runs
    again = send(rig, body)
    assert again["fanouts"][0]["reused"] == 3  # the new plan's links hold them
    (rig.brain.settings.results_dir / plan["id"] / "g__2__t" / "out.txt").unlink()
    shutil.rmtree(rig.brain.settings.results_dir / again["id"] / "g__2__t")
    last = send(rig, body)
    assert last["fanouts"][0]["reused"] == 2


def test_a_reused_embed_stands_on_its_index_entries(rig):
    body = {"name": "e", "tasks": [{"id": "g", "for_each": {"glob": "inputs/*.pdf"},
            "tasks": [{"id": "e", "type": "embed", "task_class": "script",
                       "payload": {"model": "m", "index": "docs",
                                   "documents": [{"text": "{{ item.stem }}",
                                                  "source": "{{ item.path }}"}]}}]}]}  # fmt: skip
    # this machine's worker: trusted (an untrusted output never creates an index)
    boot = {"Authorization": "Bearer bootstrap-secret-token"}
    joined = rig.post("/v1/workers/register", headers=boot, json={"name": "w1",
                      "classes": ["script"]})  # fmt: skip
    assert joined.status_code in (200, 201), joined.text
    first = send(rig, body)["id"]
    for i in range(3):
        task, payload = h.claim(rig.brain, time.time(), classes=("script",), models=("m:latest",))
        output = {"model": "m", "index": "docs", "embeddings": [[1.0, float(i)]],
                  "documents": payload["documents"]}  # fmt: skip
        h.do(rig.brain, first, task["key"], "start", time.time())
        h.do(rig.brain, first, task["key"], "complete", time.time(), output=output)
    assert send(rig, body)["fanouts"][0]["reused"] == 3
    (rig.data / "index" / "search.sqlite").unlink()  # the index deleted: every item runs
    for extra in ("-wal", "-shm"):
        (rig.data / "index" / f"search.sqlite{extra}").unlink(missing_ok=True)
    assert send(rig, body)["fanouts"][0]["reused"] == 0


# ---- many items -----------------------------------------------------------------------


def test_a_thousand_item_folder_costs_linear_store_work(tmp_path):
    """Fingerprinting and finding earlier runs read the store by index, per item: SQLite's
    own work (its virtual machine's steps) grows with the items, never with their square.
    Measured for 250 and 1,000 items; a scan of the group per item would be 16x.
    SQLite's store pinned: the count is its virtual machine's (a progress handler), which
    PostgreSQL has no counterpart of; there the same reads' index use is
    test_the_fingerprint_reads_use_their_indexes_on_postgresql's."""

    def steps(count):
        data = tmp_path / f"d{count}"
        (data / "inputs").mkdir(parents=True)
        for i in range(count):
            (data / "inputs" / f"{i:04d}.txt").write_text(str(i))
        brain = h.make_brain(
            tmp_path / f"b{count}", BRAIN_DATA_DIR=str(data), BRAIN_DATABASE_URL=""
        )
        body = {
            "name": "n",
            "tasks": [
                {
                    "id": "g",
                    "for_each": {"glob": "inputs/*.txt"},
                    "tasks": [{"id": "t", "type": "noop", "payload": {"echo": "{{ item }}"}}],
                }
            ],
        }
        limits = Limits(plan_max_tasks=5000)
        plan, tainted = validate_with_fanout(body, limits, data)
        first = reuse.plan_reuse(brain.db, plan, data_dir=data, results_dir=tmp_path / "r",
                                 owner=None, plan_id="aaaaaaaaaaaa")  # fmt: skip
        assert len(first.fingerprints) == count
        plan_id = brain.write(lambda conn, outbox, _: h.insert_plan(
            conn, outbox, plan, tainted, 1000.0, submitted_by="t", digest="d",
            idempotency_key=None, default_timeout_s=60.0,
            prepared=reuse_submit_prepare(plan, tainted, first)))  # fmt: skip
        brain.write(lambda conn, *_: conn.execute(
            "UPDATE tasks SET state = 'SUCCEEDED', output_json = '{}' WHERE plan_id = ?",
            (plan_id,)))  # fmt: skip
        counted = [0]
        connections = [brain.db._readers.get() for _ in range(brain.db._reader_count)]
        for conn in [*connections, brain.db._conn]:
            conn.set_progress_handler(lambda: counted.__setitem__(0, counted[0] + 1), 100)
        for conn in connections:
            brain.db._readers.put(conn)
        found = reuse.plan_reuse(brain.db, plan, data_dir=data, results_dir=tmp_path / "r",
                                 owner=None, plan_id="bbbbbbbbbbbb")  # fmt: skip
        assert len(found.carried) == count
        brain.db.close()
        return counted[0]

    small, large = steps(250), steps(1000)
    assert large < 8 * small, (small, large)


def reuse_submit_prepare(plan, tainted, found):
    from airig.brain.plans.submit import prepare

    return prepare(plan, tainted, 60.0, reuse.Reuse(fingerprints=found.fingerprints))


# store/reuse.py's reads, as it words them
FINGERPRINT_READS = (
    ("SELECT t.plan_id, t.fanout_group, t.fanout_index FROM tasks t JOIN plans p"
     " ON p.id = t.plan_id WHERE t.fingerprint = ? AND p.owner IS NOT DISTINCT FROM ?"
     " ORDER BY t.id DESC LIMIT 1", ("f", None)),
    ("SELECT * FROM tasks WHERE fingerprint = ? AND plan_id = ? AND fanout_group = ?"
     " AND fanout_index = ? ORDER BY id", ("f", "p", "g", 0)),
    ("SELECT * FROM input_hashes WHERE path = ?", ("p",)),
)  # fmt: skip


def test_the_fingerprint_reads_use_their_indexes(tmp_path):
    # SQLite's store pinned: EXPLAIN QUERY PLAN is SQLite's (PostgreSQL's test is below)
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL="")
    with brain.db.read() as conn:
        plans = [
            " ".join(str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
            for sql, args in FINGERPRINT_READS
        ]
    assert "tasks_fingerprint" in plans[0] and "SCAN" not in plans[0].replace("SCAN p", "")
    assert "tasks_fingerprint" in plans[1] and "SCAN" not in plans[1]
    assert "PRIMARY KEY" in plans[2] or "sqlite_autoindex" in plans[2]
    brain.db.close()


def test_the_fingerprint_reads_use_their_indexes_on_postgresql(tmp_path, pg_url):
    """The same reads on PostgreSQL: the partial index serves them (its condition implied
    by the query's, the parameter's type the column's), the cache by its primary key."""
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL=pg_url)
    try:
        with brain.db.read() as conn:
            # a test's empty tables are cheaper to scan: priced out, so that the plan shows
            # whether an index can serve the query at all
            conn.execute("SET LOCAL enable_seqscan = off")
            plans = [
                " ".join(r[0] for r in conn.execute(f"EXPLAIN {sql}", args))
                for sql, args in FINGERPRINT_READS
            ]
    finally:
        brain.db.close()
    assert "tasks_fingerprint" in plans[0] and "Seq Scan" not in plans[0], plans[0]
    assert "tasks_fingerprint" in plans[1] and "Seq Scan" not in plans[1], plans[1]
    assert "input_hashes_pkey" in plans[2], plans[2]


@pytest.mark.parametrize("name", ["pdf-text.yaml", "photos-captions.yaml", "video-notes.yaml"])
def test_every_shipped_recipe_fingerprints_every_item_the_same_twice(tmp_path, name):
    """The recipes as `submit --inputs-dir` fills them: each item task gets a fingerprint,
    the same on a second submit, another for another file."""
    from pathlib import Path

    from airig.brain.plans.load import load_plan
    from airig.launcher import plan_inputs

    recipe_file = Path(__file__).resolve().parents[3] / "recipes" / name
    body = plan_inputs.fill(recipe_file.read_bytes(), "inputs/f", "outputs/r/f")
    body = plan_inputs.MODEL.sub(lambda m: f"{m.group(1)}-model", body.decode()).encode()
    data = tmp_path / "data"
    (data / "inputs" / "f").mkdir(parents=True)
    for file in ("a.pdf", "b.pdf", "a.jpg", "b.jpg", "a.mp4", "b.mp4"):
        (data / "inputs" / "f" / file).write_bytes(file.encode())
    brain = h.make_brain(tmp_path / "b", BRAIN_DATA_DIR=str(data))

    def prints():
        plan, _, _ = load_plan(body, "application/yaml", Limits(), data)
        found = reuse.plan_reuse(brain.db, plan, data_dir=data, results_dir=tmp_path / "r",
                                 owner=None, plan_id="cccccccccccc")  # fmt: skip
        assert set(found.fingerprints) == set(plan.members)
        return found.fingerprints

    first, second = prints(), prints()
    assert first == second
    assert len({fp for key, fp in first.items() if "__0__" in key}) == 1
    assert {fp for key, fp in first.items() if "__0__" in key}.isdisjoint(
        {fp for key, fp in first.items() if "__1__" in key})  # fmt: skip
    brain.db.close()
