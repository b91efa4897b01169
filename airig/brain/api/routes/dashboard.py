"""The operator dashboard: its page (no token) and the admin data the page polls.

The page is its own files (``dashboard/static``) served as they are, and the Report
page's charting library, the installed ``plotly`` package's plotly.min.js; everything it
shows comes from admin-only JSON routes polled with ``fetch`` and a bearer header (never a
token in a URL, so no EventSource). Besides ``/v1/workers`` and ``/v1/plans`` it reads:

- ``GET /v1/queue``: live task counts per class / model / state, the oldest READY wait
  against ``max_wait_s``, and the leased / running tasks (each worker's current task);
- ``GET /v1/events``: recent events, filtered by plan, type, task or worker;
- ``GET /v1/models``: 02-compute's verified-model inventory, fetched from the
  models-ready gate (``BRAIN_MODELS_URL``); an unreachable gate is an answer, not an error.
- ``GET /v1/store``: the store's size on disk (database + WAL, result files, logs) and
  what retention last removed (``retention.py``).
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel

from airig.brain.api.deps import AdminDep, BrainDep
from airig.brain.store import backups, event_search
from airig.brain.store import queue as task_queue
from airig.brain.store.queue import LIVE_STATES
from airig.common.protocol import TaskState as S

STATIC = Path(__file__).resolve().parents[2] / "dashboard" / "static"
# Only these names are served: a request's path never becomes a file path.
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "search.js": "text/javascript; charset=utf-8",  # the Search page
    "report.js": "text/javascript; charset=utf-8",  # the Report page
    "style.css": "text/css; charset=utf-8",
}
# The page holds the admin token: no inline script or style, no third-party origin, no
# framing, so text a plan submitter wrote can never run as script in it. One inline style
# is allowed by its hash: an empty <style> element, which plotly.js appends and then fills
# through the CSSOM (insertRule, which CSP does not govern) with its modebar and hover
# rules; an element with any text in it is still refused.
EMPTY_STYLE = "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"  # sha256 of ""
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; "
    f"style-src 'self' {EMPTY_STYLE}; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
MAX_ACTIVE = 500
MAX_EVENTS = 500
GATE_TIMEOUT_S = 2.0
GATE_MAX_BYTES = 8 * 1024 * 1024

router = APIRouter(tags=["dashboard"])


# ------------------------------------------------------------------ the page
def _asset(name: str) -> Response:
    try:
        body = (STATIC / name).read_bytes()
    except OSError:
        raise HTTPException(404, f"dashboard file {name} is missing; reinstall airig") from None
    return Response(body, media_type=ASSETS[name], headers=PAGE_HEADERS)


@router.get("/dashboard", include_in_schema=False)
def dashboard_page() -> Response:
    return _asset("index.html")


@router.get("/dashboard/plotly.min.js", include_in_schema=False)
def dashboard_charts() -> Response:
    """The Report page's charting library: the ``plotly`` package's own plotly.min.js,
    as installed (the server extra), never copied into this repository nor fetched from a
    CDN; streamed from its file, and asked for only when the Report page opens."""
    path = charting_library()
    if path is None:
        raise HTTPException(
            404, "the charting library is missing: install the plotly package (airig[server])"
        )
    return FileResponse(path, media_type="text/javascript; charset=utf-8", headers=PAGE_HEADERS)


def charting_library() -> Path | None:
    """plotly.min.js inside the installed ``plotly`` package, found without importing it
    (the package's Python side is never used), or None."""
    spec = importlib.util.find_spec("plotly")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path
    return None


@router.get("/dashboard/{asset}", include_in_schema=False)
def dashboard_asset(asset: str) -> Response:
    if asset not in ASSETS:
        raise HTTPException(404, f"no dashboard file {asset}")
    return _asset(asset)


# ------------------------------------------------------------------ queue
class QueueGroup(BaseModel):
    name: str | None
    counts: dict[str, int]
    oldest_ready_wait_s: float | None


class LiveTask(BaseModel):
    plan_id: str
    task: str
    name: str
    type: str
    task_class: str
    model: str | None
    state: str
    worker_id: str | None
    attempt: int
    ready_at: float | None
    started_at: float | None


class QueueView(BaseModel):
    states: list[str]
    totals: dict[str, int]
    by_class: list[QueueGroup]
    by_model: list[QueueGroup]
    oldest_ready_wait_s: float | None
    oldest_ready: LiveTask | None
    max_wait_s: float
    active: list[LiveTask]
    active_truncated: bool
    now: float


def _live_task(row: sqlite3.Row) -> LiveTask:
    values = dict(row)
    values["task"] = values.pop("key")
    return LiveTask(**values)


def _grouped(rows: list[sqlite3.Row], column: str, now: float) -> list[QueueGroup]:
    groups: dict[str | None, QueueGroup] = {}
    for row in rows:
        group = groups.setdefault(row[column], QueueGroup(
            name=row[column], counts=dict.fromkeys(LIVE_STATES, 0), oldest_ready_wait_s=None,
        ))  # fmt: skip
        group.counts[row["state"]] += row["n"]
        if row["state"] == S.READY and row["oldest"] is not None:
            wait = max(0.0, now - row["oldest"])
            group.oldest_ready_wait_s = max(group.oldest_ready_wait_s or 0.0, wait)
    return sorted(groups.values(), key=lambda g: (g.name is None, g.name or ""))


@router.get("/v1/queue", response_model=QueueView)
def queue(brain: BrainDep, _: AdminDep) -> QueueView:
    """What waits and what runs: live task counts, the oldest READY wait, the leases."""
    with brain.db.read() as conn:
        rows = task_queue.live_groups(conn)
        oldest = task_queue.oldest_ready(conn)
        active = task_queue.leased(conn, MAX_ACTIVE + 1)
    now = time.time()
    totals = dict.fromkeys(LIVE_STATES, 0)
    for row in rows:
        totals[row["state"]] += row["n"]
    oldest_task = _live_task(oldest) if oldest else None
    wait = max(0.0, now - oldest["ready_at"]) if oldest and oldest["ready_at"] else None
    return QueueView(
        states=list(LIVE_STATES), totals=totals, by_class=_grouped(rows, "task_class", now),
        by_model=_grouped(rows, "model", now), oldest_ready_wait_s=wait,
        oldest_ready=oldest_task, max_wait_s=brain.settings.max_wait_s,
        active=[_live_task(row) for row in active[:MAX_ACTIVE]],
        active_truncated=len(active) > MAX_ACTIVE, now=now,
    )  # fmt: skip


# ------------------------------------------------------------------ events
class EventsView(BaseModel):
    events: list[dict[str, Any]]
    last_id: int
    limit: int


_Filter = Annotated[str | None, Query(max_length=200)]


# Its 422 (a query parameter out of bounds) is FastAPI's own HTTPValidationError entry.
@router.get("/v1/events", response_model=EventsView)
def recent_events(
    brain: BrainDep,
    _: AdminDep,
    plan: _Filter = None,
    event_type: Annotated[str | None, Query(alias="type", max_length=64)] = None,
    task: _Filter = None,
    worker: _Filter = None,
    after_id: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_EVENTS)] = 100,
) -> EventsView:
    """Recent events, newest first. Without ``plan`` only the newest 100 000 events are
    searched; ``after_id`` returns only events newer than one already seen."""
    with brain.db.read() as conn:
        newest = event_search.last_id(conn)
        rows = event_search.search(conn, newest, plan, event_type, task, worker, after_id, limit)
    events = [{"id": row["id"], **json.loads(row["body_json"])} for row in rows]
    return EventsView(events=events, last_id=newest, limit=limit)


# ------------------------------------------------------------------ models
class VerifiedModel(BaseModel):
    service: str
    name: str
    size: int | None
    files: int | None
    verified_at: str | None


class InventorySource(BaseModel):
    service: str
    path: str
    models: int
    error: str | None


class ModelsView(BaseModel):
    available: bool
    reason: str | None = None
    url: str
    models: list[VerifiedModel] = []
    sources: list[InventorySource] = []


class GateUnavailable(Exception):
    """The gate did not answer with an inventory; the message says why."""


def fetch_inventory(url: str, timeout_s: float = GATE_TIMEOUT_S) -> Any:
    """The gate's ``GET /models`` JSON, read within a deadline and a size bound."""
    deadline = time.monotonic() + timeout_s
    body = bytearray()
    try:
        # trust_env=False: a proxy set for the internet must not carry ai-network calls.
        with (
            httpx.Client(timeout=timeout_s, trust_env=False) as client,
            client.stream("GET", url) as answer,
        ):
            if answer.status_code != 200:
                raise GateUnavailable(f"the gate answered HTTP {answer.status_code}")
            for chunk in answer.iter_bytes():
                body += chunk
                if len(body) > GATE_MAX_BYTES:
                    raise GateUnavailable(f"the gate's answer is over {GATE_MAX_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise GateUnavailable(f"the gate took over {timeout_s:g} s to answer")
    except (httpx.InvalidURL, httpx.UnsupportedProtocol):
        raise GateUnavailable("BRAIN_MODELS_URL is not a valid http(s) URL") from None
    except httpx.HTTPError as exc:
        raise GateUnavailable(f"the gate is unreachable ({type(exc).__name__})") from None
    try:
        return json.loads(body)
    except ValueError:
        raise GateUnavailable("the gate's answer is not JSON") from None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def inventory_view(url: str, raw: Any) -> ModelsView:
    """The gate's {cache path: verify cache | {error}} as flat rows, one per model."""
    if not isinstance(raw, dict):
        raise GateUnavailable("the gate's answer is not an inventory")
    models, sources = [], []
    for path, cache in sorted(raw.items()):
        service = Path(path).parent.name or path
        cache = cache if isinstance(cache, dict) else {"error": "not an object"}
        listed = cache.get("models")
        found: dict[str, Any] = listed if isinstance(listed, dict) else {}
        for name, info in sorted(found.items()):
            info = info if isinstance(info, dict) else {}
            stamp = info.get("verified_at")
            models.append(VerifiedModel(
                service=service, name=name, size=_int_or_none(info.get("size")),
                files=_int_or_none(info.get("files")),
                verified_at=stamp if isinstance(stamp, str) else None,
            ))  # fmt: skip
        error = cache.get("error")
        sources.append(InventorySource(
            service=service, path=path, models=len(found),
            error=str(error) if error is not None else None,
        ))  # fmt: skip
    return ModelsView(available=True, url=url, models=models, sources=sources)


@router.get("/v1/models", response_model=ModelsView)
def verified_models(brain: BrainDep, _: AdminDep) -> ModelsView:
    """The verified-model inventory from 02-compute's models-ready gate, or why not."""
    url = brain.settings.models_url
    try:
        return inventory_view(url, fetch_inventory(url))
    except GateUnavailable as exc:
        return ModelsView(available=False, reason=str(exc), url=url)


# ------------------------------------------------------------------ store
class StoreView(BaseModel):
    db_bytes: int
    wal_bytes: int
    results_bytes: int
    logs: dict[str, int]
    measured_at: float
    retention_days: int
    last_prune: dict[str, Any] | None
    # the newest archive `backup` recorded (/v1/backups); None: never backed up
    last_backup_at: float | None = None
    last_backup_archive: str | None = None


@router.get("/v1/store", response_model=StoreView)
def store_size(brain: BrainDep, _: AdminDep) -> StoreView:
    """Bytes on disk: the database and its WAL, result files, the JSON logs (measured at
    most once a minute), the retention in force and what its last pass removed."""
    sizes = brain.retention.sizes()
    last = brain.retention.last
    with brain.db.read() as conn:
        newest = backups.newest(conn)
    return StoreView(
        **sizes.as_dict(), retention_days=brain.settings.retention_days,
        last_prune=last.as_dict() if last else None,
        last_backup_at=newest[0]["created_at"] if newest else None,
        last_backup_archive=newest[0]["archive"] if newest else None,
    )  # fmt: skip
