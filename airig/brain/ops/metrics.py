"""Prometheus series of the brain, on a registry of its own (one per app instance).

Queue depth is read from the database at scrape time by a collector, so it can never
drift from the truth; counters and the histogram are fed from each committed Outbox.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from airig.brain.store import alerts
from airig.brain.store import metrics as stored_metrics
from airig.brain.store.db import Database

if TYPE_CHECKING:
    from airig.brain.store.retention import Retention


class QueueDepth(Collector):
    def __init__(self, db: Database) -> None:
        self._db = db

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "airig_tasks", "Tasks by class and state", labels=["task_class", "state"]
        )
        with self._db.read() as conn:
            rows = stored_metrics.task_counts(conn)
        for row in rows:
            family.add_metric([row["task_class"], row["state"]], row["n"])
        yield family


class ActiveAlerts(Collector):
    """1 per alert that holds now (airig/brain/ops/alerts.py), read from its table at
    scrape, with those held in memory (``held``: a store that cannot be written)."""

    def __init__(self, db: Database, held: Callable[[], list[Any]] | None = None) -> None:
        self._db = db
        self._held = held or list

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "airig_alert_active", "Alerts that hold now", labels=["alert", "subject"]
        )
        with self._db.read() as conn:
            rows = alerts.kinds_and_subjects(conn)
        for row in rows:
            family.add_metric([row["kind"], row["subject"]], 1)
        for alert in self._held():
            family.add_metric([alert.kind, alert.subject], 1)
        yield family


class StoreSize(Collector):
    """Bytes on disk of the store (retention.py measures them, cached for a minute)."""

    def __init__(self, retention: Retention) -> None:
        self._retention = retention

    def collect(self) -> Iterable[GaugeMetricFamily]:
        sizes = self._retention.sizes()
        family = GaugeMetricFamily(
            "airig_store_bytes", "Bytes on disk of the brain's store", labels=["part"]
        )
        parts = {"db": sizes.db_bytes, "wal": sizes.wal_bytes, "results": sizes.results_bytes}
        parts.update({f"{name}_log": size for name, size in sizes.logs.items()})
        for part, size in parts.items():
            family.add_metric([part], size)
        yield family
        yield GaugeMetricFamily(
            "airig_retention_days", "AIRIG_RETENTION_DAYS (0: keep forever)",
            value=float(self._retention.settings.retention_days),
        )  # fmt: skip


class BrainMetrics:
    def __init__(self, db: Database, held: Callable[[], list[Any]] | None = None) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(QueueDepth(db))
        self.registry.register(ActiveAlerts(db, held))
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
        # The external tier (airig/brain/escalation/): calls by outcome, tokens, money.
        self.escalation_calls = Counter(
            "airig_escalation_calls", "Calls to the external tier, by outcome", ["outcome"],
            registry=self.registry,
        )  # fmt: skip
        self.escalation_tokens = Counter(
            "airig_escalation_tokens", "Tokens sent (in) and received (out) by the external tier",
            ["direction"], registry=self.registry,
        )  # fmt: skip
        self.escalation_cost = Counter(
            "airig_escalation_cost", "Spent on the external tier (AIRIG_ESCALATION_PRICE_*)",
            registry=self.registry,
        )  # fmt: skip

    def watch_store(self, retention: Retention) -> None:
        """Store sizes as gauges, and counters of what retention removed."""
        self.registry.register(StoreSize(retention))
        self.pruned = Counter(
            "airig_retention_pruned", "What retention removed, by kind", ["kind"],
            registry=self.registry,
        )  # fmt: skip
        retention.on_pruned = self._count_pruned

    def _count_pruned(self, plans: int, tasks: int, events: int, result_bytes: int) -> None:
        for kind, value in (("plans", plans), ("tasks", tasks), ("events", events),
                            ("result_bytes", result_bytes)):  # fmt: skip
            self.pruned.labels(kind=kind).inc(value)

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
            elif name == "escalation_calls":
                self.escalation_calls.labels(**labels).inc(value)
            elif name == "escalation_tokens":
                self.escalation_tokens.labels(**labels).inc(value)
            elif name == "escalation_cost":
                self.escalation_cost.inc(value)
