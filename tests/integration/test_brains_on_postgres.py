"""Two brain processes on one PostgreSQL store behind one address (issue 38).

Workers reach "the brain" through a TCP proxy that hands each new connection to the next
brain that answers, as a load balancer in front of several brains would. Both brains serve
claims and reports side by side; the one holding the timers lock is SIGKILLed mid-plan
together with a worker whose task is running. The plan must still finish with every task
completed exactly once: the other brain answers every request, takes over the timers
(its reaper reaps the dead worker's lease, which nothing else would) and hands out nothing
twice (a claim locks its candidates FOR UPDATE SKIP LOCKED, pg.py).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import pytest
import requests
from brain_procs import (
    ADMIN,
    ADMIN_TOKEN,
    BOOTSTRAP_TOKEN,
    FAST_BRAIN,
    Cluster,
    Proc,
    free_port,
    spawn,
    wait_until,
)

LEADS = "this brain runs the store's timers"


class Proxy:
    """127.0.0.1:port → the backends, each new connection to the next one that accepts."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.port = free_port()
        self._next = 0
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        for _ in range(len(self.backends)):
            port = self.backends[self._next % len(self.backends)]
            self._next += 1
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
                break
            except OSError:
                continue
        else:
            client.close()
            return
        upstream.settimeout(None)
        threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()
        self._pipe(client, upstream)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        self._closing = True
        self._server.close()


def start_brain(root: Path, name: str, port: int, url: str) -> Proc:
    env = {
        "BRAIN_DATABASE_URL": url,
        # the SQLite path is never opened with a URL: a brain that did would make it here
        "BRAIN_DB": str(root / name / "brain.db"),
        "BRAIN_RESULTS_DIR": str(root / "results"),  # shared, as the kit's volume
        "BRAIN_ADMIN_TOKEN": ADMIN_TOKEN, "WORKER_BOOTSTRAP_TOKEN": BOOTSTRAP_TOKEN,
        "BRAIN_LISTEN_HOST": "127.0.0.1", "BRAIN_LISTEN_PORT": str(port),
        **FAST_BRAIN,
    }  # fmt: skip
    proc = spawn("airig.brain", name, env, root)

    def healthy() -> bool:
        if proc.process.poll() is not None:
            raise AssertionError(f"{name} exited:\n{proc.log()}")
        return requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200

    wait_until(healthy, 30, f"{name} to answer\n{proc.log()}")
    return proc


def noop(task_id, deps=(), **payload):
    return {"id": task_id, "type": "noop", "depends_on": list(deps), "payload": payload}


@pytest.fixture
def fleet(tmp_path, pg_url):
    ports = [free_port(), free_port()]
    proxy = Proxy(ports)
    cluster = Cluster(tmp_path, port=proxy.port)
    brains: list[Proc] = []
    try:
        brains.append(start_brain(tmp_path, "brain-a", ports[0], pg_url))
        wait_until(lambda: LEADS in brains[0].log(), 10, "brain-a to take the timers")
        brains.append(start_brain(tmp_path, "brain-b", ports[1], pg_url))
        yield cluster, brains, ports
    finally:
        cluster.stop()
        for brain in brains:
            brain.stop()
        proxy.close()


def test_two_brains_share_a_fleet_and_a_killed_leader_loses_nothing(fleet):
    cluster, (first, second), _ = fleet
    for name in ("w1", "w2", "w3"):
        cluster.start_worker(name)
    items = [noop(f"t{i}", sleep_s=0.4) for i in range(18)]
    tasks = [*items, noop("join", [t["id"] for t in items]), noop("last", ["join"])]
    plan = cluster.submit({"name": "two-brains", "tasks": tasks})

    def running_on_w1() -> bool:
        view = cluster.get(f"/v1/plans/{plan['id']}")
        done = view["counts"].get("SUCCEEDED", 0)
        return done >= 4 and any(
            t["state"] == "RUNNING" and t["worker_id"] == "w1" for t in view["tasks"]
        )

    wait_until(running_on_w1, 30, f"w1 to run a task\n{cluster.logs()}")
    assert LEADS not in second.log()  # one brain runs the timers at a time
    first.kill()  # SIGKILL: its connections drop, the server releases its locks
    cluster.workers["w1"].kill()  # its lease is only reaped by a reaper: the survivor's
    view = cluster.wait_plan(plan["id"], 90)
    logs = f"{cluster.logs()}\n--- brain-b\n{second.log()[-3000:]}"
    assert view["status"] == "succeeded", logs
    assert cluster.completions(plan["id"]) == {t["id"]: 1 for t in tasks}, logs
    assert LEADS in second.log(), logs
    # the dead worker's task ran again elsewhere: its lease expired and was reaped
    retried = [t for t in view["tasks"] if t["attempt"] > 1]
    assert retried and all(t["worker_id"] != "w1" for t in retried), view["tasks"]
    # no error line from the brain that stayed up
    assert '"level": "error"' not in second.log(), second.log()[-3000:]


def test_each_brain_answers_what_the_other_stored(fleet):
    """One store, no copy in a brain: a plan submitted through one brain reads the same
    through the other."""
    _, _, ports = fleet
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    body = {"name": "one-store", "tasks": [noop("a"), noop("b", ["a"])]}
    answer = requests.post(f"{urls[0]}/v1/plans", headers=ADMIN, timeout=10, json=body)
    assert answer.status_code == 201, answer.text
    plan_id = answer.json()["id"]
    views = [requests.get(f"{url}/v1/plans/{plan_id}", headers=ADMIN, timeout=10).json()
             for url in urls]  # fmt: skip
    assert views[0]["tasks"] == views[1]["tasks"]
    assert [t["state"] for t in views[1]["tasks"]] == ["READY", "PENDING"]
