"""User-facing output: one rich Console for stdout, one for errors on stderr."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def fail(message: str, hint: str = "") -> None:
    """The one way an error reaches the user: one red line, then the fix.

    Messages quote Docker, drivers and files ("capabilities: [[gpu]]", "[/dev/dri]"):
    escaped, so rich shows them as written instead of reading them as markup.
    """
    err_console.print(f"[bold red]✘ {escape(message)}[/]", soft_wrap=True)
    if hint:
        err_console.print(f"  [yellow]→ {escape(hint)}[/]", soft_wrap=True)
