"""The kit's history per day or week (issue 40 §2), read from the store for
``GET /v1/report`` (``api/routes/report.py``) and the launcher's `report`.

Per bucket: tasks done and failed by type and model (``tasks.finished_at``), their retries
(``task_retry_scheduled`` events), the median and p90 run time of the tasks that
succeeded (nearest rank, computed by the engine with window functions: no durations are
loaded into the brain), the model loads and the time the swaps took (the ``swap`` metrics a
GPU worker reports with a success), the external tier's calls and their cost
(``escalations.created_at``) and the alerts fired (``alert_fired`` events).

What the store holds is what retention kept: finished plans, their tasks and events leave
it after ``AIRIG_RETENTION_DAYS`` (the route clamps a longer ``since`` to that), the
escalations ledger stays. Fan-out groups (``type = 'group'``) are bookkeeping, not work,
and are left out.

Bounded: at most ``MAX_BUCKETS`` buckets (the route refuses more) and ``MAX_ROWS`` rows per
section, ``truncated`` saying so; every statement is a grouped read of the window's rows,
the same SQL on SQLite and PostgreSQL except where ``dialect``-style helpers below say.

Every function runs inside the caller's read; none opens its own.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airig.brain.store import dialect

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
# 1970-01-05 was a Monday: weeks start on Mondays, UTC (ISO 8601), days at midnight UTC.
WEEK_ORIGIN = 4 * DAY_S
MAX_BUCKETS = 366  # a year of days, seven years of weeks
MAX_ROWS = 5000  # rows per section: (bucket, type, model) keys a plan could invent
GROUP_TYPE = "group"  # store/fanout.py GROUP_TYPE: a fan-out group's own row


@dataclass(frozen=True)
class Window:
    """The report's time line: buckets of ``width`` seconds from ``start`` (a bucket
    boundary at or before ``since``), the rows read are those at or after ``since`` and
    before ``until``."""

    since: float
    until: float
    by: str  # "day" | "week"

    @property
    def width(self) -> float:
        return DAY_S if self.by == "day" else WEEK_S

    @property
    def start(self) -> float:
        origin = 0.0 if self.by == "day" else WEEK_ORIGIN
        return origin + ((self.since - origin) // self.width) * self.width

    @property
    def count(self) -> int:
        return int((self.until - self.start) // self.width) + 1


def buckets_for(since: float, until: float, by: str) -> int:
    """How many buckets a report from ``since`` to ``until`` by ``by`` holds."""
    return Window(since, until, by).count


def label(start: float, by: str) -> str:
    """A bucket's name: its day (2026-11-29) or its ISO week (2026-W48)."""
    day = datetime.fromtimestamp(start, UTC)
    if by == "day":
        return day.strftime("%Y-%m-%d")
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"


def _bucket(conn: Any, column: str) -> str:
    """The bucket index of ``column`` (seconds) as SQL, with two parameters (start, width).
    ``column`` is never before start, so SQLite's truncating CAST is a floor; PostgreSQL's
    CAST rounds, so FLOOR first there."""
    if dialect.is_pg(conn):
        return f"CAST(FLOOR(({column} - ?) / ?) AS BIGINT)"
    return f"CAST(({column} - ?) / ? AS INTEGER)"


def _number(conn: Any, column: str, path: tuple[str, ...]) -> str:
    """A JSON number at ``path`` in a TEXT column as SQL, NULL where absent or not a number
    (a worker's metrics are free-form: a string there must not fail the whole read)."""
    if dialect.is_pg(conn):
        at = f"(({column})::jsonb #> '{{{','.join(path)}}}')"
        return f"(CASE WHEN jsonb_typeof({at}) = 'number' THEN ({at} #>> '{{}}')::float8 END)"
    where = "$." + ".".join(path)
    return (
        f"(CASE WHEN json_type({column}, '{where}') IN ('integer', 'real')"
        f" THEN json_extract({column}, '{where}') END)"
    )


def _string(conn: Any, column: str, path: tuple[str, ...]) -> str:
    """A JSON string at ``path`` in a TEXT column as SQL, NULL otherwise."""
    if dialect.is_pg(conn):
        at = f"(({column})::jsonb #> '{{{','.join(path)}}}')"
        return f"(CASE WHEN jsonb_typeof({at}) = 'string' THEN ({at} #>> '{{}}') END)"
    where = "$." + ".".join(path)
    return (
        f"(CASE WHEN json_type({column}, '{where}') = 'text'"
        f" THEN json_extract({column}, '{where}') END)"
    )


def _unload_ms(conn: Any, column: str) -> str:
    """The sum of the numbers in ``swap.unload_ms`` (model -> ms) as SQL, 0 without any."""
    if dialect.is_pg(conn):
        at = f"(({column})::jsonb #> '{{swap,unload_ms}}')"
        return (
            "(SELECT COALESCE(SUM((u.v #>> '{}')::float8), 0) FROM jsonb_each("
            f"CASE WHEN jsonb_typeof({at}) = 'object' THEN {at} ELSE '{{}}'::jsonb END)"
            " AS u(k, v) WHERE jsonb_typeof(u.v) = 'number')"
        )
    return (
        f"(SELECT COALESCE(SUM(u.value), 0) FROM json_each(CASE WHEN json_type({column},"
        f" '$.swap.unload_ms') = 'object' THEN json_extract({column}, '$.swap.unload_ms')"
        " ELSE '{}' END) AS u WHERE u.type IN ('integer', 'real'))"
    )


def _rows(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> tuple[list[Any], bool]:
    """At most ``MAX_ROWS`` rows of ``sql`` and whether there were more."""
    rows = conn.execute(f"{sql} LIMIT {MAX_ROWS + 1}", params).fetchall()
    return rows[:MAX_ROWS], len(rows) > MAX_ROWS


def _tasks(conn: sqlite3.Connection, w: Window) -> tuple[list[Any], bool]:
    bucket = _bucket(conn, "finished_at")
    return _rows(
        conn,
        f"""SELECT {bucket} AS b, type, COALESCE(model, '') AS model,
                   SUM(CASE WHEN state = 'SUCCEEDED' THEN 1 ELSE 0 END) AS done,
                   SUM(CASE WHEN state = 'FAILED' THEN 1 ELSE 0 END) AS failed
            FROM tasks WHERE finished_at >= ? AND finished_at < ?
                AND state IN ('SUCCEEDED', 'FAILED') AND type <> ?
            GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""",
        (w.start, w.width, w.since, w.until, GROUP_TYPE),
    )


def _retries(conn: sqlite3.Connection, w: Window) -> tuple[list[Any], bool]:
    bucket = _bucket(conn, "e.ts")
    return _rows(
        conn,
        f"""SELECT {bucket} AS b, t.type AS type, COALESCE(t.model, '') AS model,
                   COUNT(*) AS retries
            FROM events e JOIN tasks t ON t.id = e.task_id
            WHERE e.ts >= ? AND e.ts < ? AND e.event_type = 'task_retry_scheduled'
            GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""",
        (w.start, w.width, w.since, w.until),
    )


def _durations(conn: sqlite3.Connection, w: Window) -> tuple[list[Any], bool]:
    """Nearest-rank p50 and p90 of finished_at - started_at per (bucket, type, model): rank
    ceil(p * n), in integers both engines divide alike."""
    bucket = _bucket(conn, "finished_at")
    return _rows(
        conn,
        f"""SELECT b, type, model, MAX(n) AS n,
                   MAX(CASE WHEN rn = (n + 1) / 2 THEN d END) AS p50,
                   MAX(CASE WHEN rn = (9 * n + 9) / 10 THEN d END) AS p90
            FROM (SELECT b, type, model, d,
                         ROW_NUMBER() OVER (PARTITION BY b, type, model ORDER BY d) AS rn,
                         COUNT(*) OVER (PARTITION BY b, type, model) AS n
                  FROM (SELECT {bucket} AS b, type, COALESCE(model, '') AS model,
                               finished_at - started_at AS d
                        FROM tasks WHERE finished_at >= ? AND finished_at < ?
                            AND state = 'SUCCEEDED' AND started_at IS NOT NULL
                            AND type <> ?) AS runs) AS ranked
            GROUP BY b, type, model ORDER BY b, type, model""",
        (w.start, w.width, w.since, w.until, GROUP_TYPE),
    )


def _loads(conn: sqlite3.Connection, w: Window) -> tuple[list[Any], bool]:
    bucket = _bucket(conn, "finished_at")
    loaded = _string(conn, "metrics_json", ("swap", "loaded"))
    load_ms = _number(conn, "metrics_json", ("swap", "load_ms"))
    unload_ms = _unload_ms(conn, "metrics_json")
    return _rows(
        conn,
        f"""SELECT b, model, COUNT(*) AS loads, SUM(swap_ms) AS swap_ms FROM (
                SELECT {bucket} AS b, {loaded} AS model,
                       COALESCE({load_ms}, 0) + {unload_ms} AS swap_ms
                FROM tasks WHERE finished_at >= ? AND finished_at < ?
                    AND state = 'SUCCEEDED' AND metrics_json LIKE '%"swap"%') AS swaps
            WHERE model IS NOT NULL GROUP BY b, model ORDER BY b, model""",
        (w.start, w.width, w.since, w.until),
    )


def _escalations(conn: sqlite3.Connection, w: Window) -> tuple[list[Any], bool]:
    bucket = _bucket(conn, "created_at")
    return _rows(
        conn,
        f"""SELECT {bucket} AS b, COALESCE(provider, '') AS provider,
                   COALESCE(model, '') AS model, COUNT(*) AS escalations,
                   SUM(CASE WHEN answered_at IS NOT NULL THEN 1 ELSE 0 END) AS answered,
                   COALESCE(SUM(cost), 0) AS cost
            FROM escalations WHERE created_at >= ? AND created_at < ?
            GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""",
        (w.start, w.width, w.since, w.until),
    )


def _alerts(conn: sqlite3.Connection, w: Window) -> tuple[list[Any], bool]:
    bucket = _bucket(conn, "ts")
    kind = _string(conn, "body_json", ("alert",))
    return _rows(
        conn,
        f"""SELECT b, COALESCE(kind, '') AS kind, COUNT(*) AS fired FROM (
                SELECT {bucket} AS b, {kind} AS kind FROM events
                WHERE ts >= ? AND ts < ? AND event_type = 'alert_fired') AS fired
            GROUP BY b, kind ORDER BY b, kind""",
        (w.start, w.width, w.since, w.until),
    )


def read(conn: sqlite3.Connection, w: Window) -> dict[str, Any]:
    """The report over ``w``: one entry per bucket, oldest first, every bucket listed (an
    empty one too, so a plot's time line has no gaps), and ``truncated`` naming the
    sections cut at ``MAX_ROWS``."""
    buckets: list[dict[str, Any]] = [
        {
            "start": w.start + i * w.width,
            "label": label(w.start + i * w.width, w.by),
            "tasks": {},
            "loads": [],
            "escalations": [],
            "alerts": [],
        }
        for i in range(w.count)
    ]
    truncated: list[str] = []

    def task_row(b: int, task_type: str, model: str) -> dict[str, Any]:
        rows: dict[tuple[str, str], dict[str, Any]] = buckets[b]["tasks"]
        return rows.setdefault(
            (task_type, model),
            {"type": task_type, "model": model, "done": 0, "failed": 0, "retries": 0,
             "run_p50_s": None, "run_p90_s": None},
        )  # fmt: skip

    def section(name: str, found: tuple[list[Any], bool]) -> list[Any]:
        rows, cut = found
        if cut:
            truncated.append(name)
        return [row for row in rows if 0 <= int(row["b"]) < w.count]

    for row in section("tasks", _tasks(conn, w)):
        entry = task_row(int(row["b"]), row["type"], row["model"])
        entry["done"], entry["failed"] = int(row["done"]), int(row["failed"])
    for row in section("retries", _retries(conn, w)):
        task_row(int(row["b"]), row["type"], row["model"])["retries"] = int(row["retries"])
    for row in section("durations", _durations(conn, w)):
        entry = task_row(int(row["b"]), row["type"], row["model"])
        entry["run_p50_s"] = _seconds(row["p50"])
        entry["run_p90_s"] = _seconds(row["p90"])
    for row in section("loads", _loads(conn, w)):
        buckets[int(row["b"])]["loads"].append(
            {"model": row["model"], "loads": int(row["loads"]),
             "swap_s": _seconds((row["swap_ms"] or 0) / 1000.0)}
        )  # fmt: skip
    for row in section("escalations", _escalations(conn, w)):
        buckets[int(row["b"])]["escalations"].append(
            {"provider": row["provider"], "model": row["model"],
             "escalations": int(row["escalations"]), "answered": int(row["answered"]),
             "cost": round(float(row["cost"]), 6)}
        )  # fmt: skip
    for row in section("alerts", _alerts(conn, w)):
        buckets[int(row["b"])]["alerts"].append({"alert": row["kind"], "fired": int(row["fired"])})
    for bucket in buckets:
        bucket["tasks"] = [bucket["tasks"][key] for key in sorted(bucket["tasks"])]
    return {"buckets": buckets, "truncated": truncated}


def _seconds(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)
