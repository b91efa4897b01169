"""POST /v1/exchange in-process: claim-with-start, reports + next claim, fencing, replays."""

from __future__ import annotations

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.api.fastpath import ExchangeFastPath

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}


@pytest.fixture(params=["fastapi-route", "fast-path"])
def client(tmp_path, request):
    """Every test runs against the FastAPI route and the ASGI fast path the brain serves."""
    app = create_app(h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0))
    served = ExchangeFastPath(app) if request.param == "fast-path" else app
    with TestClient(served) as made:
        yield made


def register(client, name="w1", classes=("cpu",)):
    answer = client.post(
        "/v1/workers/register", headers=BOOT, json={"name": name, "classes": list(classes)}
    )
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def submit(client, *tasks):
    plan = {"name": "p", "tasks": [{"id": key, "type": "noop", "task_class": cls, "payload": {}}
                                   for key, cls in tasks]}  # fmt: skip
    return client.post("/v1/plans", headers=ADMIN, json=plan).json()["id"]


def states(client, plan_id):
    view = client.get(f"/v1/plans/{plan_id}", headers=ADMIN).json()
    return {t["id"]: t["state"] for t in view["tasks"]}


def exchange(client, worker, reports=(), claim=None):
    answer = client.post("/v1/exchange", headers=worker,
                         json={"reports": list(reports), "claim": claim})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return answer.json()


def complete(task, text="ok"):
    return {"action": "complete", "task_id": task["task_id"], "attempt": task["attempt"],
            "lease_id": task["lease_id"], "output": {"text": text}}  # fmt: skip


def completions(client, plan_id):
    events = client.get(f"/v1/plans/{plan_id}/events", headers=ADMIN).json()["events"]
    return [e["task_id"] for e in events if e["event_type"] == "task_completed"]


def test_a_claim_can_start_its_task_in_the_same_write(client):
    worker = register(client)
    plan = submit(client, ("a", "cpu"), ("b", "cpu"))
    started = client.post("/v1/claims", headers=worker, json={"wait_s": 0, "start": True})
    plain = client.post("/v1/claims", headers=worker, json={"wait_s": 0})
    assert states(client, plan) == {started.json()["key"]: "RUNNING", plain.json()["key"]: "LEASED"}
    # The separate start call still works and is idempotent on a started attempt.
    ref = {k: started.json()[k] for k in ("attempt", "lease_id")}
    again = client.post(f"/v1/tasks/{started.json()['task_id']}/start", headers=worker, json=ref)
    assert again.json()["state"] == "RUNNING"


def test_a_completion_carries_the_next_claim_and_its_replay_changes_nothing(client):
    worker = register(client)
    plan = submit(client, ("a", "cpu"), ("b", "cpu"))
    first = exchange(client, worker, claim={"wait_s": 0, "start": True})["assignments"][0]
    body = ([complete(first)], {"wait_s": 0, "start": True, "claim_id": "retry0000001"})
    answer = exchange(client, worker, *body)
    assert answer["results"][0] | {"lease_expires_at": None} == {
        "task_id": first["task_id"], "action": "complete", "status": 200,
        "state": "SUCCEEDED", "lease_expires_at": None, "detail": "",
    }  # fmt: skip
    second = answer["assignments"][0]
    assert states(client, plan) == {first["key"]: "SUCCEEDED", second["key"]: "RUNNING"}
    # The answer was lost, the worker resends the same body: same result, same next task.
    replay = exchange(client, worker, *body)
    assert replay["results"][0]["state"] == "SUCCEEDED"
    assert [a["lease_id"] for a in replay["assignments"]] == [second["lease_id"]]
    assert completions(client, plan) == [first["key"]]


def test_a_stale_report_in_an_exchange_gets_409_and_the_others_still_apply(client):
    worker = register(client)
    plan = submit(client, ("a", "cpu"), ("b", "cpu"))
    a, b = exchange(client, worker, claim={"wait_s": 0, "max_tasks": 2})["assignments"]
    stale = complete(a) | {"lease_id": "not-the-lease"}
    answer = exchange(client, worker, [stale, complete(b)], {"wait_s": 0})
    assert [r["status"] for r in answer["results"]] == [409, 200]
    assert states(client, plan) == {a["key"]: "LEASED", b["key"]: "SUCCEEDED"}
    assert answer["assignments"] == []
    other = register(client, "w2")  # not its lease either, even with the right ids
    assert exchange(client, other, [complete(a)])["results"][0]["status"] == 409
    assert "airig_stale_reports_rejected_total 2.0" in client.get("/metrics", headers=ADMIN).text


def test_prefetch_takes_only_cheap_classes_beyond_the_first_task(client):
    worker = register(client, classes=("llm", "cpu"))
    plan = submit(client, ("gen", "llm"), ("sum", "llm"), ("c1", "cpu"))
    got = exchange(client, worker, claim={"wait_s": 0, "max_tasks": 3})["assignments"]
    classes = [a["task_class"] for a in got]
    assert classes[1:] == ["cpu"] * (len(classes) - 1) and "llm" not in classes[1:]
    assert list(states(client, plan).values()).count("READY") >= 1


def test_a_held_task_is_renewed_started_and_released_through_exchanges(client):
    worker = register(client)
    submit(client, ("a", "cpu"))
    task = exchange(client, worker, claim={"wait_s": 0})["assignments"][0]
    ref = {"task_id": task["task_id"], "attempt": task["attempt"], "lease_id": task["lease_id"]}
    renewed = exchange(client, worker, [ref | {"action": "renew"}, ref | {"action": "start"}])
    assert [r["state"] for r in renewed["results"]] == ["LEASED", "RUNNING"]
    released = exchange(client, worker, [ref | {"action": "release"}])["results"][0]
    assert (released["status"], released["state"]) == (200, "READY")


def test_the_fast_path_refuses_like_the_route(client):
    """Same status codes and {"detail"} shape for a missing, wrong-scope or bad request."""
    assert client.post("/v1/exchange", json={"reports": []}).status_code == 401
    unknown = client.post("/v1/exchange", headers={"Authorization": "Bearer nope"}, json={})
    assert unknown.status_code == 401 and "detail" in unknown.json()
    assert client.post("/v1/exchange", headers=ADMIN, json={"reports": []}).status_code == 403
    worker = register(client)
    bad = client.post("/v1/exchange", headers=worker, json={"reports": [{"action": "explode"}]})
    assert bad.status_code == 422 and bad.json()["detail"]
