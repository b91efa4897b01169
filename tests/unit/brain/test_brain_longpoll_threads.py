"""Idle workers long-polling must not starve lease renewals and completion reports.

The fleet benchmark's kill run (benchmarks/README.md, issue 38): 500 workers on the one
brain left, the queue empty while the run drained, and each claim waited for work inside
one of AnyIO's worker threads (40 in all, shared with every sync route). A renewal or an
exchange carrying a completion then waited behind the long polls for a thread, longer
than its lease: the reaper expired the lease, the completion was refused (409) and the
task ran again, over and over (189 of 4000 tasks never finished). A waiting claim now
waits on the event loop (``exchange.poll_async``, ``Brain.claim_waiters``).

Orderings, not timings: with more long polls than threads, the renewal, the worker
heartbeat and the completion must be answered before any of the long polls is.
"""

from __future__ import annotations

import threading
import time

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.api.fastpath import ExchangeFastPath

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
IDLE = 45  # more than AnyIO's 40 default worker threads
WAIT_S = 10.0  # each idle claim's long poll


@pytest.fixture
def client(tmp_path):
    app = create_app(h.make_settings(tmp_path))
    with TestClient(ExchangeFastPath(app)) as made:
        yield made


def register(client, name):
    answer = client.post("/v1/workers/register", headers=BOOT,
                         json={"name": name, "classes": ["cpu"]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}"}


@pytest.mark.parametrize("route", ["/v1/exchange", "/v1/claims"])
def test_renewals_and_completions_pass_idle_long_polls(client, route):
    busy = register(client, "busy")
    plan = {"name": "p", "tasks": [{"id": "a", "type": "noop", "task_class": "cpu",
                                    "payload": {}}]}  # fmt: skip
    assert client.post("/v1/plans", headers=ADMIN, json=plan).status_code == 201
    got = client.post("/v1/exchange", headers=busy, json={
        "reports": [], "claim": {"wait_s": 0, "start": True, "max_tasks": 1}}).json()  # fmt: skip
    task = got["assignments"][0]
    idle = [register(client, f"idle{n}") for n in range(IDLE)]

    finished: list[str] = []  # in the order the answers came back
    lock = threading.Lock()

    def long_poll(headers):
        claim = {"wait_s": WAIT_S, "start": True, "max_tasks": 1}
        body = {"reports": [], "claim": claim} if route == "/v1/exchange" else claim
        answer = client.post(route, headers=headers, json=body, timeout=WAIT_S + 30)
        with lock:
            finished.append(f"poll {answer.status_code}")

    polls = [threading.Thread(target=long_poll, args=(w,), daemon=True) for w in idle]
    for thread in polls:
        thread.start()
    try:
        time.sleep(1.0)  # every long poll in the brain, waiting (the queue is empty)
        lease = {"attempt": task["attempt"], "lease_id": task["lease_id"]}
        renewed = client.post(f"/v1/tasks/{task['task_id']}/heartbeat", headers=busy, json=lease)
        with lock:
            finished.append(f"renew {renewed.status_code}")
        beat = client.post("/v1/workers/heartbeat", headers=busy, json={"gpus": []})
        with lock:
            finished.append(f"heartbeat {beat.status_code}")
        report = {"action": "complete", "task_id": task["task_id"], **lease,
                  "output": {"text": "ok"}}  # fmt: skip
        done = client.post("/v1/exchange", headers=busy, json={"reports": [report], "claim": None})
        with lock:
            finished.append(f"complete {done.status_code}")
            seen = list(finished)
    finally:
        client.app.app.state.brain.begin_shutdown()  # the long polls end now
        for thread in polls:
            thread.join(timeout=WAIT_S + 30)
    assert done.json()["results"][0]["status"] == 200, done.text
    # none of the long polls had ended: all three went past them
    assert seen == ["renew 200", "heartbeat 200", "complete 200"]
    assert len(finished) == 3 + IDLE
