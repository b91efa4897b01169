"""The dashboard's page and data routes in-process: queue, events, models, static files."""

from __future__ import annotations

import json
import threading
import time
import tomllib
from fnmatch import fnmatch
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain.api.app import create_app
from airig.brain.api.routes import dashboard as routes_dashboard
from airig.brain.store import event_search
from airig.brain.store import queue as task_queue
from airig.provision.cache import VerifyCache
from airig.services import gate

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
REPO = Path(__file__).resolve().parents[3]
DATA_ROUTES = ("/v1/queue", "/v1/events", "/v1/models")


def _client(tmp_path, **env):
    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0, **env)
    return TestClient(create_app(settings))


@pytest.fixture
def client(tmp_path):
    # A closed port: the models route must answer without a gate.
    with _client(tmp_path, BRAIN_MODELS_URL="http://127.0.0.1:9/models") as client:
        yield client


def brain_of(client):
    return client.app.state.brain


# ------------------------------------------------------------------ the page
def test_the_page_and_its_files_are_served_without_a_token(client):
    page = client.get("/dashboard")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script src="/dashboard/app.js"' in page.text
    # No inline script may run in the page that holds the admin token.
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "form-action 'none'" in csp and "frame-ancestors 'none'" in csp
    script = client.get("/dashboard/app.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert "sessionStorage" in script.text
    style = client.get("/dashboard/style.css")
    assert style.headers["content-type"].startswith("text/css")


@pytest.mark.parametrize(
    "path", ["/dashboard/nope.js", "/dashboard/..%2Fapp.py", "/dashboard/%2e%2e%2fdb.py"]
)
def test_only_the_dashboard_files_are_served(client, path):
    answer = client.get(path)
    assert answer.status_code == 404
    assert "detail" in answer.json()


def test_the_token_form_cannot_put_the_token_in_a_url(client):
    # Without script a GET form would send ?token=... : the form posts, and CSP forbids it.
    page = client.get("/dashboard").text
    assert 'id="token-form"' in page and 'method="post"' in page


def test_the_wheel_carries_the_dashboard_files():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["airig.brain"]
    for name in routes_dashboard.ASSETS:
        relative = f"dashboard/static/{name}"
        assert (routes_dashboard.STATIC / name).is_file()
        assert any(fnmatch(relative, pattern) for pattern in patterns), relative


def test_the_schema_documents_the_data_routes_but_not_the_page(client):
    paths = client.get("/openapi.json").json()["paths"]
    for route in DATA_ROUTES:
        assert {"200", "401", "403"} <= set(paths[route]["get"]["responses"])
    assert "422" in paths["/v1/events"]["get"]["responses"]
    assert not [p for p in paths if p.startswith("/dashboard")]


# ------------------------------------------------------------------ admin only
def test_the_data_is_admin_only(client):
    worker = client.post(
        "/v1/workers/register", headers=BOOT, json={"name": "w1", "classes": ["cpu"]}
    ).json()["token"]
    submit = client.post("/v1/tokens", headers=ADMIN, json={"scope": "submit"}).json()["token"]
    for route in DATA_ROUTES:
        assert client.get(route).status_code == 401
        assert client.get(route, headers={"Authorization": "Bearer wrong"}).status_code == 401
        for token in (worker, submit, "bootstrap-secret-token"):
            assert (
                client.get(route, headers={"Authorization": f"Bearer {token}"}).status_code == 403
            )
        assert client.get(route, headers=ADMIN).status_code == 200


# ------------------------------------------------------------------ queue
def test_queue_counts_per_class_model_and_state_and_the_oldest_wait(client):
    brain = brain_of(client)
    submitted = time.time() - 120
    plan = h.submit(brain, [
        h.noop("a", model="m1"), h.noop("b", ["a"], model="m1"), h.noop("c", model="m1"),
        h.noop("d"), h.noop("e", task_class="llm", model="m2"),
    ], now=submitted)  # fmt: skip
    leased, _ = h.claim(brain, time.time(), worker="w1", classes=("cpu",), models=("m1",))
    h.do(brain, plan, leased["key"], "start", time.time())
    q = client.get("/v1/queue", headers=ADMIN).json()
    assert q["totals"] == {"PENDING": 1, "READY": 3, "LEASED": 0, "RUNNING": 1, "RETRY_WAIT": 0}
    by_class = {g["name"]: g["counts"] for g in q["by_class"]}
    assert by_class["cpu"] == {"PENDING": 1, "READY": 2, "LEASED": 0, "RUNNING": 1, "RETRY_WAIT": 0}
    assert by_class["llm"]["READY"] == 1
    by_model = {g["name"]: g["counts"] for g in q["by_model"]}
    assert set(by_model) == {"m1", "m2", None}
    assert by_model["m1"]["RUNNING"] + by_model["m1"]["READY"] + by_model["m1"]["PENDING"] == 3
    assert by_model[None]["READY"] + by_model[None]["RUNNING"] == 1
    # The oldest READY task has waited since submission, measured against max_wait_s.
    assert 110 < q["oldest_ready_wait_s"] < 600
    assert q["max_wait_s"] == brain.settings.max_wait_s
    assert q["oldest_ready"]["plan_id"] == plan and q["oldest_ready"]["state"] == "READY"
    # The running task is named with its worker: the cluster page's "current task".
    assert [(t["task"], t["worker_id"], t["state"]) for t in q["active"]] == [
        (leased["key"], "w1", "RUNNING")
    ]


def test_an_empty_queue_has_no_oldest_wait(client):
    q = client.get("/v1/queue", headers=ADMIN).json()
    assert q["oldest_ready_wait_s"] is None and q["oldest_ready"] is None
    assert q["active"] == [] and set(q["totals"].values()) == {0}


# ------------------------------------------------------------------ events
@pytest.fixture
def two_plans(client):
    brain = brain_of(client)
    now = time.time()
    first = h.submit(brain, [h.noop("a"), h.noop("b", ["a"])], now=now)
    second = h.submit(brain, [h.noop("x")], now=now)
    task, _ = h.claim(brain, now, worker="w1")
    h.do(brain, task["plan_id"], task["key"], "start", now)
    h.do(brain, task["plan_id"], task["key"], "complete", now)
    return first, second, task


def events(client, **params):
    answer = client.get("/v1/events", headers=ADMIN, params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_events_are_newest_first_and_filtered(client, two_plans):
    first, second, done = two_plans
    every = events(client)["events"]
    ids = [e["id"] for e in every]
    assert ids == sorted(ids, reverse=True) and len(ids) >= 6
    assert {e["plan"] for e in events(client, plan=second)["events"]} == {second}
    completed = events(client, type="task_completed")["events"]
    assert [(e["plan"], e["task_id"]) for e in completed] == [(done["plan_id"], done["key"])]
    by_task = events(client, plan=first, task="b")["events"]
    assert by_task and {e["task_id"] for e in by_task} == {"b"}
    by_worker = events(client, worker="w1")["events"]
    assert {e["event_type"] for e in by_worker} >= {"task_leased", "task_completed"}
    assert {e["worker_id"] for e in by_worker} == {"w1"}
    assert events(client, worker="nobody")["events"] == []


def test_events_after_an_id_and_bounded_by_limit(client, two_plans):
    answer = events(client)
    newest = answer["last_id"]
    assert newest == answer["events"][0]["id"]
    assert events(client, after_id=newest)["events"] == []
    assert [e["id"] for e in events(client, after_id=newest - 2)["events"]] == [newest, newest - 1]
    assert len(events(client, limit=2)["events"]) == 2


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": 501}, {"after_id": -1}, {"limit": "x"}, {"plan": "p" * 201}],
)
def test_event_query_parameters_are_validated(client, params):
    answer = client.get("/v1/events", headers=ADMIN, params=params)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"][0] == "query"


def test_without_a_plan_only_the_newest_window_is_searched(client, two_plans, monkeypatch):
    first, _, _ = two_plans
    monkeypatch.setattr(event_search, "EVENT_WINDOW", 2)
    # the submissions are older than the two newest events...
    assert events(client, type="task_submitted")["events"] == []
    # ...but a plan filter reaches all of that plan's events through its index.
    assert len(events(client, plan=first, type="task_submitted")["events"]) == 2


class TestOnSQLitesPlanner:
    """SQLite's store whatever AIRIG_TEST_STORE says: these read SQLite's planner (EXPLAIN
    QUERY PLAN) for the statements tuned for it. ``client`` here overrides the module's."""

    @pytest.fixture
    def client(self, tmp_path):
        with _client(tmp_path, BRAIN_MODELS_URL="http://127.0.0.1:9/models",
                     BRAIN_DATABASE_URL="") as client:  # fmt: skip
            yield client

    @pytest.mark.parametrize("plan", [None, "plan-1"])
    def test_event_queries_use_an_index(self, client, plan):
        sql, params = event_search.events_query(
            500_000, plan, "task_submitted", "a", "w1", after_id=0, limit=50
        )
        with brain_of(client).db.read() as conn:
            steps = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        assert all(step.startswith("SEARCH") for step in steps), steps

    def test_every_poll_of_counts_reads_an_index_only(self, client, two_plans):
        """The queue view and the plans list run on every dashboard poll: with 100k tasks a
        scan of the task rows cost hundreds of ms (benchmarks/dashboard.py)."""
        from airig.brain.api.routes.plans import plan_view
        from airig.brain.store import plans as plan_store

        plan = two_plans[0]
        with brain_of(client).db.read() as conn:
            queue = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {task_queue.LIVE_GROUPS}")]
            counts = [
                row[3]
                for row in conn.execute(f"EXPLAIN QUERY PLAN {plan_store.STATE_COUNTS}", (plan,))
            ]
            row = conn.execute("SELECT * FROM plans WHERE id = ?", (plan,)).fetchone()
            view = plan_view(conn, row, with_tasks=False)
        assert all("COVERING INDEX" in step for step in queue), queue
        assert all("COVERING INDEX" in step for step in counts), counts
        assert view["task_total"] == sum(view["counts"].values()) > 0


# ------------------------------------------------------------------ models
@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:9/models", "unreachable"),
        ("not a url", "not a valid"),
        ("ftp://127.0.0.1/models", "not a valid"),
    ],
)
def test_models_without_a_gate_is_an_answer_not_an_error(tmp_path, url, reason):
    with _client(tmp_path, BRAIN_MODELS_URL=url) as client:
        answer = client.get("/v1/models", headers=ADMIN)
    assert answer.status_code == 200
    body = answer.json()
    assert body["available"] is False and reason in body["reason"] and body["url"] == url


@pytest.fixture
def gate_server(tmp_path, monkeypatch):
    """The real models-ready gate handler on a free loopback port."""
    cache = VerifyCache(tmp_path / "ollama" / ".airig-verified.json")
    cache.mark_model("qwen2.5:0.5b", size=397_821_319, files=4)
    cache.mark_model("nomic-embed-text:latest", size=274_302_450, files=3)
    cache.save()
    missing = tmp_path / "whisper" / ".airig-verified.json"
    monkeypatch.setenv("AIRIG_VERIFY_CACHES", f"{cache.path},{missing}")
    server = ThreadingHTTPServer(("127.0.0.1", 0), gate._Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_models_lists_the_gates_verified_inventory(tmp_path, gate_server):
    with _client(tmp_path, BRAIN_MODELS_URL=f"{gate_server}/models") as client:
        body = client.get("/v1/models", headers=ADMIN).json()
    assert body["available"] is True
    rows = {m["name"]: m for m in body["models"]}
    assert set(rows) == {"qwen2.5:0.5b", "nomic-embed-text:latest"}
    assert rows["qwen2.5:0.5b"]["service"] == "ollama"
    assert rows["qwen2.5:0.5b"]["size"] == 397_821_319 and rows["qwen2.5:0.5b"]["files"] == 4
    assert rows["qwen2.5:0.5b"]["verified_at"]
    sources = {s["service"]: s for s in body["sources"]}
    assert sources["ollama"]["models"] == 2 and sources["ollama"]["error"] is None
    assert "not written" in sources["whisper"]["error"]


class _Garbage(BaseHTTPRequestHandler):
    replies = {"/broken": (500, b"oops"), "/text": (200, b"<html>"), "/list": (200, b"[1, 2]")}

    def do_GET(self) -> None:  # noqa: N802
        code, body = self.replies[self.path]
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize(
    ("path", "reason"),
    [("/broken", "HTTP 500"), ("/text", "not JSON"), ("/list", "not an inventory")],
)
def test_a_gate_answering_nonsense_is_reported(tmp_path, path, reason):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}{path}"
        with _client(tmp_path, BRAIN_MODELS_URL=url) as client:
            body = client.get("/v1/models", headers=ADMIN).json()
    finally:
        server.shutdown()
        server.server_close()
    assert body["available"] is False and reason in body["reason"]


def test_inventory_view_skips_malformed_entries():
    raw = {
        "/caches/comfyui/.airig-verified.json": {
            "models": {"sd.safetensors": {"size": True, "files": "2", "verified_at": 7}}
        },
        "/caches/x/.airig-verified.json": ["not", "a", "cache"],
    }
    view = routes_dashboard.inventory_view("u", json.loads(json.dumps(raw)))
    assert [(m.name, m.size, m.files, m.verified_at) for m in view.models] == [
        ("sd.safetensors", None, None, None)
    ]
    assert {s.service: s.error for s in view.sources} == {"comfyui": None, "x": "not an object"}


# ------------------------------------------------------------------ workers alive / expected
def test_a_worker_scaled_away_leaves_the_expected_count(client):
    """The dashboard stayed amber "2 / 3" after `cpu` workers were scaled 3 → 2 (issue 35
    §5): the worker that stopped cleanly (deregistered) is no longer expected; one gone
    silent still is; one registered again is expected again."""
    tokens = {}
    for name in ("cpu-1", "cpu-2", "cpu-3"):
        answer = client.post("/v1/workers/register", headers=BOOT, json={"name": name})
        assert answer.status_code == 200, answer.text
        tokens[name] = {"Authorization": f"Bearer {answer.json()['token']}"}

    def counts():
        return client.get("/v1/workers", headers=ADMIN).json()["counts"]

    assert counts() == {"alive": 3, "expected": 3, "silent": 0, "stopped": 0}
    assert client.post("/v1/workers/deregister", headers=tokens["cpu-3"]).status_code == 200
    assert counts() == {"alive": 2, "expected": 2, "silent": 0, "stopped": 1}
    with brain_of(client).db.tx() as conn:  # cpu-2 went quiet without a word
        conn.execute(
            "UPDATE workers SET last_heartbeat = ? WHERE id = 'cpu-2'", (time.time() - 3600,)
        )
    assert counts() == {"alive": 1, "expected": 2, "silent": 1, "stopped": 1}
    # a deregistered worker's old token is refused: it cannot make itself expected again
    assert client.post("/v1/workers/heartbeat", headers=tokens["cpu-3"], json={}).status_code == 401
    assert counts()["expected"] == 2
    # scaled back up: cpu-3 registers again and is expected again
    client.post("/v1/workers/register", headers=BOOT, json={"name": "cpu-3"})
    assert counts() == {"alive": 2, "expected": 3, "silent": 1, "stopped": 0}
    # the dashboard shows the brain's count, not the length of the list
    script = (REPO / "airig" / "brain" / "dashboard" / "static" / "app.js").read_text()
    assert "`${counts.alive} / ${counts.expected}`" in script
    assert "workers.length}`" not in script
