"""``/v1/backups``: the archives ``backup`` wrote, recorded once each is complete on disk.

The launcher records an archive after it has written and checked it, so a row here means
a file that existed; the brain cannot see the host's disk, and does not check it later.
The last one's age is on the dashboard and in ``status``, and the ``backup_old`` alert
(``ops/alerts.py``) fires when it is older than ``AIRIG_BACKUP_MAX_AGE_H``.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from airig.brain.api.auth import Principal
from airig.brain.api.deps import AdminDep, BrainDep, require
from airig.brain.store import backups
from airig.brain.store.events import Outbox

ReaderDep = Annotated[Principal, Depends(require("admin", "metrics"))]


class BackupRecord(BaseModel):
    archive: str = Field(min_length=1, max_length=500)  # its file name, for people
    # strict: 0 is not False and "12" is not 12 (the fuzz test's contract)
    bytes: int = Field(ge=0, strict=True)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    created_at: float = Field(gt=0, strict=True)  # when its snapshot was taken (epoch s)
    models: bool = Field(False, strict=True)  # whether the archive holds the models too


class BackupView(BackupRecord):
    id: int


class BackupsView(BaseModel):
    backups: list[BackupView]
    max_age_h: float  # AIRIG_BACKUP_MAX_AGE_H (0: no alert)
    last_age_s: float | None  # seconds since the newest one; None: never backed up


router = APIRouter(prefix="/v1", tags=["backups"])


@router.post("/backups", response_model=BackupView, status_code=201)
def record_backup(body: BackupRecord, brain: BrainDep, _: AdminDep) -> BackupView:
    """Record an archive `backup` wrote (admin)."""

    def change(conn: sqlite3.Connection, outbox: Outbox, now: float) -> int:
        return backups.record(
            conn, body.created_at, body.archive, body.bytes, body.sha256, body.models
        )

    backup_id = brain.write(change)
    brain.check_alerts()  # a backup_old alert clears now, not at the next pass
    return BackupView(id=backup_id, **body.model_dump())


@router.get("/backups", response_model=BackupsView)
def list_backups(brain: BrainDep, _: ReaderDep, limit: int = 10) -> BackupsView:
    """The newest backups first."""
    with brain.db.read() as conn:
        rows = backups.newest(conn, max(1, min(limit, 100)))
    views = [
        BackupView(id=r["id"], archive=r["archive"], bytes=r["bytes"], sha256=r["sha256"],
                   created_at=r["created_at"], models=bool(r["models"]))
        for r in rows
    ]  # fmt: skip
    last = views[0].created_at if views else None
    return BackupsView(
        backups=views, max_age_h=brain.settings.backup_max_age_h,
        last_age_s=None if last is None else max(0.0, time.time() - last),
    )  # fmt: skip
