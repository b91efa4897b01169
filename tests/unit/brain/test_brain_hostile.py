"""The brain's HTTP surface against hostile and unlucky input (issue 9).

Each test reproduces one reported defect: what used to leak a file, buffer an unbounded
body, hand a worker's name to a stranger or answer 500 must now be a 4xx with a reason
and change nothing.
"""

from __future__ import annotations

import asyncio
import json
import time

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app, served
from airig.brain.api.fastpath import ExchangeFastPath
from airig.brain.store import engines
from airig.common.protocol import ErrorBody, PlanErrorBody

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}


@pytest.fixture
def settings(tmp_path):
    return h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0, BRAIN_MAX_PLAN_BYTES=4096)


@pytest.fixture
def client(settings):
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def register(client, name="w1", **extra):
    answer = client.post("/v1/workers/register", headers=BOOT, json={"name": name, **extra})
    assert answer.status_code == 200, answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def submit(client, tasks):
    answer = client.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": tasks})
    assert answer.status_code == 201, answer.text
    return answer.json()


def count_rows(settings, table):
    db = engines.open_store(settings.db_path, settings.database_url)  # as the brain opens it
    try:
        with db.read() as conn:
            return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        db.close()


# ------------------------------------------------------------------ 1. path traversal
def test_task_file_route_does_not_serve_the_database(client, settings):
    # results at <tmp>/results, database at <tmp>/state/brain.db: "../state" reached it.
    for url in (
        "/v1/plans/%2e%2e/tasks/state/files/brain.db",
        "/v1/plans/../tasks/state/files/brain.db",
        "/v1/plans/%2E%2E/tasks/state/files/brain.db-wal",
    ):
        answer = client.get(url, headers=ADMIN)  # httpx folds a literal ".." itself
        assert answer.status_code in (404, 405), (url, answer.status_code)
        assert b"SQLite" not in answer.content


def test_task_file_route_does_not_follow_a_planted_symlink(client, settings, tmp_path):
    plan = submit(client, [h.noop("a")])
    folder = settings.results_dir / plan["id"] / "a"
    folder.mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the results volume")
    (folder / "link.txt").symlink_to(secret)
    (folder / "real.txt").write_text("inside")
    url = f"/v1/plans/{plan['id']}/tasks/a/files"
    assert client.get(f"{url}/link.txt", headers=ADMIN).status_code == 404
    assert client.get(f"{url}/real.txt", headers=ADMIN).text == "inside"
    assert (
        client.get(f"/v1/plans/{plan['id']}/tasks/b/files/real.txt", headers=ADMIN).status_code
        == 404
    )


# ------------------------------------------------ 2. bodies: token first, then bounded
async def _asgi(app, method, path, headers, chunks):
    """Drive the ASGI app by hand: how many body chunks it read, and its answer."""
    read = 0
    pending = list(chunks)
    sent: list[dict] = []

    async def receive():
        nonlocal read
        if not pending:
            return {"type": "http.disconnect"}
        read += 1
        body = pending.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http", "method": method, "path": path, "raw_path": path.encode(),
        "query_string": b"", "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
        "http_version": "1.1", "scheme": "http", "server": ("test", 80),
        "client": ("test", 1), "root_path": "", "app": app,
    }  # fmt: skip
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return read, status, json.loads(body or b"null")


MiB = b"x" * (1024 * 1024)


@pytest.mark.parametrize("path", ["/v1/tokens", "/v1/workers/register", "/v1/plans",
                                  "/v1/exchange", "/v1/claims"])  # fmt: skip
def test_no_token_is_a_401_before_any_body_is_read(client, path):
    app = served(client.app)
    for headers in ([], [("authorization", "Bearer nope")]):
        read, status, body = asyncio.run(_asgi(app, "POST", path, headers, [MiB] * 500))
        assert (read, status) == (0, 401), (path, headers, read, status)
        assert "token" in body["detail"]


def test_a_declared_oversized_body_is_a_413_before_it_is_read(client):
    app = served(client.app)
    headers = [("authorization", ADMIN["Authorization"]), ("content-length", str(500 * 2**20))]
    for path in ("/v1/tokens", "/v1/plans"):
        read, status, _ = asyncio.run(_asgi(app, "POST", path, headers, [MiB] * 500))
        assert (read, status) == (0, 413), path


def test_an_undeclared_oversized_body_stops_at_the_bound(client, settings):
    app = served(client.app)
    headers = [("authorization", ADMIN["Authorization"])]  # chunked: no Content-Length
    read, status, body = asyncio.run(_asgi(app, "POST", "/v1/plans", headers, [b"{" * 1024] * 64))
    assert status == 413 and read <= 5, (read, status)  # 4 KiB bound: stops at chunk 5
    assert (
        "4096" in body["detail"]["message"]
        if isinstance(body["detail"], dict)
        else "4096" in body["detail"]
    )
    read, status, _ = asyncio.run(_asgi(app, "POST", "/v1/tokens", headers, [MiB] * 50))
    assert status == 413 and read <= 2, (read, status)
    assert count_rows(settings, "plans") == 0


def test_file_uploads_are_streamed_and_bounded(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0, BRAIN_MAX_FILE_BYTES=1000)
    with TestClient(create_app(settings)) as client:
        worker = register(client)
        plan = submit(client, [h.noop("a")])
        task = client.post("/v1/claims", headers=worker, json={"wait_s": 0}).json()
        url = f"/v1/tasks/{task['task_id']}/files/out.bin"
        params = {"attempt": task["attempt"], "lease_id": task["lease_id"]}
        too_big = client.put(url, headers=worker, params=params, content=b"y" * 1001)
        assert too_big.status_code == 413
        folder = settings.results_dir / plan["id"] / "a"
        assert not folder.exists() or list(folder.iterdir()) == []  # nothing half-written
        ok = client.put(url, headers=worker, params=params, content=b"y" * 1000)
        assert ok.status_code == 200 and (folder / "out.bin").stat().st_size == 1000
        stale = client.put(url, headers=worker, params={**params, "lease_id": "x"}, content=b"z")
        assert stale.status_code == 409 and (folder / "out.bin").read_bytes() == b"y" * 1000


# --------------------------------------------------------- 3. worker name takeover
def test_a_live_workers_name_cannot_be_taken_with_the_bootstrap_token(client, settings):
    victim = register(client, "gpu0")
    submit(client, [h.noop("a")])
    task = client.post("/v1/claims", headers=victim, json={"wait_s": 0}).json()
    thief = client.post("/v1/workers/register", headers=BOOT, json={"name": "gpu0"})
    assert thief.status_code == 409 and "held by a live worker" in thief.json()["detail"]
    assert int(thief.headers["Retry-After"]) >= 1
    lease = {"attempt": task["attempt"], "lease_id": task["lease_id"]}
    renewed = client.post(f"/v1/tasks/{task['task_id']}/heartbeat", headers=victim, json=lease)
    assert renewed.status_code == 200  # the victim's lease and token still work


def test_the_same_worker_takes_its_name_back_with_its_old_token(client):
    old = register(client, "gpu0")
    token = old["Authorization"].split()[1]
    again = client.post("/v1/workers/register", headers=BOOT,
                        json={"name": "gpu0", "previous_token": token})  # fmt: skip
    assert again.status_code == 200
    assert client.post("/v1/workers/heartbeat", headers=old, json={}).status_code == 401


def test_a_deregistered_or_lapsed_name_is_free(tmp_path):
    settings = h.make_settings(tmp_path, BRAIN_LEASE_S=0.3)
    with TestClient(create_app(settings)) as client:
        first = register(client, "gpu0")
        assert client.post("/v1/workers/deregister", headers=first).status_code == 200
        assert client.post("/v1/workers/heartbeat", headers=first, json={}).status_code == 401
        register(client, "gpu0")  # at once after a clean stop
        time.sleep(0.4)  # a crashed holder: free once its heartbeat is a lease old
        register(client, "gpu0")


# ---------------------------------------------------------------- 5. token bytes
def test_a_non_ascii_token_is_a_401_not_a_500(client):
    for token in (b"Bearer \xff\xfe", "Bearer caf\u00e9".encode("latin-1"), b"Bearer \xc3\xa9"):
        headers = {"Authorization": token}
        assert client.get("/v1/plans", headers=headers).status_code == 401
        assert client.post("/v1/plans", headers=headers, content=b"{}").status_code == 401
        assert client.post("/v1/exchange", headers=headers, json={}).status_code == 401
    fast = TestClient(ExchangeFastPath(client.app))
    assert (
        fast.post("/v1/exchange", headers={"Authorization": b"Bearer \xff"}, json={}).status_code
        == 401
    )


# --------------------------------------------------------- 6 and 8. values that 500'd
def test_a_lone_surrogate_is_refused_at_submission(client, settings):
    body = b'{"name": "p", "tasks": [{"id": "a", "type": "noop", "payload": {"echo": "\\ud800"}}]}'
    answer = client.post("/v1/plans", headers={**ADMIN, "content-type": "application/json"},
                         content=body)  # fmt: skip
    assert answer.status_code == 422, answer.text
    PlanErrorBody.model_validate(answer.json())
    name = b'{"name": "\\udfff", "tasks": [{"id": "a", "type": "noop"}]}'
    assert client.post("/v1/plans", headers=ADMIN, content=name).status_code == 422
    assert count_rows(settings, "tasks") == 0


def test_reports_with_unstorable_values_are_422_on_both_paths(client):
    worker = register(client)
    submit(client, [h.noop("a")])
    task = client.post("/v1/claims", headers=worker, json={"wait_s": 0}).json()
    lease = {"attempt": task["attempt"], "lease_id": task["lease_id"]}
    url = f"/v1/tasks/{task['task_id']}/complete"
    bad = [
        b'{"attempt": %d, "lease_id": "%s", "output": {"x": NaN}}',
        b'{"attempt": %d, "lease_id": "%s", "output": {"x": "\\ud800"}}',
        b'{"attempt": %d, "lease_id": "%s", "output": {"x": 99999999999999999999999}}',
    ]
    for template in bad:
        body = template % (lease["attempt"], lease["lease_id"].encode())
        answer = client.post(url, headers={**worker, "content-type": "application/json"},
                             content=body)  # fmt: skip
        assert answer.status_code == 422, (body, answer.text)
    as_json = {**worker, "content-type": "application/json"}
    nan = client.post("/v1/workers/heartbeat", headers=as_json,
                      content=b'{"gpus": [{"index": 0, "temperature_c": NaN}]}')  # fmt: skip
    assert nan.status_code == 422
    assert client.get("/v1/workers", headers=ADMIN).status_code == 200
    wait = client.post("/v1/claims", headers={**worker, "content-type": "application/json"},
                       content=b'{"wait_s": NaN}')  # fmt: skip
    assert wait.status_code == 422  # the error echoes no input it cannot encode
    assert client.post(url, headers=worker, json={**lease, "output": {"ok": 1}}).status_code == 200


@pytest.mark.parametrize("path", ["fastapi", "fast-path"])
def test_exchange_with_invalid_utf8_or_huge_ids_answers_json(client, path):
    app = ExchangeFastPath(client.app) if path == "fast-path" else client.app
    http = TestClient(app)
    worker = register(client)
    garbage = http.post(
        "/v1/exchange",
        headers={**worker, "content-type": "application/json"},
        content=b'{"reports": [], "claim": {"resident_models": ["\xff"]}}',
    )
    assert garbage.status_code in (400, 422) and garbage.json()["detail"]
    huge = 2**63
    answer = http.post("/v1/exchange", headers=worker, json={"reports": [
        {"action": "renew", "task_id": huge, "attempt": 1, "lease_id": "x"},
        {"action": "renew", "task_id": 5, "attempt": 1, "lease_id": "x"},
    ]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert [r["status"] for r in answer.json()["results"]] == [404, 404]


def test_a_task_id_past_64_bits_is_a_404(client):
    worker = register(client)
    lease = {"attempt": 1, "lease_id": "x"}
    for action in ("start", "heartbeat", "complete", "release"):
        answer = client.post(f"/v1/tasks/{2**63}/{action}", headers=worker, json=lease)
        assert answer.status_code == 404, (action, answer.text)
    answer = client.put(
        f"/v1/tasks/{2**64}/files/a.txt", headers=worker, params=lease, content=b"a"
    )
    assert answer.status_code == 404


# --------------------------------------------------------------- /metrics, a choice
def test_metrics_need_a_token_unless_made_public(client, tmp_path):
    assert client.get("/metrics").status_code == 401
    submitter = client.post("/v1/tokens", headers=ADMIN, json={"scope": "submit"}).json()
    scraper = client.post("/v1/tokens", headers=ADMIN, json={"scope": "metrics"}).json()
    assert (
        client.get(
            "/metrics", headers={"Authorization": f"Bearer {submitter['token']}"}
        ).status_code
        == 403
    )
    assert (
        client.get("/metrics", headers={"Authorization": f"Bearer {scraper['token']}"}).status_code
        == 200
    )
    assert "airig_" in client.get("/metrics", headers=ADMIN).text
    public = h.make_settings(tmp_path / "p", BRAIN_METRICS_PUBLIC="1")
    with TestClient(create_app(public)) as open_client:
        assert open_client.get("/metrics").status_code == 200


# ------------------------------------------------------------------ 10. OpenAPI
def test_openapi_documents_the_plan_route_and_every_refusal(client):
    spec = client.get("/openapi.json").json()
    post = spec["paths"]["/v1/plans"]["post"]
    assert set(post["requestBody"]["content"]) == {"application/json", "application/yaml",
                                                   "text/markdown"}  # fmt: skip
    assert {"401", "403", "409", "413", "422"} <= set(post["responses"])
    assert "PlanRequest" in spec["components"]["schemas"]
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            if path.startswith("/v1/"):
                assert {"401", "403"} <= set(operation["responses"]), (method, path)
    refused = client.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": [{"id": "a"}]})
    assert refused.status_code == 422
    PlanErrorBody.model_validate(refused.json())
    unreadable = client.post("/v1/plans", headers={**ADMIN, "content-type": "application/json"},
                             content=b"{nope")  # fmt: skip
    PlanErrorBody.model_validate(unreadable.json())
    ErrorBody.model_validate(client.get("/v1/plans/nope", headers=ADMIN).json())


def test_the_published_plan_body_is_what_the_route_accepts(client):
    """Every field the schema publishes for a submitted plan is accepted, and only those:
    `fixes` is the brain's answer (the task classes it inferred), not part of a request."""
    spec = client.get("/openapi.json").json()
    json_body = spec["paths"]["/v1/plans"]["post"]["requestBody"]["content"]["application/json"]
    published = spec["components"]["schemas"][json_body["schema"]["$ref"].rsplit("/", 1)[1]]
    every = {"name": "p", "description": "what it does", "rerun": False,
             "tasks": [{"id": "a", "type": "noop"}]}  # fmt: skip
    assert set(published["properties"]) == set(every)
    assert published["additionalProperties"] is False and published["required"] == ["tasks"]
    accepted = client.post("/v1/plans", headers=ADMIN, json=every)
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["fixes"][0]["field"] == "task_class"  # written by the brain
    unnamed = client.post("/v1/plans", headers=ADMIN, json={"tasks": every["tasks"]})
    assert unnamed.status_code == 201  # the name is optional, as published


# --------------------------------------------------------- 11. GPU telemetry bounds
REAL_GPU = {"index": 7, "name": "AMD Instinct MI355X", "vram_total_mb": 294_912,
            "vram_free_mb": 1024, "temperature_c": 95.0, "power_w": 1400.0}  # fmt: skip


@pytest.mark.parametrize(
    "gpu",
    [
        {"index": 0, "vram_total_mb": 10**30},
        {"index": 0, "vram_total_mb": -1},
        {"index": 0, "vram_free_mb": 10**9},
        {"index": 0, "vram_total_mb": 8192, "vram_free_mb": 8193},
        {"index": -1},
        {"index": 4097},
        {"index": 0, "temperature_c": 1e6},
        {"index": 0, "temperature_c": -300.0},
        {"index": 0, "power_w": -5.0},
        {"index": 0, "power_w": 1e9},
        {"index": 0, "name": "x" * 1000},
    ],
)
def test_gpu_telemetry_out_of_range_is_a_422(client, gpu):
    refused = client.post("/v1/workers/register", headers=BOOT, json={"name": "w1", "gpus": [gpu]})
    assert refused.status_code == 422, refused.text
    worker = register(client, "w2", gpus=[REAL_GPU])  # the largest cards of today pass
    beat = client.post("/v1/workers/heartbeat", headers=worker, json={"gpus": [gpu]})
    assert beat.status_code == 422, beat.text
    again = client.post("/v1/workers/heartbeat", headers=worker, json={"gpus": [REAL_GPU]})
    assert again.status_code == 200
    listed = client.get("/v1/workers", headers=ADMIN).json()["workers"]
    assert [w["gpus"] for w in listed] == [[REAL_GPU]]


def test_a_worker_reporting_thousands_of_gpus_is_a_422(client):
    many = [{**REAL_GPU, "index": i} for i in range(1000)]
    answer = client.post("/v1/workers/register", headers=BOOT, json={"name": "w1", "gpus": many})
    assert answer.status_code == 422, answer.text[:200]


@pytest.mark.parametrize(
    "name",
    ["w1\n@everyone", "<!channel>", "[click](http://evil.example)", "-w", "w 1", "w/1", "x" * 129],
)
def test_a_worker_name_outside_the_one_pattern_is_refused(client, name):
    """Worker names reach alert titles and notices: newlines, mentions and markup never
    get there (issue 23 §5). Names like `cpu-1`, `rig2-gpu0` or a container id pass."""
    answer = client.post("/v1/workers/register", headers=BOOT, json={"name": name})
    assert answer.status_code == 422, answer.text
    for good in ("cpu-1", "rig2-gpu0", "3f2a9c1b0d4e", "rig.local-cpu_2"):
        register(client, good)


@pytest.mark.parametrize("scope", ["join", "submit", "admin", "metrics"])
@pytest.mark.parametrize("name", ["rig\x00b", "line\nbreak", "bell\x07", "del\x7f"])
def test_a_token_name_with_a_control_character_is_a_422_and_nothing_stored(client, scope, name):
    """A NUL was a retryable 500 on PostgreSQL (its text refuses it) and cut on SQLite."""
    answer = client.post("/v1/tokens", json={"scope": scope, "name": name}, headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert answer.json()["retryable"] is False
    listed = client.get("/v1/tokens", headers=ADMIN).json()
    assert all("\x00" not in t["name"] for t in listed["tokens"]), listed


def test_a_token_name_of_printable_words_is_taken(client):
    answer = client.post(
        "/v1/tokens", json={"scope": "join", "name": "rig b — attic é"}, headers=ADMIN
    )
    assert answer.status_code == 201, answer.text
