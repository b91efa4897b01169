"""``python -m airig.brain.store.migrations``: the store's migrations by hand.

- ``new "what changes"`` (for developers, AGENTS.md, "How to change the store's schema"):
  writes ``versions/<NNNN>_<slug>.py`` with the next number after the newest, from
  ``script.py.mako``; fill in its ``upgrade()`` and mirror the change in ``schema.py``.
- ``upgrade [--url URL]``: makes or upgrades the store, as a brain's start does: the
  PostgreSQL database of ``--url`` or ``BRAIN_DATABASE_URL``, else the SQLite file of
  ``BRAIN_DB``. The brain's queries do not run on PostgreSQL yet (issue 38), so this is the
  way to its schema there. Prints the store's revision (the URL's password masked); a
  failure is one line on stderr, exit 2. Prefer the environment to ``--url``: a command
  line is visible to every user of the machine (``ps``).
"""

from __future__ import annotations

import argparse
import logging
import sys


def _upgrade(url: str | None) -> int:
    from pydantic import ValidationError

    from airig.brain.settings import BrainSettings
    from airig.brain.store import migrations
    from airig.brain.store.migrations import postgres
    from airig.brain.store.migrations.revisions import head
    from airig.common.errors import AirigError

    # the one line below is the whole story: Alembic's INFO lines and the brain's JSON log
    # of the upgrade stay out of it
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        settings = BrainSettings()
        url = settings.database_url if url is None else url
        if url:
            migrations.upgrade(url=url)
            where = postgres.masked(postgres.parse(url))
        else:
            migrations.upgrade(settings.db_path)
            where = str(settings.db_path)
    except ValidationError as exc:
        first = exc.errors()[0]
        print(f"invalid brain setting {first['loc']}: {first['msg']}", file=sys.stderr)
        return 2
    except AirigError as exc:
        print(f"{exc.message}; {exc.hint}" if exc.hint else exc.message, file=sys.stderr)
        return 2
    print(f"the brain's store {where} is at revision {head()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airig.brain.store.migrations")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="write the next revision's file")
    new.add_argument("message", help='what the revision changes, e.g. "tasks.note column"')
    up = commands.add_parser("upgrade", help="make or upgrade the store, as a brain's start")
    up.add_argument(
        "--url", help="a PostgreSQL URL (default: BRAIN_DATABASE_URL, else the file BRAIN_DB)"
    )
    args = parser.parse_args(argv)
    if args.command == "upgrade":
        return _upgrade(args.url)
    from alembic import command

    from airig.brain.store.migrations import revisions, runner

    number = f"{int(revisions.head()) + 1:04d}"
    command.revision(runner.config(), message=args.message, rev_id=number)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
