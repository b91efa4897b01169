"""The command line's edge: where every failure becomes one line and a hint.

AirigError (message + hint), usage errors of whichever click typer parses with, and Docker
errors that slipped past the adapter are printed once, in red, with click's exit codes;
nothing else is caught, so a real bug still shows its traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Protocol, cast

import typer

from airig.common.errors import AirigError
from airig.launcher.compose.docker import ENGINE_HINT
from airig.launcher.console import fail

INTERRUPTED = 130  # Ctrl-C's exit code: 128 + SIGINT, as a shell reports it


def run_at_edge(app: typer.Typer) -> None:
    """Run ``app``; every failure becomes one red line and a hint, with click's exit codes
    (2 for a usage error), never a traceback or local variables (they hold secrets)."""
    try:
        # without standalone mode click returns (not raises) a command's typer.Exit code
        code = app(standalone_mode=False)
        if code == INTERRUPTED:  # typer >= 0.26 turns Ctrl-C into a silent Exit(130)
            fail("interrupted")
        if isinstance(code, int) and code:
            sys.exit(code)
    except AirigError as exc:
        fail(exc.message, exc.hint)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        fail("interrupted")
        sys.exit(INTERRUPTED)
    except typer.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click's (typer < 0.26) Ctrl-C
            fail("interrupted")
            sys.exit(INTERRUPTED)
        fail("aborted")
        sys.exit(1)
    except typer.Exit as exc:  # returned above by every typer so far; raised, should one change
        sys.exit(exc.exit_code)
    except Exception as exc:  # click usage errors and the like
        usage_error, click_error = _click_errors()
        if isinstance(exc, usage_error):
            _usage(app, cast(_ClickError, exc))
            sys.exit(2)  # click's code for a usage error
        if isinstance(exc, click_error):  # not usage: e.g. a file it could not open
            error = cast(_ClickError, exc)
            fail(_one_line(error.format_message()))
            sys.exit(error.exit_code)
        if _engine_failure(exc):
            # A Docker call that slipped past the adapter's conversion: still one line.
            detail = " ".join(str(exc).split())
            fail(f"Docker failed: {type(exc).__name__}: {detail}", ENGINE_HINT)
            sys.exit(1)
        raise


def _engine_failure(exc: Exception) -> bool:
    import docker.errors
    import requests
    from python_on_whales.exceptions import DockerException

    engine = (docker.errors.DockerException, requests.RequestException, DockerException)
    return isinstance(exc, engine)


def _click_errors() -> tuple[type[Exception], type[Exception]]:
    """(UsageError, ClickException) of the click that the installed typer parses with.

    typer < 0.26 parses with click itself; 0.26 and later with their own copy of it
    (`typer._click`), whose errors are not `click`'s, so `except click.UsageError` misses
    them. Both export their `BadParameter` as the public `typer.BadParameter`, a subclass of
    that click's `UsageError`, itself a `ClickException`: found through it, no private
    module is imported and the edge follows whichever click typer uses.
    """
    by_name = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
    usage_error = by_name.get("UsageError", typer.BadParameter)
    return usage_error, by_name.get("ClickException", usage_error)


class _ClickError(Protocol):
    """What the edge uses of a click (or typer's own click) error."""

    exit_code: int

    def format_message(self) -> str: ...

    def show(self) -> None: ...


def _usage(app: typer.Typer, exc: _ClickError) -> None:
    """A command-line mistake: one line naming it, one hint pointing at the right help."""
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError":  # a group with no_args_is_help, run bare
        exc.show()  # its message is that group's help
        return
    if ctx is not None:
        command, help_opt = ctx.command_path, (ctx.help_option_names or ["--help"])[0]
        if command.split(" ", 1)[0].endswith(".py"):
            command = f"python {command}"
    else:  # the parser's own errors ("requires an argument") carry no context
        command = " ".join([_program(), *_typed_commands(app, sys.argv[1:])])
        help_opt = "--help"
    fail(_one_line(exc.format_message()), f"try: {command} {help_opt}")


def _program() -> str:
    """How the user ran us: `python start_services.py`, `python -m airig` or `airig`."""
    name = Path(sys.argv[0]).name
    if name == "__main__.py":
        return "python -m airig"
    return f"python {name}" if name.endswith(".py") else name


def _typed_commands(app: typer.Typer, args: list[str]) -> list[str]:
    """The (sub)command names in ARGS, following the app's groups, for the help hint."""
    command, names = typer.main.get_command(app), []
    for word in args:
        subcommands = getattr(command, "commands", None)
        if not subcommands:  # a command, not a group: the rest are its own words
            break
        if word in subcommands:
            command = subcommands[word]
            names.append(word)
    return names


def _one_line(text: str) -> str:
    return " ".join(text.split())
