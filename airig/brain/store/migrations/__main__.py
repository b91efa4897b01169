"""``python -m airig.brain.store.migrations new "what changes"``: the next revision's file.

For developers (AGENTS.md, "How to change the store's schema"): it writes
``versions/<NNNN>_<slug>.py`` with the next number after the newest, from
``script.py.mako``; fill in its ``upgrade()`` and mirror the change in ``schema.py``.
"""

from __future__ import annotations

import argparse

from alembic import command

from airig.brain.store.migrations import revisions, runner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airig.brain.store.migrations")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="write the next revision's file")
    new.add_argument("message", help='what the revision changes, e.g. "tasks.note column"')
    args = parser.parse_args(argv)
    number = f"{int(revisions.head()) + 1:04d}"
    command.revision(runner.config(), message=args.message, rev_id=number)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
