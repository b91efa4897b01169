"""The html executor: an HTML page's text as a reader sees it, written as a plain
text file on the data volume, and its chunks as ``documents`` for an embed task's index
(the ``zim-articles`` recipe: an archive's articles -> text -> the search index).

The text is inscriptis' rendering (Apache-2.0; lxml's parser): block elements on lines of
their own, lists and tables laid out, ``<script>`` and ``<style>`` left out, entities
decoded. Hand-written tag stripping gets all of these wrong, and html2text (the other
common choice) is GPL, which the kit does not ship.

Chunks are paragraphs packed up to ``chunk_chars`` (a paragraph longer than that split at
a space), each led by the page's title so a hit reads on its own; each carries the
payload's ``source`` (the recipe's: the entry's title and its path in the archive) and
``part N`` as its locator.
"""

from __future__ import annotations

import re
import time
from typing import Any

from inscriptis import get_text  # type: ignore[import-untyped]

from airig.common.task_schemas import MAX_EMBED_INPUTS, HtmlPayload
from airig.executors.context import ExecContext, ExecResult, elapsed_ms, output_file_path
from airig.executors.media import bad_input, input_file
from airig.executors.note import spoken_title, write_whole

# An article of a Wikipedia archive is at most a few MB; past this it is no page to read.
MAX_HTML_BYTES = 16 * 1024 * 1024
# What lxml refuses in a text (it takes no NUL or C0 control but tab and newlines).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BLANKS = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
_TRAILING = re.compile(r"[ \t]+\n")


def execute_html(payload: HtmlPayload, ctx: ExecContext) -> ExecResult:
    start = time.monotonic()
    source = input_file(ctx, payload.html, "HTML page")
    size = source.stat().st_size
    if size > MAX_HTML_BYTES:
        raise bad_input(f"HTML page {payload.html!r} is {size} bytes, over {MAX_HTML_BYTES}",
                        hint="give an article, not an archive or a dump")  # fmt: skip
    target = output_file_path(ctx.data_dir, payload.path, "text path")
    if target.is_dir() and not target.is_symlink():
        raise bad_input(f"path {payload.path!r} is a folder", hint="name the file to write")
    text = page_text(source.read_bytes())
    lines = [payload.title, "", text] if payload.title else [text]
    data = ("\n".join(lines).strip() + "\n").encode("utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_whole(target.parent, target.name, data)
    pieces = chunks(text, payload.chunk_chars)
    where = payload.source or payload.html
    lead = f"{spoken_title(payload.title)}\n\n" if payload.title else ""
    documents = [{"text": lead + piece, "source": where, "locator": f"part {number}"}
                 for number, piece in enumerate(pieces[:MAX_EMBED_INPUTS], start=1)]  # fmt: skip
    output: dict[str, Any] = {
        "path": target.relative_to(ctx.data_dir.resolve()).as_posix(),
        "bytes": len(data),
        "chars": len(text),
        "documents": documents,
    }
    if len(pieces) > MAX_EMBED_INPUTS:  # what one embed task takes; said, never silent
        output["documents_left_out"] = len(pieces) - MAX_EMBED_INPUTS
    return ExecResult(output=output, metrics={"wall_ms": elapsed_ms(start)})


def page_text(raw: bytes) -> str:
    """The page's text: UTF-8 (what ZIM archives and the web write; a bad byte becomes
    U+FFFD), a leading byte-order mark dropped, control characters out, rendered."""
    html = _CONTROL.sub(" ", raw.decode("utf-8", "replace").removeprefix("\ufeff"))
    if not html.strip():
        return ""
    try:
        text = get_text(html)
    except (ValueError, RecursionError) as exc:  # lxml's refusal of what it cannot parse
        raise bad_input(f"the HTML page cannot be read: {' '.join(str(exc).split())[:200]}",
                        hint="give an HTML document") from None  # fmt: skip
    text = _TRAILING.sub("\n", text.replace("\r\n", "\n"))
    return _BLANKS.sub("\n\n", text).strip()


def chunks(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, paragraphs kept together where
    they fit; a longer paragraph is cut at the last space before the limit."""
    out: list[str] = []
    piece = ""
    for paragraph in (p.strip() for p in re.split(r"\n\s*\n", text)):
        if not paragraph:
            continue
        while len(paragraph) > limit:
            cut = paragraph.rfind(" ", limit // 2, limit)
            cut = cut if cut > 0 else limit
            head, paragraph = paragraph[:cut].rstrip(), paragraph[cut:].lstrip()
            if piece:
                out.append(piece)
                piece = ""
            out.append(head)
        if piece and len(piece) + 2 + len(paragraph) > limit:
            out.append(piece)
            piece = ""
        piece = f"{piece}\n\n{paragraph}" if piece else paragraph
    if piece:
        out.append(piece)
    return out
