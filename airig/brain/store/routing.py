"""The statements behind the routing advice (``ops/routing.py``, issue 40 §3): which tasks
failed or escalated on one model and then succeeded on another, grouped in SQL.

A task's model is fixed when its plan is submitted: neither a retry nor the escalation
criteria move a task to another local model. So the history holds two kinds of "then
succeeded elsewhere":

- ``external``: the task failed locally (``task_errors``) or the criteria sent it out (a
  prompt over the local window, the brain model's verdict), and the external tier's
  answer or breakdown made it succeed (an ``escalations`` row answered with outcome
  ``answer`` / ``breakdown``). A task sent with ``escalate: always`` never tried locally
  and is no evidence against its model.
- ``local``: the same task (its plan's name and its key) failed or escalated on model A,
  and a later run of it, submitted again with model B, succeeded locally (not through
  the external tier, not reused from an earlier run).

Each statement returns at most ``MAX_GROUPS`` groups (the ones with the most evidence)
with at most ``EXAMPLES`` example rows each: the grouping, the counts and the ranking run
in the database, so a long history costs the engine's scan and never a list of its rows
in Python (20k tasks, 100k events: about 0.1 s on either engine, a few dozen KiB in
Python; tests/unit/brain/test_routing_advice.py prints it). The window functions
(``ROW_NUMBER``, ``DENSE_RANK``, ``COUNT``/``SUM`` over a partition) and ``AS MATERIALIZED``
are spelled alike on SQLite (3.35 and later, as ``RETURNING`` already needs) and PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from airig.brain.store import dialect

# A prompt's estimated tokens, coarsely: [0, 1k), [1k, 4k), [4k, 16k), 16k and more.
# Bucket -1: a type that takes no prompt (its payload's size says nothing of the model's work).
EDGES = (1000, 4000, 16000)
EXAMPLES = 5
MAX_GROUPS = 100

# The external tier's outcomes that made the task succeed (escalation/sender.py).
_WON = "e.state = 'answered' AND e.outcome IN ('answer', 'breakdown')"
# Sent by the criteria after a local try or because of the task's prompt, not by its plan.
_BY_CRITERIA = "e.why <> 'escalate: always'"


def _bucket(conn: Any) -> str:
    """The task's prompt bucket: the criteria's estimate (``context_tokens``) where they
    made one, else characters / 4 of the stored payload, as ``criteria.prompt_tokens``
    counts. The edges are this module's constants, never input."""
    tokens = "COALESCE(t.context_tokens, length(t.payload_json) / 4)"
    steps = " ".join(f"WHEN {tokens} < {edge} THEN {i}" for i, edge in enumerate(EDGES))
    return (
        f"CASE WHEN t.type IN ({dialect.json_values(conn, '?1')}) "
        f"THEN CASE {steps} ELSE {len(EDGES)} END ELSE -1 END"
    )


def _external_evidence(conn: Any, by_plan: bool) -> str:
    plan = "p.name" if by_plan else "NULL"
    return f"""
ev AS (
SELECT t.id, t.plan_id, t.key, t.type, COALESCE(t.model, '') AS from_model,
       {plan} AS plan_name, {_bucket(conn)} AS bucket, 'external' AS use_model,
       t.finished_at AS won_at,
       CASE WHEN t.task_errors > 0 THEN 1 ELSE 0 END AS failed,
       1 AS escalated
FROM tasks t JOIN plans p ON p.id = t.plan_id
WHERE t.state = 'SUCCEEDED' AND t.finished_at >= ?2
  AND t.id IN (SELECT e.task_id FROM escalations e
               WHERE e.answered_at >= ?2 AND {_WON} AND {_BY_CRITERIA}))"""


def _local_evidence(conn: Any, by_plan: bool) -> str:
    plan = "f.plan_name" if by_plan else "NULL"
    # IN / NOT IN over the escalations (a thousand rows where tasks are a hundred thousand),
    # not a correlated EXISTS: PostgreSQL hashes the subquery once whatever its statistics
    # say, where a freshly filled table's estimates (one row) made it loop per task (6 s).
    escalated = f"t.id IN (SELECT e.task_id FROM escalations e WHERE {_BY_CRITERIA})"
    won_outside = f"t.id IN (SELECT e.task_id FROM escalations e WHERE {_WON})"
    # The two sides made once each (MATERIALIZED: SQLite 3.35, PostgreSQL 12), then joined:
    # folded into one plan, PostgreSQL probed the tasks once per (plan, success) pair.
    return f"""
fails AS MATERIALIZED (
  SELECT t.id, t.plan_id, t.key, t.type, t.model AS from_model, p.name AS plan_name,
         {_bucket(conn)} AS bucket, COALESCE(t.finished_at, t.created_at) AS ended_at,
         CASE WHEN t.task_errors > 0 THEN 1 ELSE 0 END AS failed,
         CASE WHEN {escalated} THEN 1 ELSE 0 END AS escalated
  FROM tasks t JOIN plans p ON p.id = t.plan_id
  WHERE t.model IS NOT NULL AND t.state IN ('FAILED', 'SUCCEEDED', 'ESCALATED')
    AND ((t.state = 'FAILED' AND t.task_errors > 0) OR {escalated})),
wins AS MATERIALIZED (
  SELECT p.name AS plan_name, t.key, t.model, MAX(t.finished_at) AS won_at
  FROM tasks t JOIN plans p ON p.id = t.plan_id
  WHERE t.state = 'SUCCEEDED' AND t.model IS NOT NULL AND t.finished_at >= ?2
    AND t.reused_from IS NULL AND NOT {won_outside}
  GROUP BY p.name, t.key, t.model),
ev AS (
  SELECT f.id, f.plan_id, f.key, f.type, f.from_model, {plan} AS plan_name, f.bucket,
         w.model AS use_model, w.won_at, f.failed, f.escalated
  FROM fails f JOIN wins w
    ON w.plan_name = f.plan_name AND w.key = f.key AND w.model <> f.from_model
   AND w.won_at > f.ended_at)"""


_GROUP = "type, plan_name, bucket, from_model, use_model"


def _ranked(evidence: str) -> str:
    """Every evidence row (``ev``, the last of the ``evidence`` CTEs) with its group's
    counts, its rank in the group (newest success first) and the group's rank (most
    evidence first); only the rows callers keep."""
    return f"""
WITH {evidence},
counted AS (
  SELECT ev.*,
         COUNT(*) OVER (PARTITION BY {_GROUP}) AS n,
         SUM(failed) OVER (PARTITION BY {_GROUP}) AS n_failed,
         SUM(escalated) OVER (PARTITION BY {_GROUP}) AS n_escalated,
         ROW_NUMBER() OVER (PARTITION BY {_GROUP} ORDER BY won_at DESC, id DESC) AS rn
  FROM ev),
ranked AS (
  SELECT counted.*, DENSE_RANK() OVER (ORDER BY n DESC, {_GROUP}) AS g
  FROM counted WHERE n >= ?3)
SELECT id, plan_id, key, type, plan_name, bucket, from_model, use_model, n, n_failed,
       n_escalated, g
FROM ranked WHERE g <= {MAX_GROUPS} AND rn <= {EXAMPLES}
ORDER BY g, rn"""


def evidence(
    conn: sqlite3.Connection, since: float, min_tasks: int, prompt_types: Iterable[str],
    *, external: bool, by_plan: bool,
) -> list[sqlite3.Row]:  # fmt: skip
    """The groups with ``min_tasks`` or more evidence tasks succeeded since ``since``: one
    row per example task (at most ``EXAMPLES`` per group, ``MAX_GROUPS`` groups), each
    with its group's key and counts (``n``, ``n_failed``, ``n_escalated``) and ``g``, the
    group's rank. ``by_plan`` False: the plan's name left out of the grouping (NULL)."""
    source = _external_evidence if external else _local_evidence
    sql = _ranked(source(conn, by_plan))
    params = (dialect.json_list(prompt_types), since, min_tasks)
    return list(conn.execute(sql, params).fetchall())
