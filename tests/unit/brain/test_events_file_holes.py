"""The events file on a store where ids commit out of order (brains side by side on
PostgreSQL, ``EventLog(gap_wait_s=...)``): a missing id is waited for, not skipped, so the
file stays a prefix of the table with no holes; one that never commits (a rolled-back
write's) is passed over once its wait is up. SQLite's one writer (no wait) is unchanged."""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager

from airig.brain.store.events import EventLog, Outbox


class Table:
    """An events table that commits whatever ids a test says, in any order."""

    def __init__(self) -> None:
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        self.conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body_json TEXT)")

    def commit(self, *ids: int) -> Outbox:
        outbox = Outbox()
        for event_id in ids:
            line = f'{{"n": {event_id}}}'
            self.conn.execute("INSERT INTO events VALUES (?, ?)", (event_id, line))
            outbox.events.append(line)
            outbox.event_ids.append(event_id)
        return outbox

    @contextmanager
    def read(self):
        yield self.conn


def written(log: EventLog) -> list[int]:
    text = log.events_file.read_text() if log.events_file.exists() else ""
    return [int(line.split(": ")[1].rstrip("}")) for line in text.splitlines()]


def make(tmp_path, table: Table, gap_wait_s: float) -> EventLog:
    return EventLog(tmp_path / "events.jsonl", tmp_path / "samples.jsonl", read=table.read,
                    gap_wait_s=gap_wait_s)  # fmt: skip


def test_an_id_committed_late_is_waited_for_and_lands_in_order(tmp_path):
    table = Table()
    log = make(tmp_path, table, gap_wait_s=60)
    log.publish(table.commit(1))
    log.publish(table.commit(3))  # 2's transaction still open
    assert written(log) == [1]
    log.publish(table.commit(2))
    log.catch_up()
    assert written(log) == [1, 2, 3]


def test_an_id_that_never_commits_is_passed_over_after_its_wait(tmp_path):
    table = Table()
    log = make(tmp_path, table, gap_wait_s=0.05)
    log.publish(table.commit(1))
    log.publish(table.commit(3, 4))  # 2: a write rolled back
    assert written(log) == [1]
    time.sleep(0.1)
    log.catch_up()
    assert written(log) == [1, 3, 4]


def test_without_a_wait_the_file_goes_on_from_the_table_as_before(tmp_path):
    table = Table()
    log = make(tmp_path, table, gap_wait_s=0)
    log.publish(table.commit(1))
    log.publish(table.commit(3))
    assert written(log) == [1, 3]
