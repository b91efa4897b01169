"""The durable record of every call to the external tier (the ``escalations`` table).

One row per call: its id is the ``request_id`` the gateway dedupes on, so a call re-sent
after a brain restart (state ``sent``, no answer recorded) reaches the gateway as the same
request. A retry of the same call after a retryable error keeps its row and id; a re-ask
after an unusable reply is a new call and a new row. The table has no foreign keys to
tasks or plans on purpose: what was spent must stay on record when those are deleted.

States: ``queued`` (waiting to be sent: new, backing off, or rate limited), ``sent`` (in
flight, or in flight when the brain stopped), ``over_budget`` (waits for the budget, or
failed over it), ``answered`` (the provider answered; ``outcome`` says what it was) and
``failed`` (given up on: refused, attempts used up, task cancelled).

The statements are ``store/escalations.py``'s; this module names them for the rooms above.
"""

from __future__ import annotations

import sqlite3

from airig.brain.escalation.budget import Spend, day_start, month_start
from airig.brain.store.escalations import (
    DUE_STATES,
    OPEN_STATES,
    calls,
    due,
    enqueue,
    get,
    recent_sends,
    spent_since,
    totals,
    update,
)

__all__ = [
    "DUE_STATES", "OPEN_STATES", "calls", "due", "enqueue", "get", "recent_sends", "spend",
    "totals", "update",
]  # fmt: skip


def spend(conn: sqlite3.Connection, now: float, excluding: str = "") -> Spend:
    """What was spent today and this month (UTC), calls in flight counted at their estimate."""
    return Spend(
        today=spent_since(conn, day_start(now), excluding),
        month=spent_since(conn, month_start(now), excluding),
    )
