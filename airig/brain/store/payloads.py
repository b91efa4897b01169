"""A task's payload as a worker gets it: upstream results templated in, within what one
claim (``BRAIN_MAX_CLAIM_BYTES``) and the whole brain (``BRAIN_MAX_INFLIGHT_BYTES``) may
carry. The claim (``leases.claim``) renders through it, and so do the escalation sender
and a task that just became READY (``refuse_oversized``), which is why it sits here in
the store and not beside the claim.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airig.brain.inflight import Hold
from airig.brain.settings import BrainSettings
from airig.brain.store import fanout, results, shell_inputs, states
from airig.brain.store.events import Outbox
from airig.common import write_paths


class OverClaimBudget(Exception):
    """The task's payload would not fit in what this claim may still carry."""


@dataclass
class ClaimBudget:
    """Payload bytes one claim may still carry (``BRAIN_MAX_CLAIM_BYTES``). A task that
    would pass it stays READY for the next claim, unless it is the claim's first.

    ``hold``: the answer's share of what the whole brain may hold rendered at once
    (``inflight.py``, ``BRAIN_MAX_INFLIGHT_BYTES``); a task the pool cannot take now
    stays READY too, first or not. ``replay``: the leases exist already, so the payloads
    are counted in the pool but never refused."""

    left: int
    taken: int = 0
    hold: Hold | None = None
    replay: bool = False

    def take(self, size: int) -> None:
        if self.replay:
            if self.hold is not None:
                self.hold.charge(size)
            return
        if self.taken and size > self.left:
            raise OverClaimBudget  # the claim stops adding tasks: no message, none is shown
        if self.hold is not None and not self.hold.take(size):
            raise OverClaimBudget
        self.left -= size
        self.taken += 1


def _output_of(
    conn: sqlite3.Connection, task: sqlite3.Row, settings: BrainSettings
) -> Callable[[str], dict]:
    def output_of(key: str) -> dict:
        row = conn.execute(
            "SELECT * FROM tasks WHERE plan_id = ? AND key = ?", (task["plan_id"], key)
        ).fetchone()
        return fanout.load_output(conn, settings.results_dir, row)  # a group's: its items'

    return output_of


def _least_bytes(
    conn: sqlite3.Connection, task: sqlite3.Row, settings: BrainSettings
) -> Callable[[str, str], int]:
    """The fewest bytes a template inserts, from the store alone: a group's whole output
    (or its ``items``) is canonical JSON of the size its items' stored outputs add up to
    (and no shorter once escaped into a payload); anything else, 0 (not known unloaded)."""

    def least(key: str, path: str) -> int:
        row = conn.execute(
            "SELECT * FROM tasks WHERE plan_id = ? AND key = ?", (task["plan_id"], key)
        ).fetchone()
        if row is None or row["type"] != fanout.GROUP_TYPE or path not in ("", ".items"):
            return 0
        described = fanout.describe(conn, settings.results_dir, row)
        return described.json_bytes if not path else described.items_bytes

    return least


def _stored_bytes(
    conn: sqlite3.Connection, task: sqlite3.Row, settings: BrainSettings
) -> Callable[[str], int]:
    def stored_bytes(key: str) -> int:
        row = conn.execute(
            """SELECT length(output_json) AS n, * FROM tasks
               WHERE plan_id = ? AND key = ?""",
            (task["plan_id"], key),
        ).fetchone()
        if row["type"] == fanout.GROUP_TYPE:
            return fanout.group_output_bytes(conn, settings.results_dir, row)
        if row["n"] is not None:  # canonical JSON is ASCII: characters are bytes
            return int(row["n"])
        if not row["output_file"]:
            return 0
        return (settings.results_dir / row["output_file"]).stat().st_size

    return stored_bytes


def rendered_payload(
    conn: sqlite3.Connection,
    task: sqlite3.Row,
    settings: BrainSettings,
    budget: ClaimBudget | None = None,
) -> dict[str, Any]:
    """The task's payload with upstream results templated in. KeyError (no such field),
    OSError (result file gone) or ValueError (``results.RenderTooLarge``; a write path
    filled outside its plan's folder, ``write_paths.LeavesPlanFolder``) when it cannot
    be: ``claim`` fails the task for good, since no retry renders it differently. With a
    ``budget``, the payload's size is charged to it before anything is built
    (``OverClaimBudget`` when it does not fit)."""
    payload = json.loads(task["payload_json"])
    uses = results.template_uses(payload)
    limit = settings.max_rendered_bytes
    least = _least_bytes(conn, task, settings)
    texts, added = results.fill_texts(uses, _output_of(conn, task, settings), limit, least)
    # a path an upstream output fills stays inside its plan's folder (LeavesPlanFolder),
    # checked on that one field before anything is charged or built
    field = write_paths.write_field(task["type"])
    if texts and field and isinstance(payload.get(field), str):
        filled = {field: results.substitute(payload[field], texts)}
        write_paths.check_filled(task["type"], payload, filled)
    if budget is not None:
        budget.take(len(task["payload_json"]) + added)
    if not texts:
        return payload
    if task["type"] == "shell":  # upstream values reach a command only as variables
        return shell_inputs.substitute(payload, texts)
    return results.substitute(payload, texts)


def refuse_oversized(
    conn: sqlite3.Connection, outbox: Outbox, task: sqlite3.Row, now: float,
    settings: BrainSettings,
) -> None:  # fmt: skip
    """Fail a task that just became READY if its templates would add more than
    ``BRAIN_MAX_RENDERED_BYTES``: its upstream results exist now, so its size is known,
    and it fails here with the sizes in its error rather than when a worker claims it.
    The upstream sizes on record decide most tasks without loading anything; only a task
    they do not clear has its texts measured. A template that cannot be filled at all (no
    such field, result file gone) is left to the claim, which fails it with that reason."""
    uses = results.template_uses(json.loads(task["payload_json"]))
    if not uses:
        return
    limit = settings.max_rendered_bytes
    try:
        if results.upper_bound(uses, _stored_bytes(conn, task, settings)) <= limit:
            return
        least = _least_bytes(conn, task, settings)
        results.fill_texts(uses, _output_of(conn, task, settings), limit, least)
    except results.RenderTooLarge as exc:
        states.fail_terminal(conn, outbox, task, now, "template_error", str(exc),
                             "payload template")  # fmt: skip
    except (KeyError, OSError, ValueError):
        return
