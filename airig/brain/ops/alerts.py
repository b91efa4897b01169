"""Alerts: conditions the operator should hear about, each said once when it starts and
once when it ends.

``check`` runs in the reaper's pass (``Brain.check_alerts``). It computes which alerts
hold now, a pure reading of the database, and compares that with the ``alerts`` table:
a new one is inserted and an ``alert_fired`` event recorded, one that no longer holds is
deleted and an ``alert_cleared`` event recorded. The table is the state, so a restarted
brain neither repeats a firing nor forgets a clear. Kinds (subject in brackets):

- ``queue_depth`` (``queue``): more than ``AIRIG_ALERT_QUEUE_DEPTH`` tasks READY;
- ``task_failures`` (task type) and ``worker_failures`` (worker): at least
  ``AIRIG_ALERT_FAILURES`` failed or retried attempts within ``AIRIG_ALERT_FAILURE_WINDOW_S``;
- ``gpu_temperature`` (``worker/gpuN``): a live worker's GPU at or above
  ``AIRIG_ALERT_GPU_TEMP_C``;
- ``worker_down`` (worker): no heartbeat for a lease (``BRAIN_LEASE_S``), counted from
  the brain's start at the earliest; a clean stop deregisters the worker and raises
  nothing;
- ``service_down`` and ``gpu_fallback`` (service): what the brain's probes of the compute
  services hold (``probes.py``): no answer several times in a row (down, or a crash
  loop), or a service `up` put on a GPU answering that it runs on the CPU;
- ``backup_old`` (``backup``): the newest `backup` is older than ``AIRIG_BACKUP_MAX_AGE_H``
  (none yet: counted from the brain's start); 0 turns it off;
- ``store_unwritable`` (``store``): a write found the store full or read-only
  (``store/unwritable.py``). It cannot live in the alerts table of a store that cannot be
  written: it is held in memory (``GET /v1/alerts``, ``/health``, ``/metrics``, the
  notice at once) and recorded, fired and cleared, by the first commit after it. While it
  holds no heartbeat can be saved, so ``worker_down`` and ``gpu_temperature`` are not
  judged (those that hold stay), and a worker is silent only from its end.

Delivery to people (``notify.py``) happens after the commit, from what ``check`` returns.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from airig.brain.store import alerts as stored
from airig.brain.store import backups
from airig.brain.store.events import Outbox, store_line
from airig.brain.store.unwritable import Episode
from airig.brain.store.workers import RETIRED
from airig.common.jsonlog import utc_iso

FAILURE_EVENTS = ("task_failed", "task_retry_scheduled")
WORKER_KINDS = ("worker_failures", "worker_down", "gpu_temperature")  # subject names a worker
LIVENESS_KINDS = ("worker_down", "gpu_temperature")  # read from saved heartbeats
STORE_UNWRITABLE, STORE_SUBJECT = "store_unwritable", "store"
# every kind, each with a rule in 03-agents/prometheus/alerts.yml (a test checks)
KINDS = ("queue_depth", "task_failures", *WORKER_KINDS, "service_down", "gpu_fallback",
         "backup_old", STORE_UNWRITABLE)  # fmt: skip


@dataclass(frozen=True)
class Rules:
    queue_depth: int
    failures: int
    failure_window_s: float
    gpu_temp_c: float
    worker_lapse_s: float
    backup_max_age_s: float = 0.0  # 0: no backup_old alert


@dataclass(frozen=True)
class Held:
    """An alert that holds outside the alerts table (as its rows read)."""

    kind: str
    subject: str
    fired_at: float
    message: str


def store_alert(episode: Episode) -> Held:
    return Held(STORE_UNWRITABLE, STORE_SUBJECT, episode.since, episode.message)


@dataclass(frozen=True)
class Notice:
    """One firing or clearing, as delivered to people."""

    kind: str
    subject: str
    fired: bool
    message: str
    timestamp: str

    @property
    def title(self) -> str:
        word = "ALERT" if self.fired else "cleared"
        return f"airig {word}: {self.kind} {self.subject}"


def _queue(conn: sqlite3.Connection, rules: Rules) -> dict[tuple[str, str], str]:
    ready = stored.ready_count(conn)
    if ready <= rules.queue_depth:
        return {}
    return {("queue_depth", "queue"): f"{ready} tasks waiting (threshold {rules.queue_depth})"}


def _failures(conn: sqlite3.Connection, now: float, rules: Rules) -> dict[tuple[str, str], str]:
    rows = stored.failures_since(conn, now - rules.failure_window_s, FAILURE_EVENTS)
    counts: dict[tuple[str, str], int] = {}
    for row in rows:
        for key in (("task_failures", row["type"]), ("worker_failures", row["worker"])):
            if key[1]:
                counts[key] = counts.get(key, 0) + 1
    window = f"{rules.failure_window_s:g}s"
    return {
        key: f"{n} failed attempts of {key[1]} in the last {window}"
        for key, n in counts.items()
        if n >= rules.failures
    }


def _workers(
    conn: sqlite3.Connection, now: float, rules: Rules, since: float
) -> dict[tuple[str, str], str]:
    found: dict[tuple[str, str], str] = {}
    # A worker that stopped cleanly deregistered (store/workers.retire: heartbeat 0). It is
    # not down: counted here, `down` (workers stop before the brain) and every `docker
    # compose stop` of a worker raised worker_down just before the brain went quiet.
    rows = stored.workers_heard_after(conn, RETIRED)
    for row in rows:
        silent_s = now - max(row["last_heartbeat"], since)
        if silent_s > rules.worker_lapse_s:
            found[("worker_down", row["id"])] = f"no heartbeat for {silent_s:.0f}s"
            continue  # its last temperatures are stale
        for gpu in json.loads(row["gpus_json"]):
            temperature = gpu.get("temperature_c")
            if temperature is not None and temperature >= rules.gpu_temp_c:
                subject = f"{row['id']}/gpu{gpu.get('index')}"
                found[("gpu_temperature", subject)] = (
                    f"{temperature:g} °C (threshold {rules.gpu_temp_c:g} °C)"
                )
    return found


def active(
    conn: sqlite3.Connection,
    now: float,
    rules: Rules,
    since: float = 0.0,
    probed: dict[tuple[str, str], str] | None = None,
    liveness: bool = True,
) -> dict[tuple[str, str], str]:
    """Every alert that holds now: (kind, subject) -> message. ``since``: when this brain
    started; a worker is silent only from then, as heartbeats could not reach a brain
    that was down. ``probed``: what the service probes hold (``probes.py``).
    ``liveness=False``: heartbeats could not be saved, the workers are not judged."""
    return {
        **_queue(conn, rules),
        **_failures(conn, now, rules),
        **(_workers(conn, now, rules, since) if liveness else {}),
        **_backup(conn, now, rules, since),
        **(probed or {}),
    }


def _backup(
    conn: sqlite3.Connection, now: float, rules: Rules, since: float
) -> dict[tuple[str, str], str]:
    if rules.backup_max_age_s <= 0:
        return {}
    last = backups.last_at(conn)
    # With none yet, a fresh kit is not late the minute it starts: its age counts from
    # the brain's start (a restored store keeps its rows, so its own backups count).
    age = now - (last if last is not None else since)
    if age <= rules.backup_max_age_s:
        return {}
    limit = f"{rules.backup_max_age_s / 3600:g} h"
    what = f"the last backup is {age / 3600:.1f} h old" if last else (
        f"no backup yet, {age / 3600:.1f} h after the brain started")  # fmt: skip
    return {("backup_old", "backup"): f"{what} (limit {limit}): run `backup`"}


def _record(
    conn: sqlite3.Connection, outbox: Outbox, notice: Notice, now: float, count: bool = True
) -> None:
    event_type = "alert_fired" if notice.fired else "alert_cleared"
    body = {
        "timestamp": notice.timestamp,
        "event_type": event_type,
        "alert": notice.kind,
        "subject": notice.subject,
        "worker_id": notice.subject.split("/")[0] if notice.kind in WORKER_KINDS else None,
        "error": None,
        "reason": f"{notice.kind} {notice.subject}: {notice.message}",  # the feed's detail
    }
    store_line(conn, outbox, now, event_type, None, None, json.dumps(body))
    if notice.fired and count:
        outbox.metric("alerts_fired", alert=notice.kind)


def check(
    conn: sqlite3.Connection,
    outbox: Outbox,
    now: float,
    rules: Rules,
    since: float = 0.0,
    probed: dict[tuple[str, str], str] | None = None,
    liveness: bool = True,
) -> list[Notice]:
    """Fire what newly holds, clear what no longer does; the notices to deliver.
    ``liveness=False`` (the store cannot save heartbeats): the liveness alerts that hold
    stay as they are, none fires."""
    holding = active(conn, now, rules, since, probed, liveness)
    known = {(row["kind"], row["subject"]): row["message"] for row in stored.known(conn)}
    if not liveness:
        holding.update({key: m for key, m in known.items() if key[0] in LIVENESS_KINDS})
    notices: list[Notice] = []
    stamp = utc_iso(now)
    for (kind, subject), message in sorted(holding.items()):
        if (kind, subject) not in known:
            stored.fire(conn, kind, subject, now, message)
            notices.append(Notice(kind, subject, True, message, stamp))
    for (kind, subject), message in sorted(known.items()):
        if (kind, subject) not in holding:
            stored.clear(conn, kind, subject)
            notices.append(Notice(kind, subject, False, f"resolved (was: {message})", stamp))
    for notice in notices:
        _record(conn, outbox, notice, now)
    return notices


def record_outage(conn: sqlite3.Connection, outbox: Outbox, episode: Episode) -> None:
    """An ended outage of the store (``store/unwritable.py``) in its events, once the
    store can be written: its ``alert_fired`` at its start, its ``alert_cleared`` at its
    end. Counted and delivered when it happened (``Brain``), not again here."""
    fired = Notice(STORE_UNWRITABLE, STORE_SUBJECT, True, episode.message, utc_iso(episode.since))
    cleared = Notice(STORE_UNWRITABLE, STORE_SUBJECT, False,
                     f"resolved (was: {episode.message})", utc_iso(episode.ended))  # fmt: skip
    _record(conn, outbox, fired, episode.since, count=False)
    _record(conn, outbox, cleared, episode.ended)
