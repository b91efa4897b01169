"""The brain's side of a second rig: join tokens, their revocation, the worker's host."""

from __future__ import annotations

import sqlite3

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.store.db import Database

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
PLAN = {"name": "p", "tasks": [{"id": "a", "type": "noop"}]}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def client(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def join_token(client, name="rig-b") -> dict:
    made = client.post("/v1/tokens", headers=ADMIN, json={"scope": "join", "name": name})
    assert made.status_code == 201, made.text
    return made.json()


def register(client, headers, name, host="rig-b", **extra):
    return client.post(
        "/v1/workers/register", headers=headers,
        json={"name": name, "host": host, "classes": ["cpu"], **extra},
    )  # fmt: skip


def test_a_join_token_registers_workers_and_does_nothing_else(client):
    made = join_token(client)
    joined = bearer(made["token"])
    assert made["scope"] == "join" and made["name"] == "rig-b" and made["id"]
    assert client.get("/v1/whoami", headers=joined).json() == {"scope": "join", "name": "rig-b"}
    answer = register(client, joined, "rig-b-gpu0")
    assert answer.status_code == 200, answer.text
    # nothing an admin, a submitter or a worker may do
    assert client.post("/v1/plans", headers=joined, json=PLAN).status_code == 403
    assert client.get("/v1/plans", headers=joined).status_code == 403
    assert client.get("/v1/workers", headers=joined).status_code == 403
    assert client.get("/v1/tokens", headers=joined).status_code == 403
    assert client.post("/v1/tokens", headers=joined, json={"scope": "join"}).status_code == 403
    assert client.delete(f"/v1/tokens/{made['id']}", headers=joined).status_code == 403
    assert client.post("/v1/claims", headers=joined, json={"wait_s": 0}).status_code == 403
    assert client.post("/v1/exchange", headers=joined, json={}).status_code == 403
    assert client.get("/metrics", headers=joined).status_code == 403
    # the worker token it traded for works like any worker's
    worker = bearer(answer.json()["token"])
    assert client.post("/v1/workers/heartbeat", headers=worker, json={}).status_code == 200


def test_workers_list_shows_each_workers_host_and_join_token(client):
    made = join_token(client)
    assert register(client, BOOT, "gpu0", host="rig-a").status_code == 200
    assert register(client, bearer(made["token"]), "rig-b-gpu0").status_code == 200
    listed = {w["name"]: w for w in client.get("/v1/workers", headers=ADMIN).json()["workers"]}
    assert (listed["gpu0"]["host"], listed["gpu0"]["join_token"]) == ("rig-a", None)
    assert (listed["rig-b-gpu0"]["host"], listed["rig-b-gpu0"]["join_token"]) == (
        "rig-b", made["id"],
    )  # fmt: skip


@pytest.mark.parametrize("host", ["rig b", "x" * 64, "-rig", "rig/../a", "rïg"])
def test_a_host_that_is_not_a_plain_name_is_refused(client, host):
    assert register(client, BOOT, "w1", host=host).status_code == 422


def test_the_token_list_never_shows_a_token_or_its_hash(client):
    made = join_token(client)
    submit = client.post("/v1/tokens", headers=ADMIN, json={"scope": "submit"}).json()
    answer = client.get("/v1/tokens", headers=ADMIN)
    assert answer.status_code == 200
    listed = answer.json()["tokens"]
    assert {t["id"] for t in listed} == {made["id"], submit["id"]}
    for t in listed:
        assert set(t) == {"id", "scope", "name", "created_at", "revoked", "revoked_at", "trust"}
        assert not t["revoked"]
        assert t["trust"] == ("untrusted" if t["scope"] == "join" else None)
    from airig.brain.api.auth import hash_token

    for secret in (made["token"], submit["token"]):
        assert secret not in answer.text and hash_token(secret) not in answer.text
        assert hash_token(secret)[:12] not in answer.text


def test_revoking_a_join_token_cuts_off_its_rig(client):
    made = join_token(client)
    other = join_token(client, "rig-c")
    joined = bearer(made["token"])
    worker = bearer(register(client, joined, "rig-b-cpu").json()["token"])
    bystander = bearer(register(client, bearer(other["token"]), "rig-c-cpu").json()["token"])
    local = bearer(register(client, BOOT, "gpu0", host="rig-a").json()["token"])
    plan = client.post("/v1/plans", headers=ADMIN, json=PLAN).json()
    leased = client.post("/v1/claims", headers=worker, json={"wait_s": 0})
    assert leased.status_code == 200, leased.text

    revoked = client.delete(f"/v1/tokens/{made['id']}", headers=ADMIN)
    assert revoked.status_code == 200, revoked.text
    assert revoked.json() == {
        "id": made["id"], "scope": "join", "revoked_now": True, "workers_revoked": ["rig-b-cpu"],
    }  # fmt: skip
    # the join token and its rig's worker token: 401 everywhere
    assert register(client, joined, "rig-b-cpu").status_code == 401
    assert register(client, joined, "rig-b-new").status_code == 401
    assert client.get("/v1/whoami", headers=joined).status_code == 401
    assert client.post("/v1/workers/heartbeat", headers=worker, json={}).status_code == 401
    assert client.post("/v1/exchange", headers=worker, json={}).status_code == 401
    # its running attempt went back to the queue; other rigs are untouched
    task = client.get(f"/v1/plans/{plan['id']}", headers=ADMIN).json()["tasks"][0]
    assert task["state"] in ("READY", "RETRY_WAIT") and "revoked" in task["error"]
    for still in (bystander, local):
        assert client.post("/v1/workers/heartbeat", headers=still, json={}).status_code == 200
    listed = {t["id"]: t for t in client.get("/v1/tokens", headers=ADMIN).json()["tokens"]}
    assert listed[made["id"]]["revoked"] and not listed[other["id"]]["revoked"]
    listed_workers = client.get("/v1/workers", headers=ADMIN).json()["workers"]
    assert not next(w for w in listed_workers if w["name"] == "rig-b-cpu")["alive"]
    # again: idempotent, nothing more to cut off
    again = client.delete(f"/v1/tokens/{made['id']}", headers=ADMIN).json()
    assert again["revoked_now"] is False


def test_revoking_an_unknown_token_is_a_404(client):
    answer = client.delete("/v1/tokens/nope", headers=ADMIN)
    assert answer.status_code == 404 and "token list" in answer.json()["detail"]


def test_a_live_workers_name_stays_its_own_across_rigs(client):
    """The takeover rule holds for join tokens: a live name is not handed to another
    registrant, unless it shows the holder's token."""
    first = register(client, BOOT, "gpu0", host="rig-a").json()["token"]
    joined = bearer(join_token(client)["token"])
    taken = register(client, joined, "gpu0")
    assert taken.status_code == 409 and "belongs to another rig" in taken.json()["detail"]
    assert register(client, joined, "gpu0", previous_token=first).status_code == 200


def silence(client, name: str) -> None:
    """As if the worker crashed a lease ago: its last heartbeat is long past."""
    with client.app.state.brain.db.tx() as conn:  # the running brain's store, either engine
        conn.execute("UPDATE workers SET last_heartbeat = 1.0 WHERE id = ?", (name,))


def test_a_silent_workers_name_goes_back_to_its_own_rig_only(client):
    """Past its lease a name is no longer held, but it still belongs to the rig that
    registered it: that rig's join token (or, for a local worker, the bootstrap token)
    takes it back; another rig gets 409 and is told what to do."""
    made = join_token(client)
    rig_b, rig_c = bearer(made["token"]), bearer(join_token(client, "rig-c")["token"])
    assert register(client, rig_b, "rig-b-gpu0").status_code == 200
    assert register(client, BOOT, "gpu0", host="rig-a").status_code == 200
    silence(client, "rig-b-gpu0")
    silence(client, "gpu0")
    for thief, name in ((rig_c, "rig-b-gpu0"), (BOOT, "rig-b-gpu0"), (rig_c, "gpu0")):
        taken = register(client, thief, name, host="rig-c")
        assert taken.status_code == 409, (name, taken.text)
        detail = taken.json()["detail"]
        assert "belongs to another rig" in detail and "WORKER_NAME" in detail
        assert "Retry-After" not in taken.headers  # waiting would not help
    assert register(client, rig_b, "rig-b-gpu0").status_code == 200
    assert register(client, BOOT, "gpu0", host="rig-a").status_code == 200
    listed = {w["name"]: w for w in client.get("/v1/workers", headers=ADMIN).json()["workers"]}
    assert (listed["rig-b-gpu0"]["join_token"], listed["gpu0"]["join_token"]) == (made["id"], None)
    # a revoked rig owns nothing: joined again with a new token, it gets its names back
    client.delete(f"/v1/tokens/{made['id']}", headers=ADMIN)
    again = bearer(join_token(client)["token"])
    assert register(client, again, "rig-b-gpu0").status_code == 200


OLD_SCHEMA = """
CREATE TABLE workers (id TEXT PRIMARY KEY, token_hash TEXT NOT NULL,
    classes_json TEXT NOT NULL, gpu_index INTEGER, gpus_json TEXT NOT NULL DEFAULT '[]',
    models_json TEXT NOT NULL DEFAULT '[]', registered_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL);
CREATE TABLE tokens (token_hash TEXT PRIMARY KEY, scope TEXT NOT NULL, name TEXT NOT NULL,
    created_at REAL NOT NULL);
"""


def test_a_database_from_before_rigs_keeps_its_tokens_and_workers(tmp_path):
    from airig.brain.api.auth import hash_token, identify_token

    path = tmp_path / "state" / "brain.db"
    path.parent.mkdir()
    old = sqlite3.connect(path)
    old.executescript(OLD_SCHEMA)
    old.execute("INSERT INTO tokens VALUES (?, 'submit', 'ci', 1.0)", (hash_token("old-sub"),))
    old.execute(
        "INSERT INTO workers VALUES ('w1', ?, '[\"cpu\"]', NULL, '[]', '[]', 1.0, 1.0)",
        (hash_token("old-worker"),),
    )
    old.commit()
    old.close()
    db = Database(path)
    settings = h.make_settings(tmp_path)
    try:
        who = identify_token(settings, db, "old-sub")
        assert (who.scope, who.name) == ("submit", "ci") and who.token_id
        assert identify_token(settings, db, "old-worker").name == "w1"
        with db.read() as conn:
            worker = conn.execute("SELECT host, registered_by FROM workers").fetchone()
        assert (worker["host"], worker["registered_by"]) == ("", None)
    finally:
        db.close()
    # opening it again changes nothing (the id stays, no column is added twice)
    db = Database(path)
    try:
        assert identify_token(settings, db, "old-sub").token_id == who.token_id
    finally:
        db.close()
