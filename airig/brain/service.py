"""The brain's runtime: database, logs, metrics and policies, shared by all routes.

``write`` is the one way state changes: it runs a function inside a transaction, then
publishes that transaction's events and metrics and wakes long-polling claims when new
work became READY. A write the store cannot take (a full or read-only disk) raises
``StoreUnwritable`` (507 / 503) and holds the ``store_unwritable`` alert in memory
(``store/unwritable.py``) until a write commits again, which records it.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from airig.brain.escalation.sender import Sender
from airig.brain.inflight import InFlight
from airig.brain.ops import alerts, probes
from airig.brain.ops.metrics import BrainMetrics
from airig.brain.ops.notify import Notifier, parse_urls
from airig.brain.scheduling import reaper
from airig.brain.scheduling.placement import Placement
from airig.brain.settings import BrainSettings
from airig.brain.store import dialect, events, restored, retention
from airig.brain.store.engines import open_store
from airig.brain.store.events import EventLog, Outbox
from airig.brain.store.groupcommit import (
    MOVED_TRIES,
    GroupCommit,
    after_commit,
    close_failed,
    moved_or_retried,
    retrying,
)
from airig.brain.store.retry import RetryPolicy
from airig.brain.store.unwritable import Episode, StoreHealth, StoreUnwritable
from airig.brain.waiters import ClaimWaiters
from airig.common.errors import ConfigError
from airig.common.jsonlog import utc_iso

T = TypeVar("T")
log = logging.getLogger("airig.brain.service")


class Brain:
    def __init__(self, settings: BrainSettings) -> None:
        self.settings = settings
        settings.results_dir.mkdir(parents=True, exist_ok=True)
        self.db = open_store(
            settings.db_path, settings.database_url, start_empty=settings.start_empty,
            writers=settings.pg_writers,
        )  # fmt: skip
        # Whether the store can be written (a full or read-only disk), from its writes.
        # On PostgreSQL the server's URL (masked): its disk is not the brain's to read.
        server = str(getattr(self.db, "where", ""))
        self.store_health = StoreHealth(
            server if dialect.is_pg(self.db) else settings.db_path.parent
        )
        self._recording = threading.Lock()  # one writer of ended outages' alerts at a time
        self._group = GroupCommit(self.db, self._committed)
        self.events = EventLog(
            settings.events_file,
            settings.training_file,
            known_secrets=(settings.admin_token, settings.bootstrap_token),
            max_bytes=int(settings.log_max_mb * 1024 * 1024),
            keep=settings.log_keep,
            read=self.db.read,  # the events file follows the events table
            # brains committing side by side (PostgreSQL): ids commit out of order
            gap_wait_s=events.GAP_WAIT_S if dialect.is_pg(self.db) else 0.0,
        )
        self.metrics = BrainMetrics(self.db, held=self.held_alerts)
        # Finished plans older than AIRIG_RETENTION_DAYS go, in small batches (retention.py).
        self.retention = retention.Retention(self.db, settings, self.events)
        self.metrics.watch_store(self.retention)
        self._pruner: reaper.Reaper | None = None
        self.retry = RetryPolicy(
            initial_s=settings.retry_initial_s,
            cap_s=settings.retry_cap_s,
            infra_budget=settings.infra_retries,
        )
        self.alert_rules = alerts.Rules(
            queue_depth=settings.alert_queue_depth,
            failures=settings.alert_failures,
            failure_window_s=settings.alert_failure_window_s,
            gpu_temp_c=settings.alert_gpu_temp_c,
            worker_lapse_s=settings.lease_s,
            backup_max_age_s=settings.backup_max_age_h * 3600,
        )
        # A receiver that is down is retried on the tasks' backoff timers.
        self.notifier = Notifier(
            parse_urls(settings.alert_urls),
            initial_s=max(settings.retry_initial_s, 0.1),
            cap_s=max(settings.retry_cap_s, 0.1),
        )
        try:
            targets = probes.parse_targets(settings.probe_services, settings.gpu_services)
        except ValueError as exc:
            raise ConfigError(
                str(exc), "fix BRAIN_PROBE_SERVICES in 03-agents/compose.yaml"
            ) from exc
        self.probes = probes.ServiceProbes(targets, down_after=settings.probe_down_after)
        self._prober: reaper.Reaper | None = None
        # Residency-aware claims, learned model costs, the thermal guard, and a compute
        # service's tasks held back while the probes say it is down.
        self.scheduling = Placement(settings, self.probes.outages)
        # Rendered payload bytes held by answers not yet written, all claims together.
        self.inflight = InFlight(settings.max_inflight_bytes)
        self.work_ready = threading.Condition()
        self.claim_waiters = ClaimWaiters()  # the same wake-up, for claims on the event loop
        self.closing = threading.Event()
        self._stopped = threading.Event()  # set by stop(): the store's listener ends
        self._reaper: reaper.Reaper | None = None
        self.escalations: Sender | None = None
        self.started_at = 0.0  # set by start: workers count as silent only from then
        self._restore_owed = False  # a restore's marker the store could not take yet

    def write(
        self,
        change: Callable[[sqlite3.Connection, Outbox, float], T],
        durable: bool = True,
        shared: bool = False,
    ) -> T:
        """``durable=False``: liveness only, may be lost to a power cut (``Database.tx``).
        Durable writes that arrive together share one commit (``groupcommit.py``).
        ``shared``: a worker's hot write (claim, report, renewal, heartbeat), safe beside
        other brains' writes by row locks: no store-wide lock on PostgreSQL (``pg.py``).
        ``StoreUnwritable`` when the store could not take it: nothing of it was stored."""
        try:
            result = self._write(change, durable, shared)
        except BaseException as exc:
            refusal = self.refuse(exc)
            if refusal is None:
                raise
            raise refusal from exc
        ended = self.store_health.wrote()
        if ended is not None:
            self._writable_again(ended)
        return result

    def _write(
        self, change: Callable[[sqlite3.Connection, Outbox, float], T], durable: bool,
        shared: bool,
    ) -> T:  # fmt: skip
        if durable:
            return self._group.run(change, shared)

        def attempt() -> tuple[T, Outbox]:
            outbox = Outbox()
            try:
                with self.db.tx(durable, exclusive=not shared) as conn:
                    return change(conn, outbox, time.time()), outbox
            except BaseException:
                close_failed(self.db)
                raise

        # PostgreSQL: another brain moved its row first, or a deadlock the server broke
        # (groupcommit.py): run again from fresh reads, a few times
        result, outbox = retrying(attempt, moved_or_retried, MOVED_TRIES)
        after_commit(self._committed, outbox)  # committed: the answer is a success
        return result

    # ---- a store that cannot be written ---------------------------------------------------
    def held_alerts(self) -> list[alerts.Held]:
        """Alerts held in memory, not in the alerts table: the store cannot be written."""
        episode = self.store_health.episode
        return [] if episode is None else [alerts.store_alert(episode)]

    def refuse(self, exc: BaseException, sqlite_readonly: bool = True) -> StoreUnwritable | None:
        """The refusal for a write that failed with ``exc`` because the store could not
        take it (the outage noted, its alert raised when it begins), else None."""
        refusal = self.store_health.failed(exc, sqlite_readonly)
        if refusal is not None and refusal.opened:
            self.metrics.alerts_fired.labels(alert=alerts.STORE_UNWRITABLE).inc()
            notice = alerts.Notice(alerts.STORE_UNWRITABLE, alerts.STORE_SUBJECT, True,
                                   refusal.message, utc_iso(time.time()))  # fmt: skip
            self.notifier.send([notice])
        return refusal

    def _writable_again(self, ended: Episode) -> None:
        """The first commit after an outage: its alert cleared, then recorded."""
        cleared = f"resolved (was: {ended.message})"
        self.notifier.send([alerts.Notice(alerts.STORE_UNWRITABLE, alerts.STORE_SUBJECT, False,
                                          cleared, utc_iso(ended.ended))])  # fmt: skip
        self.record_outages()

    def record_outages(self) -> None:
        """Record the ended outages' alerts in the store, and extend the live leases:
        their renewals could not be saved, which is no sign their workers died (as at a
        restart). One that fails stays for the next commit after an outage, or the
        reaper's next pass."""
        # Not blocking: a commit inside this one's write may end another outage; the
        # reaper's next pass records what this one left.
        if not self._recording.acquire(blocking=False):
            return
        try:
            self._record_outages()
        finally:
            self._recording.release()

    def _record_outages(self) -> None:
        episodes = self.store_health.unrecorded()
        if not episodes:
            return

        def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> None:
            for episode in episodes:
                alerts.record_outage(conn, outbox, episode)
            reaper.extend_live_leases(conn, now, self.settings.lease_s)

        try:
            self.write(change)
        except StoreUnwritable:
            return  # the store failed again: kept for the next commit after it
        self.store_health.recorded(episodes)

    def _committed(self, outbox: Outbox) -> None:
        """After a commit: its events and metrics out, long-polling claims woken."""
        self.events.publish(outbox)
        self.metrics.apply(outbox.metrics)
        if outbox.work_ready:
            self._wake_claims()
            self.db.announce_work()  # the claims waiting in the other brains, if any

    def _wake_claims(self) -> None:
        with self.work_ready:
            self.work_ready.notify_all()
        self.claim_waiters.wake()

    def wait_for_work(self, timeout_s: float) -> None:
        with self.work_ready:
            self.work_ready.wait(timeout_s)

    def start(self) -> None:
        """Extend live leases once (a restart is no reason to expire them), then reap."""
        self.started_at = time.time()
        self.notifier.start()
        self.db.listen_work(self._wake_claims, self._stopped)
        # Before any worker can reach this brain: a restored store's leases are the old
        # kit's, released (no retry spent), not failed when their workers register again.
        self.release_restored()
        # Started on a full or read-only store: the reaper's pass extends them once it can.
        with contextlib.suppress(StoreUnwritable):
            self.write(lambda conn, outbox, now: reaper.extend_live_leases(
                conn, self.started_at, self.settings.lease_s))  # fmt: skip
        # Brains sharing one PostgreSQL store: the timers run in the one that holds its
        # timers lock (db.leads(); always this one on SQLite), the others answer requests.
        self._reaper = reaper.Reaper(self._leading(self.reap_once), self.settings.reaper_interval_s)
        self._reaper.start()
        # The external tier's calls (airig/brain/escalation/); with AIRIG_ESCALATION=off it
        # only fails what waits for it, with that reason.
        self.escalations = Sender(
            self.write, self.settings, self.retry, read=self.db.read, leads=self.db.leads
        )
        self.escalations.start()
        self._pruner = reaper.Reaper(
            self._leading(self.retention.tick), self.settings.retention_interval_s
        )
        self._pruner.start()
        if self.probes.targets:
            # every brain probes (its claims skip a service it sees down); the leading one
            # marks the waiting tasks
            self._prober = reaper.Reaper(self.probe_once, self.settings.probe_interval_s)
            self._prober.start()

    def release_restored(self) -> None:
        """A restore's marker beside BRAIN_DB (``store/restored.py``): every leased or
        running task released in one write, then the marker removed. A store that cannot
        take the write leaves it owed to the reaper's passes; a marker that cannot be
        removed is said once, and never applied twice (its fingerprint is in the store)."""
        marker = restored.find(self.settings.db_path.parent)
        self._restore_owed = False
        if marker is None:
            return
        if marker.problem is not None:
            log.warning("restore marker %s: %s; releasing the restored store's leases all "
                        "the same", marker.path, marker.problem)  # fmt: skip
        try:
            released = self.write(lambda conn, outbox, now: restored.release(
                conn, outbox, now, marker))  # fmt: skip
        except StoreUnwritable:
            self._restore_owed = True  # the reaper's next pass tries again
            return
        if released is not None:
            log.info("restored from %s: %d leased or running task(s) released", marker.archive,
                     released)  # fmt: skip
        problem = restored.remove(marker)
        if problem is not None:
            log.warning(
                "cannot remove restore marker %s (%s): its leases were released once and "
                "will not be again; remove it by hand", marker.path, problem,
            )  # fmt: skip

    def _leading(self, tick: Callable[[], None]) -> Callable[[], None]:
        def tick_if_leading() -> None:
            if self.db.leads():
                tick()

        return tick_if_leading

    def probe_once(self) -> None:
        """Probe the compute services, then mark (or release) the tasks waiting for one."""
        self.probes.probe_once()
        if (self.probes.outages() or self.scheduling.marked) and self.db.leads():
            self.write(self.scheduling.hold_waiting)

    def reap_once(self) -> None:
        if self._restore_owed:
            self.release_restored()
        if self.store_health.episode is not None:
            # Renewals cannot be saved: a lease that ran out meanwhile is no sign its
            # worker died. Extended instead of expired, which also tries the store.
            lease_s = self.settings.lease_s
            self.write(lambda conn, outbox, now: reaper.extend_live_leases(conn, now, lease_s))
        else:
            self.write(lambda conn, outbox, now: reaper.reap(conn, outbox, now, self.retry))
            self.record_outages()  # an outage whose record failed before
        self.check_alerts()

    def check_alerts(self, now: float | None = None) -> list[alerts.Notice]:
        """Fire and clear alerts (``now`` for tests), then queue them for delivery.
        Workers are silent from the brain's start or the store's last outage at the
        earliest (heartbeats could not be saved before), and not judged during one."""
        health = self.store_health
        notices = self.write(
            lambda conn, outbox, clock: alerts.check(
                conn,
                outbox,
                clock if now is None else now,
                self.alert_rules,
                max(self.started_at, health.recovered_at),
                self.probes.holding(),
                liveness=health.episode is None,
            )
        )
        self.notifier.send(notices)
        return notices

    def begin_shutdown(self) -> None:
        """Answer pending long-polls now, so a stop does not wait out their timeouts."""
        self.closing.set()
        self._wake_claims()

    def stop(self) -> None:
        self._stopped.set()
        if self.escalations:
            self.escalations.stop()
            self.escalations.join(timeout=5)
        if self._pruner:
            self._pruner.stop()
        if self._prober:
            self._prober.stop()
        if self._reaper:
            self._reaper.stop()
            self._reaper.join(timeout=5)
        self.notifier.stop()
        with self.work_ready:
            self.work_ready.notify_all()
        self.db.close()
