"""The brain's HTTP API in-process: auth scopes, submission, fencing, logs, metrics."""

from __future__ import annotations

import json

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.common.errors import ConfigError

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
PLAN = {"name": "p", "tasks": [{"id": "a", "type": "noop", "payload": {"echo": 1}}]}


@pytest.fixture
def brain_app(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        yield client, settings


def register(client, name="w1", classes=("cpu",)):
    answer = client.post(
        "/v1/workers/register", headers=BOOT, json={"name": name, "classes": list(classes)}
    )
    assert answer.status_code == 200
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def claim(client, worker):
    answer = client.post("/v1/claims", headers=worker, json={"wait_s": 0})
    return answer.json() if answer.status_code == 200 else None


@pytest.mark.parametrize("secret", ["", "change-me"])
def test_the_brain_refuses_to_start_with_placeholder_secrets(tmp_path, secret):
    settings = h.make_settings(tmp_path, BRAIN_ADMIN_TOKEN=secret)
    with pytest.raises(ConfigError, match="BRAIN_ADMIN_TOKEN"):
        create_app(settings)


def test_health_needs_no_token(brain_app):
    client, _ = brain_app
    assert client.get("/health").json()["status"] == "ok"


def test_scopes_are_enforced(brain_app):
    client, _ = brain_app
    worker = register(client)
    assert client.get("/v1/workers").status_code == 401
    assert client.get("/v1/workers", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get("/v1/workers", headers=worker).status_code == 403
    assert client.get("/v1/plans", headers=BOOT).status_code == 403
    assert client.post("/v1/claims", headers=ADMIN, json={"wait_s": 0}).status_code == 403
    token = client.post("/v1/tokens", headers=ADMIN, json={"scope": "submit"}).json()["token"]
    submitter = {"Authorization": f"Bearer {token}"}
    assert client.post("/v1/plans", headers=submitter, json=PLAN).status_code == 201
    assert client.get("/v1/workers", headers=submitter).status_code == 403
    assert client.post("/v1/tokens", headers=submitter, json={"scope": "admin"}).status_code == 403


def test_workers_list_shows_liveness(brain_app):
    client, _ = brain_app
    register(client, "gpu0", ("llm", "script"))
    workers = client.get("/v1/workers", headers=ADMIN).json()["workers"]
    assert [(w["name"], w["alive"], w["classes"]) for w in workers] == [
        ("gpu0", True, ["llm", "script"])
    ]


def test_workers_list_says_when_each_last_claimed_and_what_waits_for_it(brain_app):
    client, settings = brain_app
    cpu = register(client, "cpu0", ("cpu",))
    register(client, "gpu0", ("llm",))
    two = {"name": "q", "tasks": [{"id": k, "type": "noop", "task_class": "cpu"} for k in "ab"]}
    assert client.post("/v1/plans", headers=ADMIN, json=two).status_code == 201
    before = {w["name"]: w for w in client.get("/v1/workers", headers=ADMIN).json()["workers"]}
    assert before["cpu0"]["last_claim_at"] is None and before["cpu0"]["ready_for_it"] == 2
    assert before["gpu0"]["ready_for_it"] == 0  # no llm task waits
    assert before["cpu0"]["idle_limit_s"] == settings.max_wait_s + settings.lease_s
    assert claim(client, cpu) is not None
    after = {w["name"]: w for w in client.get("/v1/workers", headers=ADMIN).json()["workers"]}
    assert after["cpu0"]["last_claim_at"] is not None and after["cpu0"]["ready_for_it"] == 1
    assert after["cpu0"]["idle_s"] <= before["cpu0"]["idle_s"] + 60
    assert after["gpu0"]["last_claim_at"] is None


def test_an_invalid_plan_is_422_with_errors_and_nothing_is_enqueued(brain_app):
    client, _ = brain_app
    bad = {
        "name": "p",
        "tasks": [{"id": "a", "type": "noop"}, {"id": "b", "type": "noop", "depends_on": ["x"]}],
    }
    answer = client.post("/v1/plans", headers=ADMIN, json=bad)
    assert answer.status_code == 422
    assert answer.json()["detail"]["errors"][0]["task"] == "b"
    assert client.get("/v1/plans", headers=ADMIN).json()["plans"] == []


def test_an_oversized_plan_is_413(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_MAX_PLAN_BYTES=50)
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/plans", headers=ADMIN, json=PLAN).status_code == 413


def test_idempotency_key_returns_the_same_plan(brain_app):
    client, _ = brain_app
    headers = {**ADMIN, "Idempotency-Key": "k1"}
    first = client.post("/v1/plans", headers=headers, json=PLAN)
    again = client.post("/v1/plans", headers=headers, json=PLAN)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other = client.post("/v1/plans", headers=headers, json={**PLAN, "name": "q"})
    assert other.status_code == 409
    assert len(client.get("/v1/plans", headers=ADMIN).json()["plans"]) == 1


def test_markdown_plans_are_accepted(brain_app):
    client, _ = brain_app
    body = "# Plan: md\n\n## a\n- type: noop\n\n```yaml\necho: 1\n```\n"
    answer = client.post(
        "/v1/plans", headers={**ADMIN, "Content-Type": "text/markdown"}, content=body
    )
    assert answer.status_code == 201
    assert answer.json()["name"] == "md" and answer.json()["fixes"][0]["task"] == "a"


def test_worker_lifecycle_fencing_and_replay_over_http(brain_app):
    client, settings = brain_app
    w1, w2 = register(client, "w1"), register(client, "w2")
    plan = client.post("/v1/plans", headers=ADMIN, json=PLAN).json()
    task = claim(client, w1)
    assert task["payload"] == {"echo": 1} and claim(client, w2) is None
    lease = {"attempt": task["attempt"], "lease_id": task["lease_id"]}
    url = f"/v1/tasks/{task['task_id']}"
    assert client.post(f"{url}/start", headers=w1, json=lease).json()["state"] == "RUNNING"
    assert client.post(f"{url}/heartbeat", headers=w1, json=lease).status_code == 200
    assert client.post(f"{url}/complete", headers=w2, json=lease).status_code == 409  # not w2's
    stale = {**lease, "attempt": 7}
    assert client.post(f"{url}/complete", headers=w1, json=stale).status_code == 409
    done = {**lease, "output": {"text": "hi"}}
    assert client.post(f"{url}/complete", headers=w1, json=done).json()["state"] == "SUCCEEDED"
    assert client.post(f"{url}/complete", headers=w1, json=done).status_code == 200  # replay
    assert client.post(f"{url}/heartbeat", headers=w1, json=lease).status_code == 409
    view = client.get(f"/v1/plans/{plan['id']}", headers=ADMIN).json()
    assert view["status"] == "succeeded"
    result = client.get(f"/v1/plans/{plan['id']}/tasks/a/result", headers=ADMIN).json()
    assert result["output"] == {"text": "hi"}
    events = client.get(f"/v1/plans/{plan['id']}/events", headers=ADMIN).json()["events"]
    assert [e["event_type"] for e in events].count("task_completed") == 1
    metrics = client.get("/metrics", headers=ADMIN).text
    assert "airig_stale_reports_rejected_total 3.0" in metrics
    assert 'airig_tasks{state="SUCCEEDED",task_class="cpu"} 1.0' in metrics
    lines = settings.events_file.read_text().splitlines()
    assert {
        "timestamp",
        "event_type",
        "task_id",
        "worker_id",
        "gpu_id",
        "duration_ms",
        "tokens_generated",
        "error",
        "plan",
        "attempt",
        "reason",
    } <= set(json.loads(lines[-1]))


def test_uploaded_files_land_in_the_results_volume(brain_app):
    client, settings = brain_app
    worker = register(client)
    plan = client.post("/v1/plans", headers=ADMIN, json=PLAN).json()
    task = claim(client, worker)
    query = {"attempt": task["attempt"], "lease_id": task["lease_id"]}
    url = f"/v1/tasks/{task['task_id']}/files"
    assert (
        client.put(f"{url}/img.png", headers=worker, params=query, content=b"PNG").status_code
        == 200
    )
    assert (
        client.put(f"{url}/..evil", headers=worker, params=query, content=b"x").status_code == 422
    )
    bad = {**query, "lease_id": "other"}
    assert client.put(f"{url}/x.png", headers=worker, params=bad, content=b"x").status_code == 409
    assert (settings.results_dir / plan["id"] / "a" / "img.png").read_bytes() == b"PNG"


def test_large_results_are_stored_as_files(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_RESULT_INLINE_BYTES=10, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        worker = register(client)
        plan = client.post("/v1/plans", headers=ADMIN, json=PLAN).json()
        task = claim(client, worker)
        body = {"attempt": 1, "lease_id": task["lease_id"], "output": {"text": "x" * 100}}
        client.post(f"/v1/tasks/{task['task_id']}/complete", headers=worker, json=body)
        stored = settings.results_dir / plan["id"] / "a" / "output.json"
        assert json.loads(stored.read_text()) == {"text": "x" * 100}
        result = client.get(f"/v1/plans/{plan['id']}/tasks/a/result", headers=ADMIN).json()
        assert result["output"]["text"] == "x" * 100


def test_training_samples_redact_secrets_and_honour_sensitive(brain_app):
    client, settings = brain_app
    worker = register(client, "gpu", ("llm",))
    secret_prompt = "use api_key=abcd1234efgh and token admin-secret-token please"
    llm = {"type": "llm", "model": "m"}
    tasks = [
        {**llm, "id": "open", "priority": 9, "payload": {"prompt": secret_prompt}},
        {**llm, "id": "private", "sensitive": True, "payload": {"prompt": "diary"}},
    ]
    plan = {"name": "p", "tasks": tasks}
    assert client.post("/v1/plans", headers=ADMIN, json=plan).status_code == 201
    for _ in range(2):
        task = claim(client, worker)
        body = {
            "attempt": 1,
            "lease_id": task["lease_id"],
            "output": {"text": "ok ghp_" + "a1" * 12},
        }
        client.post(f"/v1/tasks/{task['task_id']}/complete", headers=worker, json=body)
    samples = [json.loads(line) for line in settings.training_file.read_text().splitlines()]
    by_task = {s["task_id"]: s for s in samples}
    assert "abcd1234efgh" not in by_task["open"]["prompt"]
    assert "admin-secret-token" not in by_task["open"]["prompt"]
    assert "please" in by_task["open"]["prompt"] and "[REDACTED]" in by_task["open"]["response"]
    assert by_task["private"]["prompt"] is None and by_task["private"]["redacted"] == "sensitive"


def test_cancel_routes(brain_app):
    client, _ = brain_app
    tasks = [{"id": "a", "type": "noop"}, {"id": "b", "type": "noop", "depends_on": ["a"]}]
    plan = client.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": tasks}).json()
    answer = client.post(f"/v1/plans/{plan['id']}/tasks/a/cancel", headers=ADMIN).json()
    assert answer == {"cancelled": True}
    view = client.get(f"/v1/plans/{plan['id']}", headers=ADMIN).json()
    assert [t["state"] for t in view["tasks"]] == ["CANCELLED", "UPSTREAM_FAILED"]
    assert view["status"] == "failed"
    assert client.post("/v1/plans/nope/cancel", headers=ADMIN).status_code == 404
