"""`search "query"`: the entries `embed` tasks indexed that lie nearest a query.

Asks the brain's ``POST /v1/search`` (BRAIN_ADMIN_TOKEN), which embeds the query with the
index's own model; prints rank, score, source, timestamp or page, and a snippet.
``--recipe NAME`` is ``--index NAME``: a recipe names its index after itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from airig.common.errors import AirigError
from airig.launcher.brain_client import BrainClient
from airig.launcher.console import console
from airig.launcher.settings import Settings

INDEX_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")  # task_schemas.INDEX_NAME_PATTERN
SNIPPET_SHOWN = 100


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
                console.print_json(json.dumps({"indexes": found}))
            else:
                console.print(indexes_table(found))
            return
        name = check(query, recipe, index, k)
        answer = BrainClient.from_settings(settings_of()).search(query.strip(), name, k)
        if as_json:
            console.print_json(json.dumps(answer))
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


def results_table(answer: dict[str, Any]) -> Table:
    table = Table(title=f"{answer['index']} ({answer['model']})")
    for column in ("#", "score", "source", "at", "snippet"):
        table.add_column(column)
    for rank, hit in enumerate(answer["results"], 1):
        snippet = " ".join(str(hit.get("snippet") or "").split())
        if len(snippet) > SNIPPET_SHOWN:
            snippet = snippet[: SNIPPET_SHOWN - 1] + "…"
        if hit.get("untrusted"):
            snippet = f"[untrusted] {snippet}"
        table.add_row(
            str(rank), f"{hit['score']:.3f}", escape(str(hit.get("source") or "")),
            escape(str(hit.get("locator") or "")), escape(snippet),
        )  # fmt: skip
    if not answer["results"]:
        table.caption = "no entries"
    return table


def indexes_table(found: list[dict[str, Any]]) -> Table:
    table = Table(title="search indexes")
    for column in ("index", "model", "dims", "entries"):
        table.add_column(column)
    for info in found:
        table.add_row(escape(info["name"]), escape(info["model"]), str(info["dims"]),
                      str(info["entries"]))  # fmt: skip
    return table
