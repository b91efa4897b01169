"""pdf-text's fan-out over pages (executors/page_sets.py): real PDFs rendered by the real
pages executor, collected into one list, each page read by its own real ocr task (the
onnx engine, as the ``from`` group's items run), and assembled into a text file per PDF;
then lying and hostile group outputs."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from support_media import make_pdf

from airig.common.task_schemas import PagesPayload
from airig.executors.base import run_task
from airig.executors.context import TaskError


@pytest.fixture
def ctx(make_ctx):
    return make_ctx(timeout_s=120)


def group(outputs: list[tuple[str, dict | None, str]]) -> str:
    """A fan-out group's output as a template inserts it: ``(item path, output, state)``."""
    items = [
        {"index": i, "item": {"path": path, "index": i}, "state": state, "output": output,
         "error": None if state == "succeeded" else "bad_input: PDF does not open"}
        for i, (path, output, state) in enumerate(outputs)
    ]  # fmt: skip
    return json.dumps({"items": items, "total": len(items)})


def fails(payload: dict, ctx) -> TaskError:
    with pytest.raises(TaskError) as caught:
        run_task("pages", payload, ctx)
    assert not caught.value.retryable
    return caught.value


def test_two_pdfs_are_read_page_by_page_and_written_back_one_file_each(ctx):
    make_pdf(ctx.data_dir / "a.pdf", [["Invoice 4711"], ["Paid in full"]])
    make_pdf(ctx.data_dir / "b.pdf", [["Brown fox"]])
    rendered = [
        ("a.pdf", run_task("pages", {"pdf": "a.pdf", "out_dir": "outputs/r/a-pages"}, ctx).output),
        ("b.pdf", run_task("pages", {"pdf": "b.pdf", "out_dir": "outputs/r/b-pages"}, ctx).output),
        ("c.pdf", None),  # its render failed: named, the others go on
    ]
    collected = run_task(
        "pages",
        {"collect": group([(p, o, "succeeded" if o else "failed") for p, o in rendered])},
        ctx,
    ).output
    assert [(p["pdf"], p["page"]) for p in collected["pages"]] == [
        ("a.pdf", 1), ("a.pdf", 2), ("b.pdf", 1),
    ]  # fmt: skip
    assert set(collected["pages"][0]) == {"pdf", "stem", "page", "path"}  # no text: data only
    assert collected["failed"] == [{"pdf": "c.pdf", "error": "bad_input: PDF does not open"}]
    # the from group's items, each its own ocr task (here in turn; on a rig, side by side)
    read = []
    for index, page in enumerate(reversed(collected["pages"])):  # finish order is any order
        output = run_task("ocr", {"image": page["path"], "engine": "onnx"}, ctx).output
        read.append({"index": index, "item": {**page, "index": index},
                     "state": "succeeded", "output": output})  # fmt: skip
    read[0] = {**read[0], "state": "failed", "output": None, "error": "timeout: 600 s"}
    assembled = run_task(
        "pages", {"assemble": json.dumps({"items": read}), "out_dir": "outputs/r"}, ctx
    ).output
    assert [f["path"] for f in assembled["files"]] == ["outputs/r/b.txt", "outputs/r/a.txt"]
    text_a = (ctx.data_dir / "outputs/r/a.txt").read_text()
    assert text_a.index("--- page 1 ---") < text_a.index("4711") < text_a.index("--- page 2 ---")
    assert "Paid in full".lower() in text_a.lower()
    text_b = (ctx.data_dir / "outputs/r/b.txt").read_text()
    assert "[page not read: timeout: 600 s]" in text_b  # b's only page failed: it says so
    assert assembled["failed"] == [{"pdf": "b.pdf", "page": 1, "error": "timeout: 600 s"}]
    # the index gets the pages that were read, each with its PDF and page
    assert sorted((d["source"], d["locator"]) for d in assembled["documents"]) == [
        ("a.pdf", "page 1"), ("a.pdf", "page 2"),
    ]  # fmt: skip


def test_a_group_output_that_is_no_group_output_is_refused_in_one_line(ctx):
    for value in ("not json", "[1, 2]", json.dumps({"items": "x"}), "{}"):
        error = fails({"collect": value}, ctx)
        assert "holds no fan-out group output" in error.message and "\n" not in error.message
    error = fails({"assemble": "[]", "out_dir": "outputs/r"}, ctx)
    assert "holds no fan-out group output" in error.message


def test_every_pdf_failing_fails_collect_naming_the_first(ctx):
    error = fails({"collect": group([("x.pdf", None, "failed")])}, ctx)
    assert "no PDF rendered a page" in error.message and "x.pdf" in error.message


def test_items_that_lie_about_where_they_belong_are_left_out(ctx):
    lying = {"items": [
        {"index": 0, "item": {"pdf": "a.pdf", "page": "1"}, "state": "succeeded",
         "output": {"text": "x"}},
        {"index": 1, "item": {"pdf": None, "page": 2}, "state": "succeeded", "output": {}},
        {"index": 2, "item": "a.pdf", "state": "succeeded", "output": {"text": "y"}},
    ]}  # fmt: skip
    error = fails({"assemble": json.dumps(lying), "out_dir": "outputs/r"}, ctx)
    assert "holds no pages of collect's list" in error.message


def test_a_stem_that_leaves_the_folder_writes_inside_it(ctx):
    """A page's pdf and stem are data: ../ in them names no other folder."""
    hostile = {"items": [
        {"index": 0, "item": {"pdf": "../../etc/passwd", "stem": "../../x", "page": 1},
         "state": "succeeded", "output": {"text": "hello"}},
        {"index": 1, "item": {"pdf": "in/a.pdf", "stem": "a", "page": 1},
         "state": "succeeded", "output": {"text": "one"}},
        {"index": 2, "item": {"pdf": "other/a.pdf", "stem": "a", "page": 1},
         "state": "succeeded", "output": {"text": "two"}},
    ]}  # fmt: skip
    output = run_task(
        "pages", {"assemble": json.dumps(hostile), "out_dir": "outputs/r"}, ctx
    ).output
    paths = [f["path"] for f in output["files"]]
    assert all(p.startswith("outputs/r/") and ".." not in p for p in paths)
    assert len(set(paths)) == 3  # one stem, two folders: two files, neither overwritten
    assert not (ctx.data_dir / "etc").exists()


def test_a_text_with_nul_is_written_as_given(ctx):
    read = {"items": [{"index": 0, "item": {"pdf": "a.pdf", "stem": "a", "page": 1},
                       "state": "succeeded", "output": {"text": "a\x00b"}}]}  # fmt: skip
    run_task("pages", {"assemble": json.dumps(read), "out_dir": "outputs/r"}, ctx)
    assert "a\x00b" in (ctx.data_dir / "outputs/r/a.txt").read_text()


def test_the_payload_takes_exactly_one_input_and_assemble_needs_a_folder():
    with pytest.raises(ValidationError, match="exactly one of 'pdf', 'collect' or 'assemble'"):
        PagesPayload.model_validate({"pdf": "a.pdf", "collect": "{}"})
    with pytest.raises(ValidationError, match="exactly one of"):
        PagesPayload.model_validate({})
    with pytest.raises(ValidationError, match="'assemble' needs 'out_dir'"):
        PagesPayload.model_validate({"assemble": "{}"})
    with pytest.raises(ValidationError):
        PagesPayload.model_validate({"collect": "x" * (4 * 1024 * 1024 + 1)})


def test_a_pdf_lying_about_its_page_count_fails_in_one_line_or_gives_what_it_says(ctx):
    make_pdf(ctx.data_dir / "two.pdf", [["Hello"], ["World"]])
    real = (ctx.data_dir / "two.pdf").read_bytes()
    (ctx.data_dir / "nine.pdf").write_bytes(real.replace(b"/Count 2", b"/Count 9"))
    (ctx.data_dir / "one.pdf").write_bytes(real.replace(b"/Count 2", b"/Count 1"))
    error = fails({"pdf": "nine.pdf", "out_dir": "outputs/r/nine"}, ctx)
    assert "'nine.pdf'" in error.message and "\n" not in error.message
    one = run_task("pages", {"pdf": "one.pdf", "out_dir": "outputs/r/one"}, ctx).output
    collected = run_task(
        "pages",
        {"collect": group([("one.pdf", one, "succeeded"), ("nine.pdf", None, "failed")])},
        ctx,
    ).output
    assert [(p["pdf"], p["page"]) for p in collected["pages"]] == [("one.pdf", 1)]
    assert [f["pdf"] for f in collected["failed"]] == ["nine.pdf"]
