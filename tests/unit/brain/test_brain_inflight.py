"""The brain-wide bound on rendered payload bytes held by answers not yet written
(``airig/brain/inflight.py``, ``BRAIN_MAX_INFLIGHT_BYTES``; issue 23 §6).

64 workers claiming 4 MiB tasks at once each held one answer's worth, whatever the
per-claim bound said. The pool never holds more than its cap (unless one payload alone
is larger: then it goes alone), every hold is given back on every path, a claim that
finds no room waits within its long-poll and is then served, and a replayed claim is
counted but never refused.
"""

from __future__ import annotations

import platform
import random
import threading

import brain_helpers as h
import pytest
from fastapi.testclient import TestClient

from airig.brain import leases
from airig.brain.api import exchange
from airig.brain.api.app import create_app
from airig.brain.api.fastpath import ExchangeFastPath
from airig.brain.inflight import InFlight, return_large_frees
from airig.brain.scheduling.workers import WorkerView
from airig.brain.store import payloads
from airig.common.protocol import ClaimRequest
from airig.common.protocol import TaskState as S

# Its brains open their store through make_settings: the PostgreSQL pass runs it too.
pytestmark = pytest.mark.store

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BOOT = {"Authorization": "Bearer bootstrap-secret-token"}
T0 = 1000.0


# ------------------------------------------------------------------ the pool alone
def test_threads_never_hold_more_than_the_cap_and_give_everything_back():
    pool = InFlight(1000)
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def claimant(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        try:
            for _ in range(200):
                with pool.hold() as hold:
                    first = rng.randint(1, 400)
                    while not hold.take(first):  # as a claim does: waits holding nothing
                        assert hold.wait(5), "no room came back"
                    for _ in range(rng.randint(0, 2)):  # held ahead: refused = stop
                        if not hold.take(rng.randint(1, 400)):
                            break
                    assert pool.held <= pool.cap
                    hold.unreserve()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=claimant, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert pool.held == 0
    assert 400 < pool.peak <= pool.cap  # they did overlap, and never past the cap


def test_a_payload_over_the_cap_is_not_starved_by_small_ones():
    pool = InFlight(1000)
    stop = threading.Event()

    def small_claims() -> None:
        while not stop.is_set():
            with pool.hold() as hold:
                while not hold.take(300) and not stop.is_set():
                    hold.wait(0.1)

    threads = [threading.Thread(target=small_claims) for _ in range(8)]
    for thread in threads:
        thread.start()
    try:
        with pool.hold() as big:
            if not big.take(5000):
                assert big.wait(5)  # in line, ahead of every later small claim
                assert big.take(5000)
            assert pool.held == 5000  # alone
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert pool.held == 0


def test_a_payload_over_the_whole_cap_goes_alone():
    pool = InFlight(100)
    with pool.hold() as big:
        assert big.take(500)  # nothing else held: it goes
        with pool.hold() as small:
            assert not small.take(1)
            assert small.refused == 1
    assert pool.held == 0
    with pool.hold() as small, pool.hold() as big:
        assert small.take(1)
        assert not big.take(500)  # waits for the pool to empty
        small.release()
        assert big.wait(0.1) and big.take(500)


def test_every_path_gives_the_hold_back():
    pool = InFlight(100)
    with pytest.raises(RuntimeError), pool.hold() as hold:
        assert hold.take(60)
        raise RuntimeError("the answer could not be built")
    assert pool.held == 0
    with pool.hold() as hold:
        assert not hold.take(10) or hold.take(50)
        hold.unreserve()  # nothing reserved: nothing given twice
    assert pool.held == 0


def test_a_waiter_reserves_the_room_an_answer_written_makes():
    pool = InFlight(100)
    first, second = pool.hold(), pool.hold()
    assert first.take(80)
    assert not second.take(50)
    waited: list[bool] = []
    waiter = threading.Thread(target=lambda: waited.append(second.wait(5)))
    waiter.start()
    first.release()
    waiter.join()
    assert waited == [True] and pool.held == 50  # reserved for it, not up for grabs
    third = pool.hold()
    assert not third.take(60)
    assert second.take(50) and pool.held == 50  # taken from its reservation
    second.release()
    assert pool.held == 0 and third.wait(0) and third.take(60)
    third.release()


def test_a_wait_that_times_out_keeps_its_refusal():
    pool = InFlight(100)
    with pool.hold() as first, pool.hold() as second:
        assert first.take(100)
        assert not second.take(10)
        assert not second.wait(0.01)
        assert second.refused == 10 and pool.held == 100


def test_freed_answers_go_back_to_the_system_unless_the_operator_tuned_malloc(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert return_large_frees() is (platform.libc_ver()[0] == "glibc")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=1048576")
    assert return_large_frees() is False  # their choice stands


# ------------------------------------------------------------------ in the brain
def _reader_plan(readers: int, text_bytes: int) -> list[dict]:
    return [h.noop("a")] + [
        h.noop(f"r{n}", ["a"], payload={"echo": f"{n} {{{{ tasks.a.output }}}}"})
        for n in range(readers)
    ]


def _finish_a(brain, plan: str, text_bytes: int) -> None:
    h.claim(brain, T0, worker="upstream")
    h.do(brain, plan, "a", "complete", T0, worker="upstream", output={"text": "x" * text_bytes})


def test_a_replayed_claim_is_counted_but_never_refused(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_MAX_INFLIGHT_BYTES=150_000)
    plan = h.submit(brain, _reader_plan(2, 100_000))
    _finish_a(brain, plan, 100_000)
    view = WorkerView(("cpu",), frozenset())
    body = ClaimRequest(wait_s=0, max_tasks=2, claim_id="claim0001")

    def claim(hold):
        return brain.write(lambda conn, outbox, now: exchange.claim(
            conn, outbox, T0, brain, "w1", view, body, hold))  # fmt: skip

    with brain.inflight.hold() as hold:
        assert len(claim(hold)) == 1  # the second reader does not fit beside the first
        assert hold.refused
    with brain.inflight.hold() as full:
        assert full.take(150_000)  # another answer fills the pool
        with brain.inflight.hold() as again:
            [(task, payload, _)] = claim(again)  # the lease it already has, all the same
            assert task["lease_id"] == "claim0001-0" and len(payload["echo"]) > 100_000
            assert brain.inflight.held > brain.inflight.cap
    assert brain.inflight.held == 0
    assert sorted(h.state_of(brain, plan).values()) == [S.LEASED, S.READY, S.SUCCEEDED]


def test_a_claim_the_pool_refuses_leaves_its_task_ready(tmp_path):
    brain = h.make_brain(tmp_path, BRAIN_MAX_INFLIGHT_BYTES=150_000)
    plan = h.submit(brain, _reader_plan(1, 100_000))
    _finish_a(brain, plan, 100_000)
    view = WorkerView(("cpu",), frozenset())
    with brain.inflight.hold() as full, brain.inflight.hold() as hold:
        assert full.take(100_000)
        budget = payloads.ClaimBudget(brain.settings.max_claim_bytes, hold=hold)
        settings, placement = brain.settings, brain.scheduling
        found = brain.write(lambda conn, outbox, now: leases.claim(
            conn, outbox, "w1", view, T0, settings, placement, budget=budget))  # fmt: skip
        assert found is None and hold.refused > 100_000
    assert h.state_of(brain, plan)["r0"] == S.READY


# ------------------------------------------------------------------ over HTTP, at once
@pytest.fixture(params=["fastapi-route", "fast-path"])
def client(tmp_path, request):
    # Room for two 100 KB answers at once; each claim may carry up to 4 tasks.
    app = create_app(h.make_settings(tmp_path, BRAIN_MAX_INFLIGHT_BYTES=250_000))
    served = ExchangeFastPath(app) if request.param == "fast-path" else app
    with TestClient(served) as made:
        yield made


def _register(client, name: str) -> dict[str, str]:
    answer = client.post("/v1/workers/register", headers=BOOT,
                         json={"name": name, "classes": ["cpu"]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def _exchange(client, worker, reports=(), **claim):
    body = {"reports": list(reports), "claim": claim or None}
    answer = client.post("/v1/exchange", headers=worker, json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_many_concurrent_claims_stay_within_the_bound_and_are_all_served(client):
    answer = client.post("/v1/plans", headers=ADMIN,
                         json={"name": "p", "tasks": _reader_plan(64, 100_000)})  # fmt: skip
    assert answer.status_code == 201, answer.text
    upstream = _register(client, "upstream")
    [a] = _exchange(client, upstream, max_tasks=1, wait_s=0)["assignments"]
    done = {"action": "complete", "task_id": a["task_id"], "attempt": a["attempt"],
            "lease_id": a["lease_id"], "output": {"text": "x" * 100_000}}  # fmt: skip
    assert _exchange(client, upstream, [done])["results"][0]["status"] == 200
    workers = [_register(client, f"w{n}") for n in range(16)]
    start = threading.Barrier(len(workers))
    got: dict[int, list[dict]] = {}

    def claim(n: int) -> None:
        start.wait()
        # An idle worker's long-poll: a claim the pool turns away waits for room in it.
        got[n] = _exchange(client, workers[n], max_tasks=4, wait_s=30)["assignments"]

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pool = client.app.state.brain.inflight if hasattr(client.app, "state") else None
    pool = pool or client.app.app.state.brain.inflight
    assert sorted(got) == list(range(16))
    assert all(1 <= len(tasks) <= 2 for tasks in got.values()), got  # 2 x 100 KB fit
    assert all(len(t["payload"]["echo"]) > 100_000 for tasks in got.values() for t in tasks)
    assert 100_000 < pool.peak <= pool.cap
    assert pool.held == 0


def test_a_task_over_the_whole_bound_is_still_served_alone(tmp_path):
    app = create_app(h.make_settings(tmp_path, BRAIN_MAX_INFLIGHT_BYTES=1000))
    with TestClient(ExchangeFastPath(app)) as client:
        answer = client.post("/v1/plans", headers=ADMIN,
                             json={"name": "p", "tasks": _reader_plan(1, 50_000)})  # fmt: skip
        assert answer.status_code == 201, answer.text
        upstream = _register(client, "upstream")
        [a] = _exchange(client, upstream, max_tasks=1, wait_s=0)["assignments"]
        done = {"action": "complete", "task_id": a["task_id"], "attempt": a["attempt"],
                "lease_id": a["lease_id"], "output": {"text": "x" * 50_000}}  # fmt: skip
        [task] = _exchange(client, upstream, [done], max_tasks=1, wait_s=0)["assignments"]
        assert task["key"] == "r0" and len(task["payload"]["echo"]) > 50_000
        assert app.state.brain.inflight.held == 0
