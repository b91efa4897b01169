"""The pages executor: every page of a PDF as a PNG (poppler's pdftoppm), with the text
of its text layer when it has one (pdftotext -layout, pages split at form feeds)."""

from __future__ import annotations

import re
import time
from typing import Any

from airig.common.task_schemas import PagesPayload
from airig.executors.context import ExecContext, ExecResult, elapsed_ms
from airig.executors.media import (
    bad_input,
    data_relative,
    input_file,
    last_line,
    output_folder,
    run_tool,
    safe_stem,
)

PREFIX = "page"
_PAGES = re.compile(r"^Pages:\s+(\d+)\s*$", re.MULTILINE)
_NUMBER = re.compile(rf"^{PREFIX}-0*(\d+)\.png$")


def execute_pages(payload: PagesPayload, ctx: ExecContext) -> ExecResult:
    start = time.monotonic()
    pdf = input_file(ctx, payload.pdf, "PDF")
    total = page_count(ctx, pdf, payload.pdf)
    last = min(total, payload.max_pages)
    folder, folder_rel = output_folder(ctx, payload.out_dir, f"pages/{safe_stem(payload.pdf)}")
    for stale in folder.glob(f"{PREFIX}-*.png"):
        stale.unlink()  # a retry or a second run: only this run's pages are listed
    argv = [
        "pdftoppm",
        "-png",
        "-r",
        str(payload.dpi),
        "-f",
        "1",
        "-l",
        str(last),
        str(pdf),
        str(folder / PREFIX),
    ]
    result = run_tool(ctx, argv)
    if result.returncode != 0:
        raise bad_input(f"PDF {payload.pdf!r} does not render: {last_line(result.stderr)}")
    images: dict[int, str] = {}
    for path in folder.glob(f"{PREFIX}-*.png"):
        match = _NUMBER.match(path.name)
        if match:
            images[int(match.group(1))] = data_relative(ctx, path)
    texts = page_texts(ctx, pdf, last)
    pages = [
        {"page": n, "path": images[n], "text": texts[n - 1] if n <= len(texts) else ""}
        for n in sorted(images)
    ]
    has_text = any(n <= len(texts) and texts[n - 1].strip() for n in images)
    output: dict[str, Any] = {
        "pages": pages,
        "count": len(pages),
        "has_text": has_text,
        "pdf": payload.pdf,
        "total_pages": total,
        "out_dir": folder_rel,
    }
    return ExecResult(output=output, metrics={"wall_ms": elapsed_ms(start), "pages": len(pages)})


def page_count(ctx: ExecContext, pdf: Any, relative: str) -> int:
    """The PDF's page count (pdfinfo); a file poppler cannot open, or one without pages,
    is refused."""
    result = run_tool(ctx, ["pdfinfo", str(pdf)])
    text = result.stdout.decode("utf-8", "replace")
    match = _PAGES.search(text)
    if "page count 0" in result.stderr or (match is not None and int(match.group(1)) == 0):
        raise bad_input(f"PDF {relative!r} has no pages", hint="give a PDF with at least one page")
    if result.returncode != 0 or match is None:
        raise bad_input(
            f"PDF {relative!r} does not open: {last_line(result.stderr)}",
            hint="give a complete, unencrypted PDF file",
        )
    return int(match.group(1))


def page_texts(ctx: ExecContext, pdf: Any, last: int) -> list[str]:
    """Each page's text layer, in order (pdftotext ends every page with a form feed)."""
    result = run_tool(
        ctx, ["pdftotext", "-layout", "-enc", "UTF-8", "-f", "1", "-l", str(last), str(pdf), "-"]
    )
    if result.returncode != 0:
        return []
    text = result.stdout.decode("utf-8", "replace")
    parts = text.split("\f")
    return [part.strip("\n") for part in parts[:last]]
