"""Simulated rigs, GPU workers, dashboards and a plan feeder for ``fleet.py``: asyncio
clients over real HTTP, speaking the wire format of ``airig/worker`` and the dashboard.

A worker does what ``airig.worker`` does for a GPU (no prefetch, ``pipeline.py``): one
``POST /v1/exchange`` per task carrying the last result and a long-poll claim that
starts the next task; the brain's load / evict decision is carried out (a sleep for a
load) and reported as the swap metrics ``swap.py`` reports; the task itself is a sleep.
A heartbeat loop at the interval the brain gives renews the running lease
(``/v1/tasks/{id}/heartbeat``) and sends GPU telemetry (``/v1/workers/heartbeat``), as
``heartbeat.py`` does. Each rig registers its workers with its own join token and shares
one ``httpx.AsyncClient`` (keep-alive) between them.

With several brains (``fleet.py --brains N``) each client has an ``Upstream``: worker i
talks to brain i % N and, on a connection error, to the next one from then on. That
client-side round robin stands in for the load balancer a fleet would put in front of
its brains; any brain answers any request, so nothing else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

import httpx

LLM_MODELS = ["qwen2.5:7b", "llama3.1:8b", "mistral:7b"]
EMBED_MODEL = "nomic-embed-text"
VRAM_MB = 24_576
# The dashboard page: every 2 s the worker list, then the open view's own route
# (airig/brain/dashboard/static/app.js: POLL_MS, tick(), each view's refresh()).
POLL_S = 2.0
VIEWS = {
    "cluster": "/v1/queue",
    "plans": "/v1/plans?limit=100",
    "events": "/v1/events?limit=100",
}


@dataclass
class Stats:
    """What every client saw; ``recording`` is off during warm-up."""

    recording: bool = False
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)
    completed: int = 0  # accepted completions while recording
    completed_total: int = 0  # every accepted completion (the feeder's count)
    empty_claims: int = 0  # exchanges that found no task (the queue ran dry)
    loads: int = 0
    retries: int = 0  # requests sent again after a transport error (as link.py does)
    renew_races: int = 0  # renewals answered 409 because the task had just finished
    failovers: int = 0  # moves of a client to the next brain after a transport error
    # task id -> the (attempt, lease) of each completion the brain accepted: two different
    # ones is a task completed twice (a replayed report of the same lease is one)
    done: dict[int, set[tuple[int, str]]] = field(default_factory=lambda: defaultdict(set))

    def time(self, kind: str, seconds: float) -> None:
        if self.recording:
            self.latency[kind].append(seconds * 1000)

    def error(self, text: str) -> None:
        if len(self.errors) < 1000:
            self.errors.append(text)


class Upstream:
    """The brain one client talks to: its own first, the next on a connection error."""

    def __init__(self, urls: list[str], first: int = 0) -> None:
        self.urls, self.index = urls, first % len(urls)

    @property
    def url(self) -> str:
        return self.urls[self.index]

    def failover(self, stats: Stats, failed: str) -> None:
        """Away from ``failed``: once. A worker's run and heartbeat loops share this, and
        both may fail on the same dead brain; the second must not move back to it."""
        if len(self.urls) > 1 and self.url == failed:
            self.index = (self.index + 1) % len(self.urls)
            stats.failovers += 1

    async def send(self, stats: Stats, client: httpx.AsyncClient, method: str, path: str,
                   **kwargs: object) -> httpx.Response:  # fmt: skip
        """One request; after a transport error, once more on the next brain (the
        worker's link retries once too, link.py). The second failure is raised."""
        url = self.url
        try:
            return await client.request(method, f"{url}{path}", **kwargs)  # type: ignore[arg-type]
        except httpx.TransportError:
            stats.retries += stats.recording
            self.failover(stats, url)
            return await client.request(method, f"{self.url}{path}", **kwargs)  # type: ignore[arg-type]


def task_duration(task: dict, rng: random.Random, lo: float, hi: float) -> float:
    """A GPU task's run time: an LLM call lo..hi s, an embedding batch a third of that."""
    scale = 1.0 if task["type"] == "llm" else 1 / 3
    return rng.uniform(lo, hi) * scale


class Worker:
    def __init__(self, rig: Rig, gpu: int, upstream: Upstream) -> None:
        self.rig, self.gpu, self.upstream = rig, gpu, upstream
        self.name = f"{rig.name}-gpu{gpu}"
        self.token = ""
        self.interval_s = 10.0
        self.wait_s = 5.0
        self.resident: list[str] = []
        self.current: dict | None = None
        self.pending: list[dict] = []
        self.rng = random.Random(f"{rig.name}/{gpu}")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def telemetry(self) -> dict:
        busy = self.current is not None
        used = 6_000 * len(self.resident)
        return {
            "gpus": [
                {
                    "index": self.gpu,
                    "name": "NVIDIA GeForce RTX 4090",
                    "vram_total_mb": VRAM_MB,
                    "vram_free_mb": max(0, VRAM_MB - used),
                    "temperature_c": round(self.rng.uniform(62, 74) if busy else 40.0, 1),
                    "power_w": round(self.rng.uniform(250, 400) if busy else 30.0, 1),
                }
            ],  # fmt: skip
            "resident_models": list(self.resident),
        }

    async def register(self) -> None:
        body = {"name": self.name, "host": self.rig.name, "classes": ["llm", "script", "resource"],
                "gpu_index": self.gpu, **self.telemetry()}  # fmt: skip
        answer = await self.upstream.send(
            self.rig.stats, self.rig.client, "POST", "/v1/workers/register", json=body,
            headers={"Authorization": f"Bearer {self.rig.join_token}"},
        )  # fmt: skip
        answer.raise_for_status()
        got = answer.json()
        self.token, self.interval_s = got["token"], got["heartbeat_interval_s"]
        self.wait_s = got["claim_wait_s"]

    async def call(self, kind: str, path: str, body: dict, timeout: float = 30.0) -> dict | None:
        stats = self.rig.stats
        start = time.perf_counter()
        try:
            answer = await self.upstream.send(stats, self.rig.client, "POST", path, json=body,
                                              headers=self.headers, timeout=timeout)  # fmt: skip
        except httpx.HTTPError as exc:
            stats.error(f"{kind}: {type(exc).__name__} {exc}")
            return None
        elapsed = time.perf_counter() - start
        if answer.status_code != 200:
            stats.error(f"{kind}: HTTP {answer.status_code} {answer.text[:200]}")
            return None
        data = answer.json()
        for result in data.get("results", []) if kind == "exchange" else []:
            if result["status"] == 200 and result["action"] == "complete":
                sent = next(r for r in body["reports"] if r["task_id"] == result["task_id"])
                stats.done[result["task_id"]].add((sent["attempt"], sent["lease_id"]))
        if kind != "exchange" or data["assignments"] or not body.get("claim"):
            stats.time(kind, elapsed)
        return data

    async def renew(self, task: dict) -> None:
        """Renew the running lease. A 409 for a task that finished meanwhile is the race
        a real worker has too (its result went out while the renewal was in flight): the
        heartbeat thread then cancels an attempt that is already over. Counted apart."""
        stats = self.rig.stats
        lease = {"attempt": task["attempt"], "lease_id": task["lease_id"]}
        path = f"/v1/tasks/{task['task_id']}/heartbeat"
        start = time.perf_counter()
        try:
            answer = await self.upstream.send(stats, self.rig.client, "POST", path, json=lease,
                                              headers=self.headers)  # fmt: skip
        except httpx.HTTPError as exc:
            stats.error(f"renew: {type(exc).__name__} {exc}")
            return
        stats.time("renew", time.perf_counter() - start)
        if answer.status_code == 409 and self.current is not task:
            stats.renew_races += stats.recording
        elif answer.status_code != 200:
            stats.error(f"renew: HTTP {answer.status_code} {answer.text[:200]}")

    async def heartbeats(self, stop: asyncio.Event) -> None:
        # Spread the first beats over one interval, as workers started at different times are.
        await asyncio.sleep(self.rng.uniform(0, self.interval_s))
        while not stop.is_set():
            task = self.current
            if task is not None:
                await self.renew(task)
            await self.call("heartbeat", "/v1/workers/heartbeat", self.telemetry())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)

    async def run(self, stop: asyncio.Event, task_s: tuple[float, float], load_s: float) -> None:
        stats = self.rig.stats
        while not stop.is_set():
            claim = {"wait_s": self.wait_s, "resident_models": list(self.resident), "start": True,
                     "max_tasks": 1, "claim_id": uuid.uuid4().hex}  # fmt: skip
            reports, self.pending = self.pending, []
            answer = await self.call("exchange", "/v1/exchange",
                                     {"reports": reports, "claim": claim},
                                     timeout=self.wait_s + 30)  # fmt: skip
            if answer is None:
                # sent again with the next claim, as the worker does (pipeline.py): a report
                # the brain already stored is answered as a replay
                self.pending[:0] = reports
                await asyncio.sleep(1.0)
                continue
            for result in answer["results"]:
                if result["status"] != 200:
                    stats.error(f"report {result['action']}: {result['status']} {result['detail']}")
                elif result["action"] == "complete":
                    stats.completed_total += 1
                    stats.completed += stats.recording
            if not answer["assignments"]:
                stats.empty_claims += stats.recording
                continue
            await self.execute(answer["assignments"][0], task_s, load_s)

    async def execute(self, task: dict, task_s: tuple[float, float], load_s: float) -> None:
        self.current = task
        swap: dict = {"unload_ms": {}, "free_vram_mb": None, "loaded": None, "load_ms": None}
        for model in task.get("evict") or []:
            if model in self.resident:
                self.resident.remove(model)
                swap["unload_ms"][model] = round(self.rng.uniform(200, 600))
        if task.get("load"):
            loading = self.rng.uniform(0.8, 1.2) * load_s
            await asyncio.sleep(loading)
            self.resident.append(task["load"])
            swap.update(loaded=task["load"], load_ms=round(loading * 1000))
            self.rig.stats.loads += self.rig.stats.recording
        running = task_duration(task, self.rng, *task_s)
        await asyncio.sleep(running)
        metrics: dict = {"wall_ms": round(running * 1000)}
        if swap["unload_ms"] or swap["loaded"]:
            swap["free_vram_mb"] = VRAM_MB - 6_000 * len(self.resident)
            metrics["swap"] = swap
        output = {"text": f"simulated answer of {task['key']}", "model": task.get("model")}
        self.pending.append({"action": "complete", "task_id": task["task_id"],
                             "attempt": task["attempt"], "lease_id": task["lease_id"],
                             "output": output, "metrics": metrics})  # fmt: skip
        self.current = None


class Rig:
    def __init__(self, urls: list[str], name: str, join_token: str, gpus: int, stats: Stats,
                 first: int = 0) -> None:  # fmt: skip
        self.name, self.join_token, self.stats = name, join_token, stats
        # One connection per worker loop and per heartbeat loop, kept alive between calls.
        # Idle connections are dropped before uvicorn's 5 s keep-alive closes them: a request
        # sent on a connection the server is closing fails (httpx ReadError) for no fault of
        # the brain's.
        limits = httpx.Limits(max_connections=2 * gpus + 2, max_keepalive_connections=2 * gpus,
                              keepalive_expiry=4.0)  # fmt: skip
        self.client = httpx.AsyncClient(limits=limits, timeout=30.0)
        # worker i of the fleet (first + gpu) starts on brain i % N
        self.workers = [Worker(self, gpu, Upstream(urls, first + gpu)) for gpu in range(gpus)]

    async def close(self) -> None:
        await self.client.aclose()


async def dashboard(upstream: Upstream, admin: str, view: str, stats: Stats,
                    stop: asyncio.Event) -> None:  # fmt: skip
    """One open page: the worker list and its view's route, then 2 s after it finished."""
    headers = {"Authorization": f"Bearer {admin}", "Accept": "application/json"}
    async with httpx.AsyncClient(headers=headers, timeout=60.0) as client:
        while not stop.is_set():
            for path in ("/v1/workers", VIEWS[view]):
                start = time.perf_counter()
                try:
                    answer = await upstream.send(stats, client, "GET", path)
                except httpx.HTTPError as exc:
                    stats.error(f"dashboard {path}: {type(exc).__name__}")
                    continue
                stats.time(f"poll {path}", time.perf_counter() - start)
                if answer.status_code != 200:
                    stats.error(f"dashboard {path}: HTTP {answer.status_code}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_S)


def plan_body(n: int, seq: int, rng: random.Random) -> dict:
    """``n`` independent GPU tasks: LLM calls over three models and embedding batches."""
    tasks = []
    for i in range(n):
        if rng.random() < 0.8:
            model = rng.choice(LLM_MODELS)
            tasks.append({"id": f"t{i}", "type": "llm", "model": model,
                          "priority": rng.randint(3, 7),
                          "payload": {"prompt": f"summarise document {seq}-{i}"}})  # fmt: skip
        else:
            chunks = [f"chunk {seq}-{i}-{k}" for k in range(8)]
            tasks.append({"id": f"t{i}", "type": "embed", "model": EMBED_MODEL,
                          "priority": rng.randint(3, 7), "payload": {"input": chunks}})  # fmt: skip
    return {"name": f"fleet-{seq}", "tasks": tasks}


async def feeder(upstream: Upstream, admin: str, workers: int, stats: Stats,
                 stop: asyncio.Event, submitted: list[int]) -> None:  # fmt: skip
    """Keeps at least three tasks per worker queued: the claims never find the queue empty.
    A submit cut off by a brain's death is not sent again (it may have been stored: the
    audit counts the store's tasks, not these)."""
    rng = random.Random(7)
    headers = {"Authorization": f"Bearer {admin}"}
    async with httpx.AsyncClient(headers=headers, timeout=60.0) as client:
        while not stop.is_set():
            while submitted[0] - stats.completed_total < 3 * workers:
                size = min(500, max(50, workers))
                start = time.perf_counter()
                body = plan_body(size, submitted[1], rng)
                try:
                    answer = await client.post(f"{upstream.url}/v1/plans", json=body)
                except httpx.TransportError as exc:
                    upstream.failover(stats, upstream.url)
                    stats.error(f"submit: {type(exc).__name__} {exc}")
                    break
                stats.time("submit", time.perf_counter() - start)
                if answer.status_code != 201:
                    stats.error(f"submit: HTTP {answer.status_code} {answer.text[:200]}")
                    break
                submitted[0] += size
                submitted[1] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
