"""Submitters own their work (issue 23 §4): a submit token sees, cancels and reads only
the plans it submitted; admin acts on all; anything else is a 404, as for a plan that
does not exist, so ids are not confirmed. Two tokens with the same name own apart."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from tests.unit import brain_helpers as h

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
PLAN = {"name": "mine", "tasks": [{"id": "a", "type": "noop"}, {"id": "b", "type": "noop"}]}


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0))) as test_client:
        yield test_client


def submit_token(client, name="alice"):
    answer = client.post("/v1/tokens", headers=ADMIN, json={"scope": "submit", "name": name})
    assert answer.status_code in (200, 201), answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def test_a_submit_token_acts_only_on_its_own_plans(client):
    alice, mallory = submit_token(client), submit_token(client)  # same name, two tokens
    made = client.post("/v1/plans", headers=alice, json=PLAN, params={})
    assert made.status_code == 201, made.text
    plan = made.json()["id"]
    theirs = [
        ("GET", f"/v1/plans/{plan}"),
        ("GET", f"/v1/plans/{plan}/events"),
        ("GET", f"/v1/plans/{plan}/tasks/a/result"),
        ("GET", f"/v1/plans/{plan}/tasks/a/files/out.txt"),
        ("POST", f"/v1/plans/{plan}/tasks/a/cancel"),
        ("POST", f"/v1/plans/{plan}/cancel"),
    ]
    for method, path in theirs:
        answer = client.request(method, path, headers=mallory)
        assert answer.status_code == 404, (path, answer.text)
        missing = client.request(method, path.replace(plan, "000000000000"), headers=mallory)
        assert answer.json() == {
            **missing.json(),
            "detail": missing.json()["detail"].replace("000000000000", plan),
        }, "same answer as a plan that does not exist"
    assert client.get("/v1/plans", headers=mallory).json()["plans"] == []
    assert [p["id"] for p in client.get("/v1/plans", headers=alice).json()["plans"]] == [plan]
    view = client.get(f"/v1/plans/{plan}", headers=alice).json()
    assert {t["state"] for t in view["tasks"]} == {"READY"}, "mallory cancelled nothing"
    # admin sees and acts on everything
    assert [p["id"] for p in client.get("/v1/plans", headers=ADMIN).json()["plans"]] == [plan]
    assert client.post(f"/v1/plans/{plan}/cancel", headers=ADMIN).json()["cancelled"] == 2


def test_an_idempotency_key_does_not_show_another_submitters_plan(client):
    alice, mallory = submit_token(client), submit_token(client, "mallory")
    key = {"Idempotency-Key": "k1"}
    assert client.post("/v1/plans", headers={**alice, **key}, json=PLAN).status_code == 201
    again = client.post("/v1/plans", headers={**mallory, **key}, json=PLAN)
    assert again.status_code == 409 and "different plan" in again.json()["detail"]
    assert client.post("/v1/plans", headers={**alice, **key}, json=PLAN).status_code == 200


def test_a_submit_token_approves_rejects_and_reads_only_its_own_goals(client, tmp_path):
    alice, mallory = submit_token(client), submit_token(client, "mallory")
    made = client.post("/v1/goals", headers=alice, json={"goal": "sort the scans"})
    assert made.status_code == 201, made.text
    goal = made.json()["id"]
    for method, path in (
        ("GET", f"/v1/goals/{goal}"),
        ("POST", f"/v1/goals/{goal}/approve"),
        ("POST", f"/v1/goals/{goal}/reject"),
    ):
        answer = client.request(method, path, headers=mallory)
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json()["detail"] == f"no goal {goal}"
    assert client.get("/v1/goals", headers=mallory).json()["goals"] == []
    assert [g["id"] for g in client.get("/v1/goals", headers=alice).json()["goals"]] == [goal]
    assert client.get(f"/v1/goals/{goal}", headers=alice).json()["state"] == "drafting"
    # the drafting plan is alice's too: mallory cannot cancel it
    drafting = client.get(f"/v1/goals/{goal}", headers=alice).json()["drafting_plan_id"]
    assert client.post(f"/v1/plans/{drafting}/cancel", headers=mallory).status_code == 404
    assert client.post(f"/v1/goals/{goal}/reject", headers=ADMIN).json()["state"] == "rejected"
