"""``python -m airig.brain`` serves the API; ``--check`` is the container healthcheck."""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

from pydantic import ValidationError

from airig.brain.settings import BrainSettings
from airig.common.errors import AirigError
from airig.common.jsonlog import setup_json_logging

log = logging.getLogger("airig.brain")
SWITCH_INTERVAL_S = 0.001


def check(settings: BrainSettings) -> int:
    """0 when this container's brain answers /health with status ok."""
    url = f"http://127.0.0.1:{settings.listen_port}/health"
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:  # 503 degraded: a store it cannot write
        try:
            detail = json.load(exc).get("detail")
        except (OSError, ValueError, AttributeError):
            detail = None
        print(f"brain unhealthy: HTTP {exc.code}" + (f": {detail}" if detail else ""),
              file=sys.stderr)  # fmt: skip
        return 1
    except (OSError, ValueError, urllib.error.URLError) as exc:
        print(f"brain unhealthy: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0 if body.get("status") == "ok" else 1


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
    setup_json_logging()
    try:
        settings = BrainSettings()
        if args.snapshot:
            return snapshot(settings, args.snapshot)
        return check(settings) if args.check else serve(settings)
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
