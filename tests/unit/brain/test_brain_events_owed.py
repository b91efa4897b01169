"""A committed write is a success even when its events log line cannot be written
(issue 36 §5): the line is owed, caught up from the events table, never the write."""

from __future__ import annotations

import brain_helpers as h
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app

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
