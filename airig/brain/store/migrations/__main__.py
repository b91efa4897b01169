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
- ``migrate-store --from brain.db [--to URL]``: copies a SQLite store into an empty
  PostgreSQL store (``migrate_store.py``), in one transaction, checked before it commits;
  ``--to`` defaults to ``BRAIN_DATABASE_URL``. A per-table summary, exit 0; anything
  refused is one line on stderr, exit 2, and the target holds no row; Ctrl-C too (130).
"""

from __future__ import annotations

import argparse
import logging
import os
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


MIGRATE_HELP = """\
Copies the brain's SQLite store (--from) into an empty PostgreSQL store (--to, default
BRAIN_DATABASE_URL), in one transaction: every row or none. The SQLite store is upgraded
to this airig's revision, then only read. The brain runs in a container, so run it there,
with the URL from your shell's environment rather than on the command line:

  cd 03-agents && BRAIN_DATABASE_URL='postgresql://airig:PASSWORD@db.lan/airig' \\
    docker compose -p airig-agents exec -e BRAIN_DATABASE_URL brain \\
    python -m airig.brain.store.migrations migrate-store --from /state/brain.db

What the brain records after the copy began stays in the SQLite file only: let plans
finish (or cancel them) first. See docs/upgrades-and-backups.md.
"""


def _migrate_store(source: str, url: str | None) -> int:
    from pathlib import Path

    from airig.brain.store.migrations.migrate_store import migrate_store
    from airig.common.errors import AirigError

    logging.getLogger("alembic").setLevel(logging.WARNING)
    url = os.environ.get("BRAIN_DATABASE_URL", "") if url is None else url
    if not url:
        print(
            "migrate-store needs the PostgreSQL store: --to URL or BRAIN_DATABASE_URL",
            file=sys.stderr,
        )
        return 2
    try:
        migrate_store(Path(source), url)
    except AirigError as exc:
        print(f"{exc.message}; {exc.hint}" if exc.hint else exc.message, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("migrate-store interrupted: nothing was written to PostgreSQL", file=sys.stderr)
        return 130
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
    move = commands.add_parser(
        "migrate-store",
        help="copy a SQLite store into an empty PostgreSQL store",
        description=MIGRATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    move.add_argument(
        "--from", dest="source", required=True, help="the SQLite store (BRAIN_DB's file)"
    )
    move.add_argument("--to", dest="url", help="the PostgreSQL URL (default: BRAIN_DATABASE_URL)")
    args = parser.parse_args(argv)
    if args.command == "migrate-store":
        return _migrate_store(args.source, args.url)
    if args.command == "upgrade":
        return _upgrade(args.url)
    from alembic import command

    from airig.brain.store.migrations import revisions, runner

    number = f"{int(revisions.head()) + 1:04d}"
    command.revision(runner.config(), message=args.message, rev_id=number)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
