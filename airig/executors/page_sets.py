"""A folder of PDFs read page by page across workers (recipes/pdf-text.yaml): the ``pages``
task's two steps around a fan-out over pages.

A group cannot hold another group (PLANS.md, "Fan-out"), so "for each PDF, for each page"
is three flat steps: a ``glob`` group renders each PDF (``pages`` with ``pdf``); one
``collect`` task makes its output one list of pages, which a ``from`` group fans out over,
one ``ocr`` task a page on whichever worker is free; one ``assemble`` task writes the pages
read back into one text file per PDF (the ``note`` executor's ``pages`` format: a
``--- page N ---`` line before each page) and returns their pages as documents for the
search index.

Items of a ``from`` list are data the brain checks (no ``{{``, no control characters in
what reads as a path): the list holds only each page's PDF, stem, number and image, never
the PDF's own text. A PDF that failed to render, or a page whose OCR failed, is named in
the output (``failed``) and its file says so in that page's place; the others go on.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from airig.common.task_schemas import NotePayload, PagesPayload
from airig.executors.context import ExecContext, ExecResult, elapsed_ms, output_file_path
from airig.executors.media import bad_input, loads_lenient, output_folder, safe_stem
from airig.executors.note import pages_note, write_whole


def _items(value: Any, what: str) -> list[dict[str, Any]]:
    """The ``items`` of a fan-out group's output (``{{ tasks.<group>.output }}``)."""
    data = loads_lenient(value)
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise bad_input(
            f"{what} holds no fan-out group output (no 'items' list)",
            hint=f'pass "{{{{ tasks.<group>.output }}}}" of the group of {what} tasks',
        )
    return [item for item in items if isinstance(item, dict)]


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _error_of(item: dict[str, Any]) -> str:
    return str(item.get("error") or item.get("state") or "failed")[:300]


def execute_collect(payload: PagesPayload, ctx: ExecContext) -> ExecResult:
    """Every page the group's pages tasks rendered, in PDF then page order."""
    start = time.monotonic()
    pages: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    pdfs: list[dict[str, Any]] = []
    for item in _items(payload.collect, "pages"):
        ctx.check()
        output = item.get("output")
        source = _mapping(item.get("item"))
        pdf = str(_mapping(output).get("pdf") or source.get("path") or f"item {item.get('index')}")
        if item.get("state") != "succeeded" or not isinstance(output, dict):
            failed.append({"pdf": pdf, "error": _error_of(item)})
            continue
        rendered = [p for p in output.get("pages") or [] if isinstance(p, dict)]
        stem = safe_stem(pdf)
        for page in rendered:
            if isinstance(page.get("page"), int) and isinstance(page.get("path"), str):
                pages.append({"pdf": pdf, "stem": stem, "page": page["page"], "path": page["path"]})
        pdfs.append({"pdf": pdf, "stem": stem, "pages": len(rendered)})
    if not pages:
        raise bad_input(
            f"no PDF rendered a page ({len(failed)} failed"
            + (f"; the first: {failed[0]['pdf']}: {failed[0]['error']})" if failed else ")"),
            hint="give PDFs that open (pdfinfo) and have pages",
        )
    output = {"pages": pages, "pdfs": pdfs, "count": len(pages), "failed": failed}
    return ExecResult(output=output, metrics={"wall_ms": elapsed_ms(start), "pages": len(pages)})


def execute_assemble(payload: PagesPayload, ctx: ExecContext) -> ExecResult:
    """One text file per PDF of the pages an ocr group read, and each page as a document."""
    start = time.monotonic()
    assert payload.out_dir is not None  # the schema requires it with assemble
    folder, folder_rel = output_folder(ctx, payload.out_dir, payload.out_dir)
    by_pdf: dict[str, list[tuple[int, str]]] = defaultdict(list)
    stems: dict[str, str] = {}
    failed: list[dict[str, Any]] = []
    for item in _items(payload.assemble, "ocr"):
        page = _mapping(item.get("item"))
        pdf, number = page.get("pdf"), page.get("page")
        if not isinstance(pdf, str) or not isinstance(number, int):
            continue  # not an item of collect's list: nothing says where it belongs
        stems.setdefault(pdf, safe_stem(str(page.get("stem") or pdf)))
        output = item.get("output")
        if item.get("state") == "succeeded" and isinstance(output, dict):
            by_pdf[pdf].append((number, str(output.get("text") or "")))
        else:
            error = _error_of(item)
            failed.append({"pdf": pdf, "page": number, "error": error})
            by_pdf[pdf].append((number, f"[page not read: {error}]"))
    if not by_pdf:
        raise bad_input(
            "ocr holds no pages of collect's list (each item needs its pdf and page)",
            hint='pass "{{ tasks.<ocr group>.output }}" of a group over collect\'s pages',
        )
    unread = {(f["pdf"], f["page"]) for f in failed}
    files: list[dict[str, Any]] = []
    documents: list[dict[str, Any]] = []
    taken: set[str] = set()
    for pdf, read in by_pdf.items():
        ctx.check()
        stem = stems[pdf]
        name = stem if stem not in taken else f"{stem}-{len(taken)}"  # one stem, two folders
        taken.add(name)
        relative = f"{folder_rel}/{name}.txt"
        target = output_file_path(ctx.data_dir, relative, "text file")
        pages = [{"page": number, "text": text} for number, text in sorted(read)]
        note = NotePayload(path=relative, kind="pages", title=stem, source=pdf, pages=pages)
        text, found = pages_note(note, pdf)
        data = text.encode("utf-8")
        write_whole(folder, target.name, data)
        files.append({"pdf": pdf, "path": relative, "pages": len(pages), "bytes": len(data)})
        documents += [d for d in found if (pdf, _page_of(d)) not in unread]
    output = {"files": files, "documents": documents, "count": len(files), "failed": failed}
    return ExecResult(output=output, metrics={"wall_ms": elapsed_ms(start), "files": len(files)})


def _page_of(document: dict[str, Any]) -> int | None:
    locator = str(document.get("locator") or "")
    number = locator.removeprefix("page ").strip()
    return int(number) if number.isdigit() else None
