"""A committed write is a success even when its events log line cannot be written
(issue 36 §5): the line is owed, caught up from the events table, never the write."""

from __future__ import annotations

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
PLAN = {"name": "p", "tasks": [{"id": "a", "type": "noop"}]}


def submit_as_a_client_does(client, tries: int = 3):
    """One plan, sent again while the brain says the answer is worth retrying."""
    for _ in range(tries):
        answer = client.post("/v1/plans", headers=ADMIN, json=PLAN)
        if not (answer.status_code >= 500 and answer.json().get("retryable")):
            return answer
    return answer


def test_a_plan_committed_while_the_events_log_is_dev_full_is_answered_201_once(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_EVENTS_LOG="/dev/full", BRAIN_CLAIM_WAIT_S=0)
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = submit_as_a_client_does(client)
        listed = client.get("/v1/plans", headers=ADMIN).json()["plans"]
        with app.state.brain.db.read() as conn:
            stored = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    assert answer.status_code == 201, answer.text
    assert [p["id"] for p in listed] == [answer.json()["id"]]  # stored once, not per retry
    assert stored == 1  # the event is in the table; the file owes its line


# ---- the events file is a prefix of the events table, with no holes --------------------
def table_lines(brain) -> list[str]:
    with brain.db.read() as conn:
        return [row[0] for row in conn.execute("SELECT body_json FROM events ORDER BY id")]


def file_lines(brain) -> list[str]:
    path = brain.settings.events_file
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def full_disk(monkeypatch) -> list[int]:
    """Every events file write fails with ENOSPC, as on a full disk (half the batch lands
    first), until the list given back is cleared."""
    import os

    from airig.brain.store import events

    failing = [1]

    class FullDisk:
        def __getattr__(self, name):
            return getattr(os, name)

        def write(self, fd, data):
            if not failing:
                return os.write(fd, data)
            os.write(fd, bytes(data[: len(data) // 2]))
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(events, "os", FullDisk())
    return failing


def test_lines_a_failed_write_owed_are_written_from_the_table_once_it_can_write(
    tmp_path, monkeypatch
):
    brain = h.make_brain(tmp_path)
    h.submit(brain, [h.noop("a")])
    failing = full_disk(monkeypatch)
    for key in ("b", "c", "d"):
        h.submit(brain, [h.noop(key), h.noop(f"{key}2")])
    assert brain.events.owed
    assert table_lines(brain)[: len(file_lines(brain))] == file_lines(brain)  # no torn line
    failing.clear()
    brain.events.catch_up()
    assert not brain.events.owed
    assert file_lines(brain) == table_lines(brain)
    h.submit(brain, [h.noop("e")])  # and the next writes follow on
    assert file_lines(brain) == table_lines(brain)
    assert len(table_lines(brain)) == 8


def test_the_next_write_catches_the_file_up_once_its_retry_is_due(tmp_path, monkeypatch):
    brain = h.make_brain(tmp_path)
    brain.events._retry_s = 0.0  # no wait before the next try
    failing = full_disk(monkeypatch)
    h.submit(brain, [h.noop("a")])
    h.submit(brain, [h.noop("b")])
    assert file_lines(brain) == []
    failing.clear()
    h.submit(brain, [h.noop("c")])
    assert file_lines(brain) == table_lines(brain) and len(file_lines(brain)) == 3


def test_commits_published_the_other_way_round_still_land_in_id_order(tmp_path):
    from airig.brain.store.events import Outbox

    brain = h.make_brain(tmp_path)
    held: list[Outbox] = []
    brain.events.publish, publish = held.append, brain.events.publish  # type: ignore[method-assign]
    h.submit(brain, [h.noop("a")])
    h.submit(brain, [h.noop("b")])
    first, second = held
    publish(second)  # the later commit's publisher won the race for the file
    publish(first)
    assert file_lines(brain) == table_lines(brain) and len(file_lines(brain)) == 2


def test_a_restart_cuts_what_the_file_holds_past_its_mark_and_writes_it_from_the_table(
    tmp_path,
):
    brain = h.make_brain(tmp_path)
    h.submit(brain, [h.noop("a"), h.noop("b")])
    marked = brain.settings.events_file.with_name("events.jsonl.mark")
    mark = marked.read_text()
    h.submit(brain, [h.noop("c")])
    # A crash after c's line but before its mark, and a torn line from a later write.
    marked.write_text(mark)
    with brain.settings.events_file.open("a") as handle:
        handle.write('{"event_type": "task_sub')
    brain.db.close()
    again = h.make_brain(tmp_path)
    # c's line once (cut, then written again from the table), no torn line.
    assert file_lines(again) == table_lines(again) and len(file_lines(again)) == 3


@pytest.mark.parametrize(
    "mark",
    ["", "garbage", '{"id": -1, "offset": 5}', '{"id": "3", "offset": 0}', "[1, 2]",
     '{"id": 1, "offset": 99999999999}', '{"id": 99999, "offset": 0}'],
)  # fmt: skip
def test_a_hostile_or_stale_mark_never_stops_the_brain_or_loses_a_line_it_writes(tmp_path, mark):
    brain = h.make_brain(tmp_path)
    h.submit(brain, [h.noop("a")])
    before = file_lines(brain)
    brain.settings.events_file.with_name("events.jsonl.mark").write_text(mark)
    brain.db.close()
    again = h.make_brain(tmp_path)
    h.submit(again, [h.noop("b")])
    # Without a mark it trusts (or one past the table's end: a restored store), the
    # file goes on from the table's newest event: what it held stays, new lines follow.
    assert file_lines(again)[: len(before)] == before
    assert file_lines(again)[-1] == table_lines(again)[-1]
    assert len(file_lines(again)) == 2


KILLED = """
import os, signal, sys
sys.path.insert(0, {tests!r})
import brain_helpers as h
import pytest
from airig.brain.store import events

brain = h.make_brain(__import__("pathlib").Path({tmp!r}), BRAIN_DATABASE_URL={url!r})
h.submit(brain, [h.noop("a")])
real = events._append_at
def die(path, text, offset):
    with path.open("a") as handle:
        handle.write(text[: len(text) // 3])  # a torn line, then the kill
    os.kill(os.getpid(), signal.SIGKILL)
events._append_at = die
h.submit(brain, [h.noop("b"), h.noop("c")])  # committed, then killed before its lines
"""


def test_a_brain_killed_between_commit_and_file_write_catches_up_on_restart(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    tests = str(Path(__file__).resolve().parents[1])
    # the parent's store, given whole: the child has tests/unit only (no pg_stores), and
    # AIRIG_TEST_STORE=postgresql gives this folder its database here ("" = the file)
    url = h.make_settings(tmp_path).database_url
    code = KILLED.format(tests=tests, tmp=str(tmp_path), url=url)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    again = h.make_brain(tmp_path)
    assert len(table_lines(again)) == 3  # the killed write committed
    assert file_lines(again) == table_lines(again)
