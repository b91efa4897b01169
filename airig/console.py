"""User-facing output: one rich Console for stdout, one for errors on stderr."""

from __future__ import annotations

from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def fail(message: str, hint: str = "") -> None:
    """The one way an error reaches the user: one red line, then the fix."""
    err_console.print(f"[bold red]✘ {message}[/]", soft_wrap=True)
    if hint:
        err_console.print(f"  [yellow]→ {hint}[/]", soft_wrap=True)
