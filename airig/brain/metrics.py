"""Prometheus series of the brain, on a registry of its own (one per app instance).

Queue depth is read from the database at scrape time by a collector, so it can never
drift from the truth; counters and the histogram are fed from each committed Outbox.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from airig.brain.db import Database


class QueueDepth(Collector):
    def __init__(self, db: Database) -> None:
        self._db = db

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "airig_tasks", "Tasks by class and state", labels=["task_class", "state"]
        )
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT task_class, state, COUNT(*) AS n FROM tasks GROUP BY task_class, state"
            ).fetchall()
        for row in rows:
            family.add_metric([row["task_class"], row["state"]], row["n"])
        yield family


class ActiveAlerts(Collector):
    """1 per alert that holds now (airig/brain/alerts.py), read from its table at scrape."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "airig_alert_active", "Alerts that hold now", labels=["alert", "subject"]
        )
        with self._db.read() as conn:
            rows = conn.execute("SELECT kind, subject FROM alerts").fetchall()
        for row in rows:
            family.add_metric([row["kind"], row["subject"]], 1)
        yield family


class BrainMetrics:
    def __init__(self, db: Database) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(QueueDepth(db))
        self.registry.register(ActiveAlerts(db))
        self.schedule_to_start = Histogram(
            "airig_schedule_to_start_seconds",
            "Time from READY to the attempt starting on a worker",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
            registry=self.registry,
        )
        self.lease_expiries = Counter(
            "airig_lease_expiries", "Leases that expired (worker lost)", registry=self.registry
        )
        self.stale_reports = Counter(
            "airig_stale_reports_rejected", "Worker writes refused with 409", registry=self.registry
        )
        self.retries = Counter(
            "airig_retries", "Retries scheduled, by kind", ["kind"], registry=self.registry
        )
        self.alerts_fired = Counter(
            "airig_alerts_fired", "Alerts fired, by kind", ["alert"], registry=self.registry
        )

    def apply(self, entries: Iterable[tuple[str, float, dict[str, str]]]) -> None:
        for name, value, labels in entries:
            if name == "schedule_to_start":
                self.schedule_to_start.observe(value)
            elif name == "lease_expiries":
                self.lease_expiries.inc(value)
            elif name == "retries":
                self.retries.labels(**labels).inc(value)
            elif name == "alerts_fired":
                self.alerts_fired.labels(**labels).inc(value)
