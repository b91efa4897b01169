"""``python -m airig.worker`` runs a worker; ``--check`` is the container healthcheck.

The check passes when the heartbeat thread wrote a successful beat recently (the state
file, ``WORKER_STATE_FILE``): the worker registered and the brain answers it.
"""

from __future__ import annotations

import argparse
import logging
import sys

from airig.common import healthcheck
from airig.common.errors import AirigError
from airig.common.jsonlog import setup_json_logging
from airig.worker.hardening import forget_env, make_undumpable

log = logging.getLogger("airig.worker")
BOOTSTRAP_ENV = "WORKER_BOOTSTRAP_TOKEN"


def check(max_age_s: float, state_file: str | None = None) -> int:
    """The container healthcheck: 0 after a recent successful heartbeat. The standard
    library only (airig/common/healthcheck.py): the settings' import is most of its CPU."""
    return healthcheck.run("worker", lambda: healthcheck.worker(max_age_s, state_file))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airig.worker")
    parser.add_argument("--check", action="store_true", help="exit 0 when the worker is healthy")
    parser.add_argument(
        "--max-age", type=float, default=60.0, help="seconds a heartbeat counts as recent"
    )
    args = parser.parse_args(argv)
    setup_json_logging()
    try:
        make_undumpable()  # first: tasks run as this user and could read /proc/<pid>/environ
        if args.check:  # reads the state file only: no settings, no name to look up
            return check(args.max_age)
        from pydantic import ValidationError

        from airig.worker.heartbeat import write_state
        from airig.worker.link import RegistrationRefused
        from airig.worker.settings import WorkerSettings
    except AirigError as exc:
        log.error(exc.message, extra={"hint": exc.hint})
        return 2
    try:
        settings = WorkerSettings()
        settings.require_secrets()
        from airig.worker.runner import Worker

        worker = Worker(settings)
        # Its link to the brain keeps the bootstrap token, for a re-registration after the
        # brain forgot this worker (a lost state volume); nothing else holds it from here.
        forget_env(BOOTSTRAP_ENV)
        settings.bootstrap_token = ""
        worker.install_signal_handlers()
        try:
            return worker.run()
        except RegistrationRefused as exc:
            # Parked, not exited: no restart can fix a refused token, and under the
            # restart policy an exit would repeat this line forever. The healthcheck
            # reports unhealthy; `down`, or `join` with a new token, ends it.
            log.error(exc.message, extra={"hint": exc.hint})
            if worker.heartbeat:  # refused mid-run (a revoked rig): stop beating too
                worker.heartbeat.stop()
            write_state(settings.state_file, settings.name, ok=False)
            worker.stopping.wait()
            return 2
    except ValidationError as exc:
        first = exc.errors()[0]
        log.error("invalid worker setting", extra={"setting": first["loc"], "error": first["msg"]})
    except AirigError as exc:
        log.error(exc.message, extra={"hint": exc.hint})
    return 2


if __name__ == "__main__":
    sys.exit(main())
