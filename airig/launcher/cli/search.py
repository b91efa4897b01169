"""`search "query"`: the entries `embed` tasks indexed that lie nearest a query.

Asks the brain's ``POST /v1/search`` (BRAIN_ADMIN_TOKEN), which embeds the query with the
index's own model; prints rank, score, source, timestamp or page, and a snippet.
``--recipe NAME`` is ``--index NAME``: a recipe names its index after itself.

What the brain answers was written by tasks, some of them on untrusted rigs: every text is
printed as plain text (never markup), on one line, with terminal escape sequences and
control and format characters taken out (``\r``, bidirectional overrides, zero-width
marks), so no snippet can hide the ``[untrusted]`` marker before it or redraw the line;
sources and locators are clipped.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from airig.common.errors import AirigError
from airig.launcher.brain_client import BrainClient
from airig.launcher.console import console
from airig.launcher.settings import Settings

INDEX_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")  # task_schemas.INDEX_NAME_PATTERN
SNIPPET_SHOWN = 100
SOURCE_SHOWN = 200
LOCATOR_SHOWN = 80
NAME_SHOWN = 200  # an index's name and model
# A terminal escape sequence, taken out whole (no "[31m" left behind): CSI (ESC [ or
# 0x9b) with its parameters, OSC (ESC ]) up to BEL or ST, or ESC and one character.
ESCAPE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?",
    re.DOTALL,
)
# Unicode categories a terminal does not show as themselves: controls (C0, C1, \r, \t),
# line and paragraph separators (a space instead); format characters (bidirectional
# overrides and isolates, zero-width marks) and lone surrogates (nothing instead).
AS_SPACE = frozenset({"Cc", "Zl", "Zp"})
DROPPED = frozenset({"Cf", "Cs"})


def register(app: typer.Typer, settings_of: Callable[[], Settings]) -> None:
    @app.command()
    def search(
        query: Annotated[str, typer.Argument(help="What to look for, in words.")] = "",
        recipe: Annotated[
            str | None, typer.Option("--recipe", help="The recipe whose index to search.")
        ] = None,
        index: Annotated[
            str | None, typer.Option("--index", help="The index to search (= --recipe).")
        ] = None,
        k: Annotated[int, typer.Option("-k", help="How many results (1..100).")] = 10,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = (
            False
        ),
        list_indexes: Annotated[
            bool, typer.Option("--list", help="List the indexes (model, entries) instead.")
        ] = False,
    ) -> None:
        """Search what embed tasks indexed: the best matches with their source file,
        timestamp or page, and a snippet."""
        if list_indexes:
            found = BrainClient.from_settings(settings_of()).search_indexes()
            if as_json:
                console.print_json(json.dumps({"indexes": found}), ensure_ascii=True)
            else:
                console.print(indexes_table(found))
            return
        name = check(query, recipe, index, k)
        answer = BrainClient.from_settings(settings_of()).search(query.strip(), name, k)
        if as_json:
            # every non-ASCII character as \uXXXX: the same JSON, and no bidirectional
            # override or C1 control reaches the terminal
            console.print_json(json.dumps(answer), ensure_ascii=True)
            return
        console.print(results_table(answer))


def check(query: str, recipe: str | None, index: str | None, k: int) -> str | None:
    """The index to search; bad input is one AirigError (exit 1, no request made)."""
    if not query.strip():
        raise AirigError("no query", 'give one: python start_services.py search "what to find"')
    if not 1 <= k <= 100:
        raise AirigError(f"-k {k} is out of range", "give -k between 1 and 100")
    if recipe and index and recipe != index:
        raise AirigError(
            f"--recipe {recipe} and --index {index} name two indexes", "give one of them"
        )
    name = recipe or index
    if name is not None and not INDEX_NAME.match(name):
        raise AirigError(
            f"{name!r} is not an index name",
            "lowercase letters, digits, '_' and '-', at most 64 (see `search --list`)",
        )
    return name


def printable(value: Any, limit: int) -> str:
    """``value`` as one line of plain text a terminal shows as it is (``ESCAPE``,
    ``AS_SPACE``, ``DROPPED``), runs of white space as one, clipped to ``limit``."""
    text = ESCAPE.sub("", "" if value is None else str(value))
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if category in AS_SPACE:
            kept.append(" ")
        elif category not in DROPPED:
            kept.append(char)
    shown = " ".join("".join(kept).split())
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def results_table(answer: dict[str, Any]) -> Table:
    index = printable(answer.get("index"), NAME_SHOWN)
    model = printable(answer.get("model"), NAME_SHOWN)
    table = Table(title=Text(f"{index} ({model})"))
    for column in ("#", "score", "source", "at", "snippet"):
        table.add_column(column)
    for rank, hit in enumerate(answer["results"], 1):
        snippet = printable(hit.get("snippet"), SNIPPET_SHOWN)
        if hit.get("untrusted"):
            snippet = f"[untrusted] {snippet}"
        # Text, not str: a cell's words are never read as markup or :emoji: codes.
        table.add_row(
            str(rank), f"{hit['score']:.3f}", Text(printable(hit.get("source"), SOURCE_SHOWN)),
            Text(printable(hit.get("locator"), LOCATOR_SHOWN)), Text(snippet),
        )  # fmt: skip
    if not answer["results"]:
        table.caption = "no entries"
    return table


def indexes_table(found: list[dict[str, Any]]) -> Table:
    table = Table(title="search indexes")
    for column in ("index", "model", "dims", "entries"):
        table.add_column(column)
    for info in found:
        table.add_row(
            Text(printable(info.get("name"), NAME_SHOWN)),
            Text(printable(info.get("model"), NAME_SHOWN)),
            printable(info.get("dims"), 20),
            printable(info.get("entries"), 20),
        )
    return table
