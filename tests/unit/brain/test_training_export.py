"""The training export's reader and route (``store/training.py``, ``GET
/v1/training/samples``, issue 40 §4): chat samples from the training-sample log, each
exclusion counted under its reason, secrets redacted again, pages that follow the log's
rotation, a hostile log (torn, NUL, not JSON, 10 MB lines) skipped and counted, and 100k
lines read in bounded memory."""

from __future__ import annotations

import json
import tracemalloc

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.store import training
from airig.brain.store.events import rotate

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
LLM = {"type": "llm", "model": "m"}
KEYS = ("a", "b", "c", "d")


@pytest.fixture
def brain(tmp_path):
    made = h.make_brain(tmp_path)
    yield made
    made.stop()


def plan_of(brain, keys=KEYS, **payload) -> str:
    tasks = [{**LLM, "id": key, "payload": {"prompt": f"ask {key}", **payload}} for key in keys]
    return h.submit(brain, tasks)


def set_row(brain, plan, key, **columns) -> None:
    """A task row as the run left it (trust, taint, failures, payload)."""
    sets = ", ".join(f"{name} = ?" for name in columns)
    brain.write(
        lambda conn, outbox, _: conn.execute(
            f"UPDATE tasks SET {sets} WHERE plan_id = ? AND key = ?",  # noqa: S608 - test names
            (*columns.values(), plan, key),
        )
    )


def sample(plan, key, outcome="succeeded", prompt=None, response=None, ts=2000.0, **extra):
    """One line as ``reactions.training_sample`` + ``EventLog.scrub`` write it."""
    return {
        "timestamp": ts, "plan": plan, "task_id": key, "model": "m",
        "prompt": f"ask {key}" if prompt is None else prompt,
        "response": f"answer {key}" if response is None else response,
        "error": None if outcome == "succeeded" else "boom", "outcome": outcome,
        "metrics": {}, **extra,
    }  # fmt: skip


def write_log(brain, *lines, path=None) -> None:
    target = path or brain.settings.training_file
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("ab") as handle:
        for line in lines:
            if isinstance(line, bytes):
                handle.write(line)
            else:
                handle.write((json.dumps(line) + "\n").encode())


def export(brain, cursor=None, **query) -> training.Page:
    """Every page from ``cursor``, merged: what the CLI would get."""
    merged = training.Page()
    while True:
        with brain.db.read() as conn:
            page = training.read_page(
                conn, brain.settings, training.Query(cursor=cursor, **query),
                brain.events.known_secrets,
            )  # fmt: skip
        merged.samples += page.samples
        merged.excluded.update(page.excluded)
        if page.next is None:
            return merged
        cursor = page.next


def test_a_succeeded_sample_is_a_chat_of_user_and_assistant(brain):
    plan = plan_of(brain, keys=("a",))
    write_log(brain, sample(plan, "a"))
    got = export(brain)
    assert got.samples == [{
        "messages": [
            {"role": "user", "content": "ask a"}, {"role": "assistant", "content": "answer a"},
        ],
        "plan": plan, "task": "a", "model": "m", "timestamp": 2000.0,
    }]  # fmt: skip
    assert sum(got.excluded.values()) == 0


def test_the_task_s_system_text_and_messages_become_turns(brain):
    plan = plan_of(brain, keys=("a",), system="be brief")
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                {"role": "user", "content": "and?"}]  # fmt: skip
    chat = [{**LLM, "id": "m", "payload": {"messages": messages, "system": "terse"}}]
    chat_plan = h.submit(brain, chat)
    write_log(brain, sample(plan, "a"), sample(chat_plan, "m", prompt=json.dumps(messages)))
    first, second = export(brain).samples
    assert [t["role"] for t in first["messages"]] == ["system", "user", "assistant"]
    assert first["messages"][0]["content"] == "be brief"
    assert second["messages"] == [
        {"role": "system", "content": "terse"}, *messages,
        {"role": "assistant", "content": "answer m"},
    ]  # fmt: skip


def test_each_exclusion_is_counted_under_its_reason(brain):
    keys = ("ok", "failed", "sens_log", "sens_row", "untrusted", "tainted", "images",
            "wrapped", "retried", "old", "no_answer")  # fmt: skip
    plan = plan_of(brain, keys=keys)
    set_row(brain, plan, "sens_row", sensitive=1)
    set_row(brain, plan, "untrusted", trusted=0)  # read an untrusted output at its claim
    set_row(brain, plan, "tainted", tainted_output=1)  # an untrusted rig answered
    images = json.dumps({"prompt": "ask images", "images": ["a.png"]})
    set_row(brain, plan, "images", payload_json=images)
    set_row(
        brain, plan, "wrapped", payload_json=json.dumps({"prompt": "x", "untrusted_input": "y"})
    )
    set_row(brain, plan, "retried", task_errors=1)
    write_log(
        brain,
        sample(plan, "ok"),
        sample(plan, "failed", outcome="failed"),
        {**sample(plan, "sens_log", prompt=None), "prompt": None, "response": None,
         "redacted": "sensitive"},
        sample(plan, "sens_row"), sample(plan, "untrusted"), sample(plan, "tainted"),
        sample(plan, "images"), sample(plan, "wrapped"), sample(plan, "retried"),
        sample(plan, "old", ts=10.0), sample(plan, "no_answer", response=""),
        sample("plan-gone", "ok"),
        b"{\"truncated\": \n",
    )  # fmt: skip
    got = export(brain, since=1000.0)
    assert [s["task"] for s in got.samples] == ["ok", "retried"]  # `any` keeps a retried one
    assert dict(got.excluded) == {
        "failed": 1, "sensitive": 2, "untrusted_input": 1, "untrusted_rig": 1,
        "incomplete": 3, "before_since": 1, "task_gone": 1, "unreadable": 1,
    }  # fmt: skip
    first_try = export(brain, since=1000.0, min_quality="first-try")
    assert [s["task"] for s in first_try.samples] == ["ok"]
    assert first_try.excluded["below_quality"] == 1


def test_an_older_log_s_secrets_are_redacted_again(brain):
    plan = plan_of(brain, keys=("a",))
    leaked = "use api_key=abcd1234efgh and admin-secret-token and ghp_" + "a1" * 12
    write_log(brain, sample(plan, "a", prompt=leaked, response="bearer " + "z9" * 10))
    (chat,) = export(brain).samples
    text = json.dumps(chat)
    for secret in ("abcd1234efgh", "admin-secret-token", "a1" * 12, "z9" * 10):
        assert secret not in text
    assert chat["messages"][0]["content"].startswith("use api_key=[REDACTED]")


@pytest.mark.parametrize(
    "line",
    [
        b'{"plan": "p", "task_id": "a", "outc',  # torn at the end of the file
        b"not json at all\n",
        b'{"plan": "p\x00", "task_id": "a", "outcome": "succeeded"}\n',
        b"\x00\x00\x00\n",
        b"[1, 2, 3]\n",
        b'{"plan": 1, "task_id": "a", "outcome": "succeeded"}\n',
        b'\xff\xfe{"plan": "p"}\n',
        b"[" * 100_000 + b"\n",  # deeper than the parser goes
    ],
)
def test_a_line_that_is_no_sample_is_counted_unreadable(brain, line):
    plan = plan_of(brain, keys=("a",))
    write_log(brain, sample(plan, "a"), line)
    got = export(brain)
    assert len(got.samples) == 1 and dict(got.excluded) == {"unreadable": 1}


def test_a_10_mb_prompt_is_skipped_unread_and_the_next_line_kept(brain, monkeypatch):
    plan = plan_of(brain, keys=("a", "b"))
    huge = sample(plan, "a", prompt="x" * (10 * 1024 * 1024))
    write_log(brain, huge, sample(plan, "b"))
    tracemalloc.start()
    try:
        got = export(brain)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [s["task"] for s in got.samples] == ["b"] and dict(got.excluded) == {"unreadable": 1}
    assert peak < 6 * 1024 * 1024  # never held whole: 4 MB and a chunk at most


def test_a_lone_surrogate_is_unreadable_not_a_broken_answer(brain):
    plan = plan_of(brain, keys=("a", "b"))
    write_log(brain, b'{"timestamp": 2000, "plan": "' + plan.encode() + b'", "task_id": "a", '
              b'"prompt": "\\ud800", "response": "r", "outcome": "succeeded"}\n',
              sample(plan, "b"))  # fmt: skip
    got = export(brain)
    assert [s["task"] for s in got.samples] == ["b"] and dict(got.excluded) == {"unreadable": 1}


def test_pages_go_oldest_first_across_rotations_and_survive_one_between_pages(brain):
    plan = plan_of(brain, keys=("a", "b", "c", "d"))
    log = brain.settings.training_file
    write_log(brain, sample(plan, "a"), sample(plan, "b"))
    rotate(log, 5, 1.0)  # a, b in .2 after the next rotation
    write_log(brain, sample(plan, "c"))
    rotate(log, 5, 2.0)
    write_log(brain, sample(plan, "d"))
    assert [s["task"] for s in export(brain, limit=1).samples] == ["a", "b", "c", "d"]
    with brain.db.read() as conn:
        first = training.read_page(conn, brain.settings, training.Query(limit=3))
    assert [s["task"] for s in first.samples] == ["a", "b", "c"]
    rotate(log, 5, 3.0)  # the brain rotates between two pages: the cursor's file moved
    write_log(brain, sample(plan, "a", response="new"))
    rest = export(brain, cursor=first.next)
    assert [s["task"] for s in rest.samples] == ["d", "a"]


def test_a_cursor_whose_file_expired_goes_on_from_the_oldest_left(brain):
    plan = plan_of(brain, keys=("a", "b"))
    log = brain.settings.training_file
    write_log(brain, sample(plan, "a"))
    with brain.db.read() as conn:
        first = training.read_page(conn, brain.settings, training.Query(limit=1))
    assert first.next is None  # the end: nothing more yet
    write_log(brain, sample(plan, "b"))
    with brain.db.read() as conn:
        second = training.read_page(conn, brain.settings, training.Query(limit=1))
    assert second.next is not None  # in the file, before "b"
    rotate(log, 0, 1.0)  # keep 0: the file is deleted (expired)
    write_log(brain, sample(plan, "b", response="again"))  # a new file, maybe the same inode
    rest = export(brain, cursor=second.next)
    assert [s["messages"][-1]["content"] for s in rest.samples] == ["again"]
    assert sum(rest.excluded.values()) == 0  # not read from the middle of a line


def test_a_cursor_past_its_file_s_end_reads_on_from_the_next_file(brain):
    plan = plan_of(brain, keys=("a", "b"))
    log = brain.settings.training_file
    write_log(brain, sample(plan, "a"))
    with log.open("rb") as handle:
        head, crc = training._head(handle, 64)
    far = f"{log.stat().st_ino}:{10**18 - 1}:{head}:{crc}"  # the largest the pattern takes
    rotate(log, 5, 1.0)
    write_log(brain, sample(plan, "b"))
    assert [s["task"] for s in export(brain, cursor=far).samples] == ["b"]


def test_100k_lines_are_read_a_page_at_a_time_in_bounded_memory(brain):
    plan = plan_of(brain, keys=("a", "b"))
    line = (json.dumps(sample(plan, "a", prompt="p" * 200)) + "\n").encode()
    failed = (json.dumps(sample(plan, "b", outcome="failed", prompt="q" * 200)) + "\n").encode()
    log = brain.settings.training_file
    log.parent.mkdir(parents=True, exist_ok=True)
    # 100k lines, about 30 MB; most of them failed attempts, read and counted but not
    # turned into chats, which keeps the test's time down (the page bound is the same)
    log.write_bytes((line + failed * 9) * 10_000)
    pages, exported, excluded, cursor = 0, 0, 0, None
    tracemalloc.start()
    try:
        while True:
            with brain.db.read() as conn:
                page = training.read_page(conn, brain.settings, training.Query(cursor=cursor))
            pages += 1
            exported += len(page.samples)
            excluded += sum(page.excluded.values())
            if page.next is None:
                break
            cursor = page.next
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (pages, exported, excluded) == (100, 10_000, 90_000)
    assert peak < 8 * 1024 * 1024  # a page, never the 30 MB log


# ---------------------------------------------------------------- the route
def test_the_route_serves_pages_to_the_admin_alone(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        plan = {"name": "p", "tasks": [{**LLM, "id": k, "payload": {"prompt": k}} for k in "ab"]}
        plan_id = client.post("/v1/plans", headers=ADMIN, json=plan).json()["id"]
        settings.training_file.parent.mkdir(parents=True, exist_ok=True)
        settings.training_file.write_text(
            "".join(json.dumps(sample(plan_id, k)) + "\n" for k in "ab") + "junk\n"
        )
        first = client.get("/v1/training/samples", headers=ADMIN, params={"limit": 1}).json()
        assert [s["task"] for s in first["samples"]] == ["a"] and first["next"]
        rest = client.get(
            "/v1/training/samples", headers=ADMIN, params={"cursor": first["next"]}
        ).json()  # fmt: skip
        assert [s["task"] for s in rest["samples"]] == ["b"]
        assert rest["excluded"] == {"unreadable": 1} and rest["next"] is None
        token = client.post("/v1/tokens", headers=ADMIN, json={"scope": "submit"}).json()["token"]
        submitter = {"Authorization": f"Bearer {token}"}
        assert client.get("/v1/training/samples", headers=submitter).status_code == 403
        assert client.get("/v1/training/samples").status_code == 401
        for bad in ({"cursor": "x"}, {"type": "shell"}, {"min_quality": "best"},
                    {"limit": 0}, {"since": -1}):  # fmt: skip
            answer = client.get("/v1/training/samples", headers=ADMIN, params=bad)
            assert answer.status_code == 422, bad


def test_the_brain_s_own_samples_export_and_a_sensitive_one_does_not(tmp_path):
    """The log as the brain writes it (not a hand-made line): the reader reads its fields."""
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        boot = {"Authorization": "Bearer bootstrap-secret-token"}
        reg = client.post("/v1/workers/register", headers=boot,
                          json={"name": "gpu", "classes": ["llm"]}).json()  # fmt: skip
        worker = {"Authorization": f"Bearer {reg['token']}"}
        tasks = [
            {**LLM, "id": "open", "priority": 9, "payload": {"prompt": "say hi", "system": "s"}},
            {**LLM, "id": "private", "sensitive": True, "payload": {"prompt": "diary"}},
        ]
        client.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": tasks})
        for _ in range(2):
            task = client.post("/v1/claims", headers=worker, json={"wait_s": 0}).json()
            body = {"attempt": 1, "lease_id": task["lease_id"], "output": {"text": "hi!"}}
            client.post(f"/v1/tasks/{task['task_id']}/complete", headers=worker, json=body)
        page = client.get("/v1/training/samples", headers=ADMIN).json()
    assert [s["messages"] for s in page["samples"]] == [[
        {"role": "system", "content": "s"}, {"role": "user", "content": "say hi"},
        {"role": "assistant", "content": "hi!"},
    ]]  # fmt: skip
    assert page["excluded"] == {"sensitive": 1}


def test_an_untrusted_rig_s_answer_and_what_read_it_are_left_out_as_the_run_marked_them(
    tmp_path,
):  # fmt: skip
    """The real run, not hand-set rows: a rig joined with an untrusted token answers
    ``rig``; ``reader`` reads that answer on this machine's worker (tainted input);
    ``own`` neither. Only ``own`` is exported."""
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        join = client.post("/v1/tokens", headers=ADMIN, json={"scope": "join", "name": "b"})
        workers = {}
        for name, token in (("local", "bootstrap-secret-token"), ("rig", join.json()["token"])):
            reg = client.post("/v1/workers/register", headers={"Authorization": f"Bearer {token}"},
                              json={"name": name, "classes": ["llm"]})  # fmt: skip
            workers[name] = {"Authorization": f"Bearer {reg.json()['token']}"}
        tasks = [
            {**LLM, "id": "rig", "priority": 9, "payload": {"prompt": "from afar"}},
            {**LLM, "id": "own", "priority": 5, "payload": {"prompt": "at home"}},
            {**LLM, "id": "reader", "depends_on": ["rig"],
             "payload": {"prompt": "sum up {{ tasks.rig.output }}"}},
        ]  # fmt: skip
        client.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": tasks})
        for name in ("rig", "local", "local"):
            task = client.post("/v1/claims", headers=workers[name], json={"wait_s": 0}).json()
            body = {"attempt": 1, "lease_id": task["lease_id"], "output": {"text": f"by {name}"}}
            done = client.post(f"/v1/tasks/{task['task_id']}/complete", headers=workers[name],
                               json=body)  # fmt: skip
            assert done.status_code == 200, done.text
        page = client.get("/v1/training/samples", headers=ADMIN).json()
    assert [s["task"] for s in page["samples"]] == ["own"]
    assert page["excluded"] == {"untrusted_rig": 1, "untrusted_input": 1}


@pytest.mark.parametrize(
    ("field", "name"),
    [("plan", "p\\u0000"), ("task_id", "a\\u0000"), ("plan", "\\ud800"), ("task_id", "\\udfff")],
)
def test_a_task_name_no_store_holds_is_a_task_gone_never_an_error(brain, field, name):
    """An escaped NUL or a lone surrogate is valid JSON, so the line parses; no task has
    such a name, and PostgreSQL's jsonb refuses both in a parameter: the sample counts as
    task_gone on either engine and the lines beside it still export."""
    plan = plan_of(brain, keys=("a", "b"))
    hostile = json.dumps(sample(plan, "a")).replace(f'"{sample(plan, "a")[field]}"', f'"{name}"')
    write_log(brain, sample(plan, "b"), hostile.encode() + b"\n", sample(plan, "a"))
    got = export(brain)
    assert [s["task"] for s in got.samples] == ["b", "a"]
    assert dict(got.excluded) == {"task_gone": 1}
