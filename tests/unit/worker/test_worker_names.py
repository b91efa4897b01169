"""Stable worker names (issue 22 §5): a CPU worker is named by its Compose slot, so an
`up` that recreates it leaves no silent ghost at the brain; a ghost can be forgotten."""

from __future__ import annotations

import socket
import struct
import threading

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.worker import naming
from airig.worker.settings import WorkerSettings

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}


def ptr_answer(query: bytes, target: str) -> bytes:
    """Docker's DNS answer to a PTR query: the question, then one PTR record whose owner
    is a compression pointer to the question's name (RFC 1035 4.1.4)."""
    (query_id,) = struct.unpack(">H", query[:2])
    question = query[12:]
    header = struct.pack(">HHHHHH", query_id, 0x8180, 1, 1, 0, 0)
    rdata = naming._encode(target)
    record = struct.pack(">HHHIH", 0xC00C, naming.PTR, naming.IN, 600, len(rdata)) + rdata
    return header + question + record


@pytest.fixture
def dns(monkeypatch):
    """A DNS server on 127.0.0.1 that names every address as the container ``answer[0]``."""
    answer = ["airig-agents-worker-cpu-2.ai-network"]
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(5)

    def serve() -> None:
        while True:
            try:
                query, peer = server.recvfrom(512)
            except OSError:
                return
            server.sendto(ptr_answer(query, answer[0]), peer)

    threading.Thread(target=serve, daemon=True).start()
    monkeypatch.setattr(naming, "DNS_PORT", server.getsockname()[1])
    monkeypatch.setattr(naming, "_nameserver", lambda: "127.0.0.1")
    for key in ("WORKER_NAME", "WORKER_NAME_PREFIX", "WORKER_SERVICE"):
        monkeypatch.delenv(key, raising=False)
    yield answer
    server.close()


def test_a_cpu_worker_is_named_by_its_compose_slot(dns):
    assert WorkerSettings(WORKER_SERVICE="worker-cpu").name == "cpu-2"
    # a joined rig's worker: "<rig>-" before it, as for gpu0
    joined = WorkerSettings(WORKER_SERVICE="worker-cpu", WORKER_NAME_PREFIX="rig-b-")
    assert joined.name == "rig-b-cpu-2"
    # a name the launcher gives (GPU workers) wins; no service: the hostname, as before
    assert WorkerSettings(WORKER_SERVICE="worker-cpu", WORKER_NAME="gpu0").name == "gpu0"
    assert WorkerSettings().name == socket.gethostname()


def test_a_dns_name_that_is_not_the_slot_keeps_the_hostname(dns):
    dns[0] = "somebody-else.ai-network"
    assert WorkerSettings(WORKER_SERVICE="worker-cpu").name == socket.gethostname()


@pytest.mark.parametrize(
    ("dns_name", "slot"),
    [
        ("airig-agents-worker-cpu-1.ai-network", "cpu-1"),
        ("lab2-agents-worker-cpu-12.lab2-net.", "cpu-12"),
        ("airig-agents-worker-cpu-x.ai-network", None),
        ("airig-agents-brain-1.ai-network", None),
        ("worker-cpu-1.ai-network", None),
    ],
)
def test_slot_of_a_container_name(dns_name, slot):
    assert naming.slot_of(dns_name, "worker-cpu") == slot


def test_a_pointer_loop_in_an_answer_is_refused():
    loop = b"\0" * 12 + b"\xc0\x0c"
    with pytest.raises(ValueError):
        naming._read_name(loop, 12)


# ---------------------------------------------------------------- the brain's side
@pytest.fixture
def client(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0, BRAIN_REAPER_INTERVAL_S=3600)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def register(client, name, headers=BOOT, **extra):
    body = {"name": name, "host": "rig-a", "classes": ["cpu"], **extra}
    return client.post("/v1/workers/register", headers=headers, json=body)


def names(client) -> list[str]:
    return [w["name"] for w in client.get("/v1/workers", headers=ADMIN).json()["workers"]]


def test_a_recreated_slot_takes_its_name_back_and_another_rig_cannot(client):
    first = register(client, "cpu-1").json()["token"]
    worker = {"Authorization": f"Bearer {first}"}
    assert client.post("/v1/workers/deregister", headers=worker).status_code == 200
    assert register(client, "cpu-1").status_code == 200  # the new container, same rig
    assert names(client) == ["cpu-1"]  # one worker, no ghost
    made = client.post("/v1/tokens", headers=ADMIN, json={"scope": "join", "name": "rig-b"})
    other = {"Authorization": f"Bearer {made.json()['token']}"}
    refused = register(client, "cpu-1", headers=other)
    assert refused.status_code == 409 and "another rig" in refused.json()["detail"]


def test_forgetting_a_silent_worker_removes_it_and_clears_its_alert(client):
    brain = client.app.state.brain
    register(client, "cpu-3")
    register(client, "cpu-1")
    brain.write(
        lambda conn, *_: conn.execute("UPDATE workers SET last_heartbeat = 1 WHERE id = 'cpu-3'")
    )  # its container was removed without a word (0 would be a clean stop: RETIRED)
    brain.started_at = 0.0
    fired = brain.check_alerts()
    assert [(n.kind, n.subject, n.fired) for n in fired] == [("worker_down", "cpu-3", True)]

    assert client.delete("/v1/workers/cpu-3", headers=BOOT).status_code == 403  # admin only
    done = client.delete("/v1/workers/cpu-3", headers=ADMIN)
    assert done.status_code == 200, done.text
    assert names(client) == ["cpu-1"]
    with brain.db.read() as conn:
        assert conn.execute("SELECT COUNT(*) FROM alerts").fetchone()[0] == 0
    cleared = client.get("/v1/events", params={"type": "alert_cleared"}, headers=ADMIN)
    assert [e["subject"] for e in cleared.json()["events"]] == ["cpu-3"]


def test_a_live_or_unknown_worker_is_not_forgotten(client):
    register(client, "cpu-1")
    live = client.delete("/v1/workers/cpu-1", headers=ADMIN)
    assert live.status_code == 409 and "alive" in live.json()["detail"]
    assert client.delete("/v1/workers/nobody", headers=ADMIN).status_code == 404
    assert names(client) == ["cpu-1"]
