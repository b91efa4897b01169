"""User-facing output: one rich Console for stdout, one for errors on stderr.

On a terminal rich wraps at its width. Piped or redirected (`status | grep`, `logs >
file`), a line is written whole, as Compose does: rich's default there is 80 columns (or
the width of whichever standard stream is a terminal), which split JSON log lines and
URLs mid-word. An explicit `COLUMNS` still wins.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleDimensions
from rich.markup import escape

# "no limit" for rich: tables and text take the width they need, no more
UNWRAPPED = 1 << 16


class PlainWhenPiped(Console):
    """A rich Console that does not wrap when its file is not a terminal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("width") is None:
            # rich read COLUMNS once, when this module was imported; `size` reads it live
            self._width = None

    @property
    def size(self) -> ConsoleDimensions:
        measured = super().size
        columns = self._environ.get("COLUMNS", "")
        if self._width is not None or self.is_terminal or columns.isdigit():
            return measured
        return ConsoleDimensions(UNWRAPPED, measured.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


console = PlainWhenPiped(highlight=False)
err_console = PlainWhenPiped(stderr=True, highlight=False)


def fail(message: str, hint: str = "") -> None:
    """The one way an error reaches the user: one red line, then the fix.

    Messages quote Docker, drivers and files ("capabilities: [[gpu]]", "[/dev/dri]"):
    escaped, so rich shows them as written instead of reading them as markup.
    """
    err_console.print(f"[bold red]✘ {escape(message)}[/]", soft_wrap=True)
    if hint:
        err_console.print(f"  [yellow]→ {escape(hint)}[/]", soft_wrap=True)
