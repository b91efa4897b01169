"""The pages executor: every page of a PDF as a PNG (poppler's pdftoppm), with the text
of its text layer when it has one (pdftotext -layout, pages split at form feeds).

Each page's size is read first (pdfinfo -box): pdftoppm renders a page's MediaBox, and a
1 KB PDF declaring a 200-inch page makes it allocate gigabytes at 600 dpi. A page whose
pixels at the asked dpi pass the pixel budget (AIRIG_MAX_IMAGE_PIXELS) is refused before
pdftoppm runs, naming the page and the dpi at which it would fit.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

from airig.common.task_schemas import PagesPayload
from airig.executors import page_sets
from airig.executors.context import ExecContext, ExecResult, elapsed_ms
from airig.executors.media import (
    bad_input,
    check_pixels,
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
# pdfinfo -box: "Page    3 MediaBox:     0.00     0.00   595.00   842.00" (points)
_MEDIA_BOX = re.compile(r"^Page\s+(\d+)\s+MediaBox:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$", re.M)
# the lowest dpi a pages task takes
MIN_DPI = next(rule.ge for rule in PagesPayload.model_fields["dpi"].metadata if hasattr(rule, "ge"))


def execute_pages(payload: PagesPayload, ctx: ExecContext) -> ExecResult:
    if payload.collect is not None:  # the steps around a fan-out over pages
        return page_sets.execute_collect(payload, ctx)
    if payload.assemble is not None:
        return page_sets.execute_assemble(payload, ctx)
    assert payload.pdf is not None  # the schema requires one of the three
    start = time.monotonic()
    pdf = input_file(ctx, payload.pdf, "PDF")
    total, boxes = page_boxes(ctx, pdf, payload.pdf, payload.max_pages)
    last = min(total, payload.max_pages)
    for number in range(1, last + 1):
        check_page(ctx, payload.pdf, number, boxes.get(number), payload.dpi)
    folder, folder_rel = output_folder(
        ctx, payload.out_dir, f"outputs/pages/{safe_stem(payload.pdf)}"
    )
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


def page_boxes(
    ctx: ExecContext, pdf: Any, relative: str, max_pages: int
) -> tuple[int, dict[int, tuple[float, float]]]:
    """The PDF's page count and each of its first ``max_pages`` pages' MediaBox width and
    height in points (pdfinfo -box); a file poppler cannot open, or one without pages, is
    refused."""
    argv = ["pdfinfo", "-box", "-f", "1", "-l", str(max_pages), str(pdf)]
    result = run_tool(ctx, argv)
    text = result.stdout.decode("utf-8", "replace")
    match = _PAGES.search(text)
    if "page count 0" in result.stderr or (match is not None and int(match.group(1)) == 0):
        raise bad_input(f"PDF {relative!r} has no pages", hint="give a PDF with at least one page")
    if result.returncode != 0 or match is None:
        raise bad_input(
            f"PDF {relative!r} does not open: {last_line(result.stderr)}",
            hint="give a complete, unencrypted PDF file",
        )
    boxes: dict[int, tuple[float, float]] = {}
    for number, *corners in _MEDIA_BOX.findall(text):
        try:
            x1, y1, x2, y2 = (float(value) for value in corners)
        except ValueError:
            continue  # no size: check_page refuses the page
        boxes[int(number)] = (abs(x2 - x1), abs(y2 - y1))
    return int(match.group(1)), boxes


def check_page(
    ctx: ExecContext, relative: str, number: int, box: tuple[float, float] | None, dpi: int
) -> None:
    """Refuse page ``number`` when it has no size, or when pdftoppm would render more
    pixels at ``dpi`` than the budget: the message names the page, the hint the dpi at
    which it fits."""
    if box is None or not all(side > 0 and math.isfinite(side * dpi * dpi) for side in box):
        raise bad_input(
            f"PDF {relative!r} page {number} has no usable size (MediaBox)",
            hint="give a complete PDF file",
        )
    width, height = rendered(box, dpi)
    fits = fitting_dpi(box, ctx.max_image_pixels, dpi)
    if fits >= MIN_DPI:
        hint = (
            f"give dpi: {fits} or less (that page fits there), or raise "
            "AIRIG_MAX_IMAGE_PIXELS in .env"
        )
    else:
        hint = (
            f"the page is too large even at dpi {MIN_DPI}: raise AIRIG_MAX_IMAGE_PIXELS in "
            ".env, or crop the PDF's pages"
        )
    check_pixels(
        ctx,
        f"PDF {relative!r} page {number} is {box[0]:g} x {box[1]:g} pt: {width} x {height} "
        f"pixels at {dpi} dpi",
        width * height,
        hint=hint,
    )


def rendered(box: tuple[float, float], dpi: int) -> tuple[int, int]:
    """The pixels pdftoppm makes of a ``box`` (points) at ``dpi``, rounded up."""
    return math.ceil(box[0] * dpi / 72), math.ceil(box[1] * dpi / 72)


def fitting_dpi(box: tuple[float, float], budget: int, dpi: int) -> int:
    """The highest whole dpi, at most ``dpi``, at which the page is within ``budget``
    pixels (0 when none is)."""
    fits = min(dpi, math.floor(72 * math.sqrt(budget / (box[0] * box[1]))))
    while fits > 0 and math.prod(rendered(box, fits)) > budget:
        fits -= 1
    return max(fits, 0)


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
