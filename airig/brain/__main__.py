"""``python -m airig.brain`` serves the API; ``--check`` is the container healthcheck."""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from airig.common import healthcheck
from airig.common.errors import AirigError
from airig.common.jsonlog import setup_json_logging

if TYPE_CHECKING:
    # imported in main() after `--check` is handled: the settings' pydantic import is
    # most of a healthcheck's CPU (airig/common/healthcheck.py)
    from airig.brain.settings import BrainSettings

log = logging.getLogger("airig.brain")
SWITCH_INTERVAL_S = 0.001


def snapshot(settings: BrainSettings, dest: str) -> int:
    """``--snapshot PATH``: a consistent copy of the live store (store/backups.py), run by
    `backup` in the brain's container while the brain serves; prints what it holds. A
    failure (no store at BRAIN_DB, a full or read-only destination) is one plain line on
    stderr naming the store or the destination: `backup` quotes the last line it reads. A
    store on PostgreSQL is refused the same way: its backup is pg_dump's."""
    from airig.brain.store.backups import take_snapshot

    try:
        summary = take_snapshot(settings.db_path, Path(dest), settings.database_url)
    except AirigError as exc:
        print(f"{exc.message}; {exc.hint}" if exc.hint else exc.message, file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0


def serve(settings: BrainSettings) -> int:
    import uvicorn

    from airig.brain.api.app import create_app, served
    from airig.brain.inflight import return_large_frees
    from airig.brain.service import Brain

    return_large_frees()  # freed answers go back to the system, not to a heap
    # Every SQLite call gives the GIL away; while another thread computes (a dashboard's
    # list of 500 workers, a plan's validation) taking it back waits for that thread's
    # switch interval, 5 ms by default, and a transaction holding the write lock made
    # dozens of such calls. 1 ms bounds each wait: a 500-task submit beside one busy
    # thread went from 165-200 ms to 40-50 ms (benchmarks/fleet.py, the brain's README).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    app = create_app(settings)
    brain: Brain = app.state.brain

    class BrainServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            brain.begin_shutdown()  # release long-polls before uvicorn waits for them
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        served(app),
        host=settings.listen_host,
        port=settings.listen_port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    log.info("brain listening", extra={"host": settings.listen_host, "port": settings.listen_port})
    BrainServer(config).run()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airig.brain")
    parser.add_argument("--check", action="store_true", help="exit 0 when the brain is healthy")
    parser.add_argument(
        "--snapshot", metavar="PATH", help="write a consistent copy of the store (backup)"
    )
    args = parser.parse_args(argv)
    if args.check:  # the container healthcheck: the standard library only
        return healthcheck.run("brain", healthcheck.brain)
    from pydantic import ValidationError

    from airig.brain.settings import BrainSettings

    setup_json_logging()
    try:
        settings = BrainSettings()
        if args.snapshot:
            return snapshot(settings, args.snapshot)
        return serve(settings)
    except ValidationError as exc:
        first = exc.errors()[0]
        log.error("invalid brain setting", extra={"setting": first["loc"], "error": first["msg"]})
    except AirigError as exc:
        log.error(exc.message, extra={"hint": exc.hint})
    except (OSError, sqlite3.Error) as exc:
        hint = "BRAIN_DB and BRAIN_RESULTS_DIR must be on a writable volume"
        log.error(f"cannot open the brain's state: {exc}", extra={"hint": hint})
    return 2


if __name__ == "__main__":
    sys.exit(main())
