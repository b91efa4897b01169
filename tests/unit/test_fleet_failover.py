"""benchmarks/fleet_clients.py with several brains (issue 38): a client whose brain dies
moves to the next one and stays there, and a report cut off with its brain is sent again,
as the worker sends it again. Both were wrong in the first kill run: a worker's run and
heartbeat loops failing together on the dead brain moved it there and back (ConnectError
on the retry), and a failed exchange dropped its completion (the task stayed RUNNING)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import httpx
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "fleet_clients.py"
DEAD, LIVE = "http://dead.brain", "http://live.brain"


@pytest.fixture(scope="module")
def clients():
    spec = importlib.util.spec_from_file_location("fleet_clients_bench", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["fleet_clients_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_two_requests_failing_together_both_land_on_the_live_brain(clients):
    stats, upstream = clients.Stats(), clients.Upstream([DEAD, LIVE], 0)
    arrived: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "dead.brain":
            arrived.append(request.url.path)
            while len(arrived) < 2:  # both in flight when the brain dies
                await asyncio.sleep(0)
            raise httpx.ConnectError("All connection attempts failed", request=request)
        return httpx.Response(200, json={"on": request.url.path})

    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return list(await asyncio.gather(
                upstream.send(stats, client, "POST", "/v1/exchange"),
                upstream.send(stats, client, "POST", "/v1/workers/heartbeat"),
            ))  # fmt: skip

    answers = asyncio.run(both())
    assert [a.status_code for a in answers] == [200, 200]
    assert upstream.url == LIVE and stats.failovers == 1
    assert arrived == ["/v1/exchange", "/v1/workers/heartbeat"]  # nothing went back to it


def test_every_brain_down_is_the_error_not_a_loop(clients):
    stats, upstream = clients.Stats(), clients.Upstream([DEAD, LIVE], 0)

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("All connection attempts failed", request=request)

    async def once() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            await upstream.send(stats, client, "GET", "/v1/workers")

    with pytest.raises(httpx.ConnectError):
        asyncio.run(once())
    assert stats.failovers == 1  # one move, one retry: the caller counts the error


def test_a_report_cut_off_with_its_brain_is_sent_again(clients):
    stats = clients.Stats()
    rig = clients.Rig([DEAD], "rig000", "join-token", 1, stats)
    worker = rig.workers[0]
    report = {"action": "complete", "task_id": 7, "attempt": 1, "lease_id": "l1",
              "output": {"text": "done"}, "metrics": {}}  # fmt: skip
    worker.pending = [report]
    stop = asyncio.Event()
    sent: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        sent.append(json.loads(request.content))
        stop.set()
        raise httpx.ReadError("connection reset", request=request)

    async def run() -> None:
        rig.client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        await worker.run(stop, (1.0, 2.0), 1.0)
        await rig.close()

    asyncio.run(run())
    assert [body["reports"] for body in sent] == [[report], [report]]  # sent, retried once
    assert worker.pending == [report]  # kept for the next exchange, not dropped
    assert len(stats.errors) == 1 and stats.errors[0].startswith("exchange: ReadError")
